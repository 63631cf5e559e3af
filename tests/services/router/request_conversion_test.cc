#include "services/router/request_conversion.h"

#include <gtest/gtest.h>

#include <limits>

#include "common/tokenizer/tokenizer.h"

namespace specdec::services {
namespace {

RequestDefaults Defaults() {
  RequestDefaults d;
  d.method = v1::DFLASH_ADAPTIVE;
  d.max_new_tokens = 32;
  d.eos_token_ids = {2};
  d.limits = {100, 256};
  return d;
}

const std::vector<int32_t> kPrompt = {5, 6, 7};

TEST(RequestConversionTest, ZerosReadAsTheDefaults) {
  v1::GenerateRequest r;
  auto o = ConvertRequest(r, kPrompt, Defaults());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->method, engine::Method::kDflashAdaptive);
  EXPECT_EQ(o->max_new_tokens, 32);
  EXPECT_EQ(o->draft_length, 4);
  EXPECT_EQ(o->tree_budget, 16);
  EXPECT_EQ(o->tree_max_depth, 8);
  EXPECT_EQ(o->block_size, 0);
  EXPECT_FLOAT_EQ(o->sampling.top_p, 1.f);
  EXPECT_EQ(o->stop_token_ids, std::vector<int32_t>{2});  // EOS
}

TEST(RequestConversionTest, FieldsAreCarriedOver) {
  v1::GenerateRequest r;
  r.set_method(v1::DYSPEC_TREE);
  r.set_max_new_tokens(10);
  r.mutable_sampling()->set_temperature(0.5f);
  r.mutable_sampling()->set_top_k(7);
  r.mutable_sampling()->set_seed(11);
  r.add_stop_token_ids(9);
  r.set_ignore_eos(true);
  r.set_tree_budget(40);
  r.set_tree_max_depth(5);
  r.set_tree_threshold(0.25f);
  auto o = ConvertRequest(r, kPrompt, Defaults());
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->method, engine::Method::kDyspecTree);
  EXPECT_EQ(o->max_new_tokens, 10);
  EXPECT_EQ(o->sampling.top_k, 7);
  EXPECT_EQ(o->sampling.seed, 11u);
  EXPECT_EQ(o->stop_token_ids, std::vector<int32_t>{9});  // ignore_eos: no EOS
  EXPECT_EQ(o->tree_budget, 40);
  EXPECT_FLOAT_EQ(o->tree_threshold, 0.25f);
}

