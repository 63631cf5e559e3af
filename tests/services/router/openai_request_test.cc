// The OpenAI request bodies read into GenerateRequest, and the responses and errors written back.
#include "services/router/openai_request.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "absl/strings/match.h"
#include "common/chat/chat_template.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "services/router/openai_response.h"

namespace specdec::services {
namespace {

using Json = nlohmann::json;
using ::testing::HasSubstr;

absl::StatusOr<OpenAiRequest> Completion(const Json& body) {
  return ParseCompletionRequest(body.dump(), 16);
}

TEST(OpenAiRequestTest, CompletionDefaultsAreOpenAisAndExtensionsAreRead) {
  auto r = Completion(Json{{"prompt", "def f():"}, {"model", "m"}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.text(), "def f():");
  EXPECT_EQ(r->request.max_new_tokens(), 16);
  EXPECT_FLOAT_EQ(r->request.sampling().temperature(), 1.0f);
  EXPECT_FLOAT_EQ(r->request.sampling().top_p(), 1.0f);
  EXPECT_TRUE(r->request.return_text());
  EXPECT_FALSE(r->stream);
  EXPECT_EQ(r->request.model(), "m");

  r = Completion(Json{{"prompt", {1, 2, 3}},
                      {"max_tokens", 7},
                      {"temperature", 0},
                      {"top_k", -1},
                      {"seed", 42},
                      {"stop", "\n"},
                      {"stream", true},
                      {"stream_options", {{"include_usage", true}}},
                      {"ignore_eos", true},
                      {"speculative", {{"method", "dflash"}, {"block_size", 4}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->request.token_ids().ids(), ::testing::ElementsAre(1, 2, 3));
  EXPECT_EQ(r->request.max_new_tokens(), 7);
  EXPECT_EQ(r->request.sampling().temperature(), 0.0f);
  EXPECT_EQ(r->request.sampling().top_k(), 0);
  EXPECT_EQ(r->request.sampling().seed(), 42u);
  EXPECT_THAT(r->request.stop(), ::testing::ElementsAre("\n"));
  EXPECT_TRUE(r->stream && r->include_usage && r->request.ignore_eos());
  EXPECT_EQ(r->request.method(), v1::DFLASH);
  EXPECT_EQ(r->request.block_size(), 4);
}

TEST(OpenAiRequestTest, OnePromptInAnArrayIsThePrompt) {
  auto r = Completion(Json{{"prompt", {"abc"}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.text(), "abc");
  r = Completion(Json{{"prompt", {{4, 5}}}});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->request.token_ids().ids(), ::testing::ElementsAre(4, 5));
  auto batched = Completion(Json{{"prompt", {"a", "b"}}});
  EXPECT_THAT(batched.status().message(), HasSubstr("batched prompts"));
}

TEST(OpenAiRequestTest, WrongTypesAndUnsupportedFieldsNameTheParam) {
  struct Case {
    Json body;
    std::string param;
  };
  const std::vector<Case> cases = {
      {{{"prompt", "x"}, {"temperature", "hot"}}, "temperature"},
      {{{"prompt", "x"}, {"max_tokens", 1.5}}, "max_tokens"},
      {{{"prompt", "x"}, {"max_tokens", 0}}, "max_tokens"},
      {{{"prompt", "x"}, {"stream", "yes"}}, "stream"},
      {{{"prompt", "x"}, {"stop", {1}}}, "stop"},
      {{{"prompt", "x"}, {"n", 2}}, "n"},
      {{{"prompt", "x"}, {"best_of", 3}}, "best_of"},
      {{{"prompt", "x"}, {"logprobs", 2}}, "logprobs"},
      {{{"prompt", "x"}, {"presence_penalty", 0.5}}, "presence_penalty"},
      {{{"prompt", "x"}, {"logit_bias", {{"5", 1}}}}, "logit_bias"},
      {{{"prompt", "x"}, {"suffix", "y"}}, "suffix"},
      {{{"prompt", {"a", "b"}}}, "prompt"},
      {{{"prompt", "x"}, {"speculative", {{"method", "FAST"}}}}, "speculative.method"},
      {{{"prompt", "x"}, {"speculative", {{"block_size", "8"}}}}, "speculative.block_size"},
      {{{"prompt", {1, "a"}}}, "prompt"},
      {{{"max_tokens", 3}}, "prompt"},
  };
  for (const Case& c : cases) {
    auto r = Completion(c.body);
    ASSERT_FALSE(r.ok()) << c.body.dump();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.body.dump();
    EXPECT_EQ(ParamOf(r.status()), c.param) << c.body.dump() << ": " << r.status();
    // The message reads as a sentence about the field: "<param> must ..." or "<param> is ...".
    const std::string message(r.status().message());
    EXPECT_TRUE(absl::StartsWith(message, c.param + " must ") ||
                absl::StartsWith(message, c.param + " is "))
        << message;
  }
  // Explicit defaults of unsupported features are fine; unknown fields are ignored.
  EXPECT_TRUE(Completion(Json{{"prompt", "x"},
                              {"n", 1},
                              {"logprobs", nullptr},
                              {"presence_penalty", 0},
                              {"frobnicate", true}})
                  .ok());
  EXPECT_THAT(ParseCompletionRequest("[1]", 16).status().message(), HasSubstr("JSON object"));
}

TEST(OpenAiRequestTest, ChatRendersTheTemplateAndPrefersMaxCompletionTokens) {
  auto t = chat::ChatTemplate::FromString(
      "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
      "{% if add_generation_prompt %}<assistant>{% endif %}",
      "", "");
  ASSERT_TRUE(t.ok()) << t.status();
  auto tok = tokenizer::Tokenizer::FromFile(std::string(SPECDEC_SOURCE_DIR) +
                                            "/models/specdec-pycode/target/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  Json body{
      {"messages", {{{"role", "user"}, {"content", {{{"type", "text"}, {"text", "Once upon"}}}}}}},
      {"max_tokens", 5},
      {"max_completion_tokens", 9}};
  auto r = ParseChatRequest(body.dump(), &*t, tok->get(), 128);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.max_new_tokens(), 9);
  auto expected = (*tok)->Encode("<user>Once upon<assistant>", false);
  ASSERT_TRUE(expected.ok());
  EXPECT_THAT(r->request.token_ids().ids(), ::testing::ElementsAreArray(*expected));

  body.erase("max_completion_tokens");
  body.erase("max_tokens");
  r = ParseChatRequest(body.dump(), &*t, tok->get(), 128);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->request.max_new_tokens(), 128);

  auto none = ParseChatRequest(body.dump(), nullptr, tok->get(), 128);
  EXPECT_EQ(none.status().code(), absl::StatusCode::kFailedPrecondition);
  Json image{{"messages", {{{"role", "user"}, {"content", {{{"type", "image_url"}}}}}}}};
  EXPECT_EQ(ParamOf(ParseChatRequest(image.dump(), &*t, tok->get(), 128).status()),
            "messages[0].content");
  // A part's type of another JSON kind (a fuzzer's find) is refused, not thrown.
  for (const Json& type : {Json{{"name", "f"}}, Json(3), Json::array()}) {
    Json odd{{"messages", {{{"role", "user"}, {"content", {{{"type", type}, {"text", "x"}}}}}}}};
    EXPECT_EQ(ParamOf(ParseChatRequest(odd.dump(), &*t, tok->get(), 128).status()),
              "messages[0].content");
  }
  Json tools = body;
  tools["tools"] = {{{"type", "function"}}};
  EXPECT_EQ(ParamOf(ParseChatRequest(tools.dump(), &*t, tok->get(), 128).status()), "tools");
}

TEST(OpenAiResponseTest, StatusesMapToHttpCodesAndOpenAisErrorShape) {
  EXPECT_EQ(HttpStatusOf(absl::InvalidArgumentError("x")), 400);
  EXPECT_EQ(HttpStatusOf(absl::FailedPreconditionError("x")), 400);
  EXPECT_EQ(HttpStatusOf(absl::UnauthenticatedError("x")), 401);
  EXPECT_EQ(HttpStatusOf(absl::PermissionDeniedError("x")), 403);
  EXPECT_EQ(HttpStatusOf(absl::NotFoundError("x")), 404);
  EXPECT_EQ(HttpStatusOf(absl::ResourceExhaustedError("x")), 429);
  EXPECT_EQ(HttpStatusOf(absl::UnavailableError("x")), 503);
  EXPECT_EQ(HttpStatusOf(absl::DeadlineExceededError("x")), 504);
  EXPECT_EQ(HttpStatusOf(absl::InternalError("x")), 500);
  Json e = Json::parse(ErrorJson(InvalidParam("top_p", "must be in (0, 1]")))["error"];
  EXPECT_EQ(e["message"], "top_p must be in (0, 1]");
  EXPECT_EQ(e["type"], "invalid_request_error");
  EXPECT_EQ(e["param"], "top_p");
  e = Json::parse(ErrorJson(absl::UnauthenticatedError("no key")))["error"];
  EXPECT_EQ(e["type"], "authentication_error");
  EXPECT_TRUE(e["param"].is_null());
}

TEST(OpenAiResponseTest, ChunksAndTheWholeResponseCarryTextIdsAndUsage) {
  ResponseHeader h{ApiKind::kChat, "chatcmpl-1", 100, "m"};
  const std::vector<int32_t> ids = {7, 8};
  Json first = Json::parse(ChunkJson(h, "ab", ids, /*first=*/true));
  EXPECT_EQ(first["object"], "chat.completion.chunk");
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "ab");
  EXPECT_EQ(first["specdec"]["token_ids"], Json({7, 8}));
  Json later = Json::parse(ChunkJson(h, "c", ids, false));
  EXPECT_FALSE(later["choices"][0]["delta"].contains("role"));

  v1::Summary s;
  s.set_finish_reason(v1::STOP);
  s.set_request_id("r1");
  s.mutable_usage()->set_prompt_tokens(3);
  s.mutable_usage()->set_completion_tokens(2);
  s.mutable_stats()->set_method(v1::DFLASH);
  s.mutable_stats()->set_tau(2.5);
  Json usage = Json::parse(UsageChunkJson(h, s));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["total_tokens"], 5);
  EXPECT_EQ(usage["specdec"]["method"], "DFLASH");
  EXPECT_EQ(usage["specdec"]["tau"], 2.5);
  EXPECT_EQ(usage["specdec"]["request_id"], "r1");
  EXPECT_EQ(Json::parse(FinalChunkJson(h, s))["choices"][0]["finish_reason"], "stop");

  h.kind = ApiKind::kCompletion;
  Json whole = Json::parse(CompletionJson(h, {"abc", {7, 8}, std::nullopt}, s));
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["choices"][0]["text"], "abc");
  EXPECT_EQ(whole["specdec"]["token_ids"], Json({7, 8}));
  EXPECT_FALSE(whole["specdec"].contains("prompt_token_ids"));
  EXPECT_EQ(SseEvent("[DONE]"), "data: [DONE]\n\n");
}

}  // namespace
}  // namespace specdec::services
