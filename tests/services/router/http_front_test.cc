// The router's OpenAI-compatible HTTP front over a real in-process cluster (cluster_fixture.h):
// each error status with its body, the same tokens as gRPC Generate, SSE framing, and metrics.
#include "services/router/http_front.h"

#include <gmock/gmock.h>
#include <httplib.h>

#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "prometheus/text_serializer.h"
#include "tests/services/router/cluster_fixture.h"

namespace specdec::services::cluster_testing {
namespace {

using Json = nlohmann::json;

class HttpFrontTest : public ClusterTest {
 protected:
  httplib::Client Client() {
    httplib::Client c("127.0.0.1", router_->http_port());
    c.set_read_timeout(60, 0);
    return c;
  }
  httplib::Result Post(const std::string& path, const std::string& body,
                       const httplib::Headers& headers = {}) {
    return Client().Post(path, headers, body, "application/json");
  }
  // The error body's fields, after checking the status and the shape.
  Json ExpectError(const httplib::Result& r, int status) {
    EXPECT_TRUE(r) << "no response";
    if (!r) return Json();
    EXPECT_EQ(r->status, status) << r->body;
    Json j = Json::parse(r->body, nullptr, false);
    EXPECT_TRUE(j.contains("error")) << r->body;
    if (!j.contains("error")) return Json();
    for (const char* key : {"message", "type", "param", "code"}) {
      EXPECT_TRUE(j["error"].contains(key)) << key << " missing in " << r->body;
    }
    return j["error"];
  }
  static Json Completion(const std::vector<int32_t>& prompt, int max_tokens,
                         const std::string& method = "AR") {
    return Json{{"prompt", prompt},
                {"max_tokens", max_tokens},
                {"temperature", 0},
                {"ignore_eos", true},
                {"speculative", {{"method", method}}}};
  }
  std::string Metrics() {
    return prometheus::TextSerializer().Serialize(router_->registry().Collect());
  }
};

TEST_F(HttpFrontTest, BadBodiesAre400WithTheFieldNamed) {
  Json e = ExpectError(Post("/v1/completions", "{not json"), 400);
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_THAT(e["message"].get<std::string>(), ::testing::HasSubstr("not valid JSON"));

  Json body = Completion(TestPrompt(1), 4);
  body["temperature"] = "hot";
  e = ExpectError(Post("/v1/completions", body.dump()), 400);
  EXPECT_EQ(e["param"], "temperature");

  body = Completion(TestPrompt(1), 4);
  body["n"] = 3;
  EXPECT_EQ(ExpectError(Post("/v1/completions", body.dump()), 400)["param"], "n");

  body = Completion(TestPrompt(1), 4);
  body["speculative"]["method"] = "MAGIC";
  EXPECT_EQ(ExpectError(Post("/v1/completions", body.dump()), 400)["param"], "speculative.method");

  // Ranges are the router's one validation, as for gRPC: a token outside the vocabulary.
  e = ExpectError(Post("/v1/completions", Completion({1, 2, 9999}, 4).dump()), 400);
  EXPECT_THAT(e["message"].get<std::string>(), ::testing::HasSubstr("9999"));

  e = ExpectError(Post("/v1/completions", Json{{"max_tokens", 4}}.dump()), 400);
  EXPECT_EQ(e["param"], "prompt");
}

TEST_F(HttpFrontTest, ChatWithoutATemplateIs400AndCompletionsStillServe) {
  Json chat{{"messages", {{{"role", "user"}, {"content", "hi"}}}}, {"max_tokens", 2}};
  Json e = ExpectError(Post("/v1/chat/completions", chat.dump()), 400);
  EXPECT_THAT(e["message"].get<std::string>(), ::testing::HasSubstr("chat template"));
  auto r = Post("/v1/completions", Completion(TestPrompt(1), 2).dump());
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
}

TEST_F(HttpFrontTest, UnknownModelsAndRoutesAre404) {
  Json body = Completion(TestPrompt(1), 2);
  body["model"] = "no-such-model";
  Json e = ExpectError(Post("/v1/completions", body.dump()), 404);
  EXPECT_EQ(e["code"], "model_not_found");
  EXPECT_THAT(e["message"].get<std::string>(), ::testing::HasSubstr("no-such-model"));
  ExpectError(Client().Get("/v1/nothing"), 404);
}

TEST_F(HttpFrontTest, AFullQueueIs429WithRetryAfter) {
  RestartRouterWithAdmission(/*max_active=*/1, /*max_queued=*/0, /*queue_timeout_ms=*/1000);
  // A long stream holds the only slot while the second request arrives.
  std::atomic<bool> started{false};
  std::thread holder([&] {
    Json body = Completion(TestPrompt(2), 400);
    body["stream"] = true;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      started = true;
      return true;
    };
    Client().send(req);
  });
  while (!started) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  auto r = Post("/v1/completions", Completion(TestPrompt(1), 2).dump());
  Json e = ExpectError(r, 429);
  EXPECT_EQ(e["type"], "rate_limit_error");
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  holder.join();
}

TEST_F(HttpFrontTest, APassedDeadlineIs504) {
  Json e = ExpectError(Post("/v1/completions", Completion(TestPrompt(3), 400).dump(),
                            {{"X-Request-Timeout-Ms", "1"}}),
                       504);
  EXPECT_EQ(e["type"], "timeout_error");
}

TEST_F(HttpFrontTest, NoHealthyTargetIs503) {
  target_.reset();
  int health = 0;
  for (int i = 0; i < 100 && health != 503; ++i) {  // the router probes replicas every second
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto r = Client().Get("/health");
    health = r ? r->status : 0;
  }
  EXPECT_EQ(health, 503);
  auto r = Post("/v1/completions", Completion(TestPrompt(1), 2).dump());
  Json e = ExpectError(r, 503);
  EXPECT_EQ(e["type"], "service_unavailable_error");
}

TEST_F(HttpFrontTest, WholeAndStreamedResponsesCarryGrpcsTokens) {
  for (const char* method : {"AR", "DFLASH", "DRAFT_CHAIN"}) {
    SCOPED_TRACE(method);
    v1::Method m;
    ASSERT_TRUE(v1::Method_Parse(method, &m));
    const Result grpc = Generate(Request(TestPrompt(2), m, 12));
    ASSERT_TRUE(grpc.status.ok()) << grpc.status.error_message();

    auto whole = Post("/v1/completions", Completion(TestPrompt(2), 12, method).dump());
    ASSERT_TRUE(whole);
    ASSERT_EQ(whole->status, 200) << whole->body;
    Json j = Json::parse(whole->body);
    EXPECT_EQ(j["object"], "text_completion");
    EXPECT_EQ(j["specdec"]["token_ids"].get<std::vector<int32_t>>(), grpc.tokens);
    EXPECT_EQ(j["usage"]["completion_tokens"], 12);
    EXPECT_EQ(j["usage"]["total_tokens"], 12 + TestPrompt(2).size());
    EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(j["specdec"]["method"], method);

    Json body = Completion(TestPrompt(2), 12, method);
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    auto streamed = Post("/v1/completions", body.dump());
    ASSERT_TRUE(streamed);
    ASSERT_EQ(streamed->status, 200);
    EXPECT_EQ(streamed->get_header_value("Content-Type"), "text/event-stream");
    std::vector<int32_t> ids;
    std::vector<Json> events;
    for (absl::string_view line : absl::StrSplit(streamed->body, "\n\n", absl::SkipEmpty())) {
      ASSERT_TRUE(absl::StartsWith(line, "data: ")) << line;
      line.remove_prefix(6);
      if (line == "[DONE]") {
        events.push_back(Json("DONE"));
        continue;
      }
      events.push_back(Json::parse(line));
      if (!events.back()["choices"].empty() && events.back().contains("specdec")) {
        for (int32_t t : events.back()["specdec"]["token_ids"]) ids.push_back(t);
      }
    }
    EXPECT_EQ(ids, grpc.tokens);
    ASSERT_GE(events.size(), 3u);
    EXPECT_EQ(events.back(), Json("DONE"));
    const Json& usage = events[events.size() - 2];
    EXPECT_TRUE(usage["choices"].empty());
    EXPECT_EQ(usage["usage"]["completion_tokens"], 12);
    EXPECT_EQ(events[events.size() - 3]["choices"][0]["finish_reason"], "length");
  }
  EXPECT_THAT(Metrics(),
              ::testing::HasSubstr(
                  "specdec_http_requests_total{code=\"200\",endpoint=\"/v1/completions\"} 6"));
}

TEST_F(HttpFrontTest, ModelsAndHealthAnswer) {
  auto models = Client().Get("/v1/models");
  ASSERT_TRUE(models);
  ASSERT_EQ(models->status, 200);
  Json j = Json::parse(models->body);
  EXPECT_EQ(j["object"], "list");
  ASSERT_FALSE(j["data"].empty());
  EXPECT_EQ(j["data"][0]["max_model_len"], 512);
  auto health = Client().Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(Json::parse(health->body)["status"], "ok");
}

}  // namespace
}  // namespace specdec::services::cluster_testing
