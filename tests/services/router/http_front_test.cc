// The router's OpenAI-compatible HTTP front over a real in-process cluster (cluster_fixture.h):
// each error status with its body, the same tokens as gRPC Generate, SSE framing, and metrics.
#include "services/router/http_front.h"

#include <gmock/gmock.h>
#include <httplib.h>

#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "prometheus/text_serializer.h"
#include "services/router/api_keys.h"
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
  // Starts a 400-token stream on another thread and returns once its first chunk arrived: the
  // request holds its admission slot (and its key's) until the thread is joined.
  std::thread HoldAStream(const httplib::Headers& headers) {
    auto started = std::make_shared<std::atomic<bool>>(false);
    std::thread holder([this, headers, started] {
      Json body = Completion(TestPrompt(2), 400);
      body["stream"] = true;
      httplib::Request req;
      req.method = "POST";
      req.path = "/v1/completions";
      req.body = body.dump();
      req.headers = headers;
      req.set_header("Content-Type", "application/json");
      req.content_receiver = [started](const char*, size_t, uint64_t, uint64_t) {
        *started = true;
        return true;
      };
      Client().send(req);
    });
    while (!*started) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    return holder;
  }
  static httplib::Headers Bearer(const std::string& key) {
    return {{"Authorization", "Bearer " + key}};
  }
  // Restarts the router requiring the keys of a file: "sk-a" (one request at once), "sk-b",
  // "sk-old" (revoked) and "sk-c" (10 tokens a minute).
  void RestartRouterWithKeys() {
    api_keys_path_ = ::testing::TempDir() + "/http_front_test_keys.json";
    Json keys{{"keys",
               {{{"id", "a"}, {"sha256", Sha256Hex("sk-a")}, {"max_concurrent", 1}},
                {{"id", "b"}, {"sha256", Sha256Hex("sk-b")}},
                {{"id", "old"}, {"sha256", Sha256Hex("sk-old")}, {"revoked", true}},
                {{"id", "c"}, {"sha256", Sha256Hex("sk-c")}, {"tokens_per_minute", 10}}}}};
    std::ofstream(api_keys_path_) << keys.dump();
    router_.reset();
    StartRouter(250);
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
  std::thread holder = HoldAStream({});
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
    v1::Method m = v1::AR;
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
  // A stream is counted once its last byte is written, which the client may see first.
  const std::string six =
      "specdec_http_requests_total{code=\"200\",endpoint=\"/v1/completions\"} 6";
  for (int i = 0; i < 100 && Metrics().find(six) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_THAT(Metrics(), ::testing::HasSubstr(six));
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

TEST_F(HttpFrontTest, KeysAreRequiredCheckedAndLimitedPerKey) {
  RestartRouterWithKeys();
  const std::string body = Completion(TestPrompt(1), 2).dump();
  EXPECT_EQ(ExpectError(Post("/v1/completions", body), 401)["type"], "authentication_error");
  ExpectError(Post("/v1/completions", body, Bearer("sk-wrong")), 401);
  Json e = ExpectError(Post("/v1/completions", body, Bearer("sk-old")), 403);
  EXPECT_THAT(e["message"].get<std::string>(), ::testing::HasSubstr("revoked"));
  ExpectError(Client().Get("/v1/models"), 401);
  auto models = Client().Get("/v1/models", Bearer("sk-b"));
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  auto health = Client().Get("/health");  // probes carry no key
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);

  // Key a's one slot held by a stream: a second request of a is refused, b's is served.
  std::thread holder = HoldAStream(Bearer("sk-a"));
  auto over = Post("/v1/completions", body, Bearer("sk-a"));
  EXPECT_EQ(ExpectError(over, 429)["type"], "rate_limit_error");
  EXPECT_EQ(over->get_header_value("Retry-After"), "1");
  auto other = Post("/v1/completions", body, Bearer("sk-b"));
  ASSERT_TRUE(other);
  EXPECT_EQ(other->status, 200) << other->body;
  holder.join();
  EXPECT_THAT(Metrics(),
              ::testing::HasSubstr(
                  "specdec_api_key_requests_total{code=\"RESOURCE_EXHAUSTED\",key_id=\"a\"} 1"));

  // Key c's 10 tokens a minute: 7 prompt + 2 completion tokens a request; the second request
  // starts with 1 token left and ends in debt, the third waits for the debt to refill.
  for (int i = 0; i < 2; ++i) {
    auto served = Post("/v1/completions", body, Bearer("sk-c"));
    ASSERT_TRUE(served);
    EXPECT_EQ(served->status, 200) << served->body;
  }
  auto broke = Post("/v1/completions", body, Bearer("sk-c"));
  EXPECT_THAT(ExpectError(broke, 429)["message"].get<std::string>(),
              ::testing::HasSubstr("10 tokens per minute"));
  int retry_s = 0;
  EXPECT_TRUE(absl::SimpleAtoi(broke->get_header_value("Retry-After"), &retry_s));
  EXPECT_GE(retry_s, 30);  // 8 tokens of debt at 10 a minute: about 48 s
  EXPECT_EQ(Post("/v1/completions", body, Bearer("sk-b"))->status, 200);

  // gRPC presents the key as "authorization" metadata.
  grpc::ClientContext none;
  v1::GenerateResponse r;
  auto refused = stub_->Generate(&none, Request(TestPrompt(1), v1::AR, 2));
  while (refused->Read(&r)) {
  }
  EXPECT_EQ(refused->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext keyed;
  keyed.AddMetadata("authorization", "Bearer sk-b");
  auto served = stub_->Generate(&keyed, Request(TestPrompt(1), v1::AR, 2));
  int chunks = 0;
  while (served->Read(&r)) ++chunks;
  EXPECT_TRUE(served->Finish().ok());
  EXPECT_GE(chunks, 2);
}

}  // namespace
}  // namespace specdec::services::cluster_testing