TEST(RequestConversionTest, BadFieldsAreInvalidArgument) {
  auto code = [](const v1::GenerateRequest& r) {
    return ConvertRequest(r, kPrompt, Defaults()).status().code();
  };
  v1::GenerateRequest m;
  m.set_method(static_cast<v1::Method>(42));
  EXPECT_EQ(code(m), absl::StatusCode::kInvalidArgument);
  v1::GenerateRequest n;
  n.set_max_new_tokens(-3);
  EXPECT_EQ(code(n), absl::StatusCode::kInvalidArgument);
  n.set_max_new_tokens(254);  // 3 + 254 > 256
  EXPECT_EQ(code(n), absl::StatusCode::kInvalidArgument);
  v1::GenerateRequest t;
  t.set_tree_threshold(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(code(t), absl::StatusCode::kInvalidArgument);
  v1::GenerateRequest s;
  s.add_stop_token_ids(100);
  EXPECT_EQ(code(s), absl::StatusCode::kInvalidArgument);
  v1::GenerateRequest p;
  p.mutable_sampling()->set_top_p(1.5f);
  EXPECT_EQ(code(p), absl::StatusCode::kInvalidArgument);
  const std::vector<int32_t> bad = {5, 100};
  EXPECT_EQ(ConvertRequest(v1::GenerateRequest(), bad, Defaults()).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RequestConversionTest, PromptTokensComeFromIdsOrTheTokenizer) {
  v1::GenerateRequest ids;
  for (int32_t t : {3, 4}) ids.mutable_token_ids()->add_ids(t);
  auto got = PromptTokens(ids, nullptr);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, (std::vector<int32_t>{3, 4}));
  v1::GenerateRequest text;
  text.set_text("hi");
  EXPECT_EQ(PromptTokens(text, nullptr).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(PromptTokens(v1::GenerateRequest(), nullptr).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(RequestConversionTest, TextTooLongForTheContextIsRefusedBeforeTokenization) {
  v1::GenerateRequest text;
  text.set_text(std::string(101, 'x'));
  // No tokenizer: the refusal comes before any tokenization would be tried.
  auto refused = PromptTokens(text, nullptr, 100);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("at most 100"), std::string::npos);
  EXPECT_EQ(PromptTokens(text, nullptr, 101).status().code(),
            absl::StatusCode::kFailedPrecondition);

  auto tok = tokenizer::Tokenizer::FromFile(std::string(SPECDEC_SOURCE_DIR) +
                                            "/models/specdec-pycode/target/tokenizer.json");
  ASSERT_TRUE(tok.ok()) << tok.status();
  // The bound is safe: text of that many bytes still makes more tokens than the context.
  const size_t bound = MaxPromptBytes(**tok, 16);
  std::string code;
  while (code.size() < bound) code += "def f(x):\n    return x + 1\n";
  code.resize(bound);
  auto ids = (*tok)->Encode(code, false);
  ASSERT_TRUE(ids.ok());
  EXPECT_GT(ids->size(), 16u);
  EXPECT_EQ(bound % (16 * 4), 0u);
}

TEST(RequestConversionTest, StatisticsTakeTheirWireForm) {
  engine::DecodeStats s;
  s.method = engine::Method::kDflash;
  s.verify_steps = 4;
  s.committed_tokens = 12;
  s.drafted_tokens = 20;
  s.accepted_tokens = 8;
  s.accepted_per_position = {4, 3};
  s.drafted_per_position = {4, 4};
  s.block_size = 6;
  s.planned_ar_steps = 2;
  s.note = "n";
  s.prefill_ms = 1.5;
  s.total_ms = 9;
  s.network_ms = 0.75;
  s.queue_ms = 0.25;
  const v1::RequestStats p = ToProto(s);
  EXPECT_EQ(p.method(), v1::DFLASH);
  EXPECT_DOUBLE_EQ(p.tau(), 3.0);
  EXPECT_EQ(p.accepted_per_position_size(), 2);
  EXPECT_EQ(p.block_size(), 6);
  EXPECT_EQ(p.load_aware_ar_steps(), 2);
  EXPECT_FALSE(p.load_aware_ar());  // it drafted too
  EXPECT_EQ(p.note(), "n");
  EXPECT_DOUBLE_EQ(p.timings().prefill_ms(), 1.5);
  EXPECT_DOUBLE_EQ(p.timings().total_ms(), 9);
  EXPECT_DOUBLE_EQ(p.timings().network_ms(), 0.75);
  EXPECT_DOUBLE_EQ(p.timings().queue_ms(), 0.25);
  for (v1::Method m : {v1::AR, v1::DRAFT_CHAIN, v1::DYSPEC_TREE, v1::DFLASH, v1::DFLASH_ADAPTIVE}) {
    EXPECT_EQ(ToProto(ToEngine(m)), m);
  }
}

TEST(RequestConversionTest, EstimatedSpeedupIsOverTheDecodesWallTime) {
  engine::DecodeStats s;
  s.committed_tokens = 7;
  s.ttft_ms = 4.4;
  s.total_ms = 11.4;  // 7 ms after the first token
  s.decode_ms = 1.5;  // the steps' own times: most of a run's steps arrived together
  EXPECT_DOUBLE_EQ(EstimatedSpeedup(s, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(EstimatedSpeedup(s, 2.0), 2.0);
  EXPECT_EQ(EstimatedSpeedup(s, 0), 0);  // no AR step measured yet
  s.total_ms = s.ttft_ms;
  EXPECT_EQ(EstimatedSpeedup(s, 1.0), 0);  // nothing after the first token
}

}  // namespace
}  // namespace specdec::services
