#include "common/engine/request_limits.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "common/util/status_matchers.h"

namespace specdec::engine {
namespace {

const ModelLimits kLimits{100, 64};
const std::vector<int32_t> kPrompt = {1, 2, 3};

TEST(RequestLimitsTest, AValidRequestPasses) {
  DecodeOptions o;
  o.max_new_tokens = 61;
  EXPECT_TRUE(ValidateDecodeRequest(kPrompt, o, kLimits).ok());
}

TEST(RequestLimitsTest, EachBadFieldIsNamed) {
  auto expect = [](const DecodeOptions& o, std::span<const int32_t> prompt, const char* field) {
    SPECDEC_EXPECT_STATUS(ValidateDecodeRequest(prompt, o, kLimits),
                          absl::StatusCode::kInvalidArgument, field);
  };
  DecodeOptions o;
  o.max_new_tokens = 8;
  expect(o, {}, "prompt is empty");
  const std::vector<int32_t> bad = {1, 100};
  expect(o, bad, "prompt[1] = 100");
  DecodeOptions n = o;
  n.max_new_tokens = 62;
  expect(n, kPrompt, "maximum context of 64");
  n.max_new_tokens = -1;
  expect(n, kPrompt, "max_new_tokens");
  DecodeOptions s = o;
  s.stop_token_ids = {5, -2};
  expect(s, kPrompt, "stop_token_ids[1]");
  DecodeOptions d = o;
  d.draft_length = 65;
  expect(d, kPrompt, "draft_length");
  DecodeOptions t = o;
  t.tree_budget = 0;
  expect(t, kPrompt, "tree_budget");
  t = o;
  t.tree_max_depth = 65;
  expect(t, kPrompt, "tree_max_depth");
  for (float bad_threshold : {-0.1f, 1.f, std::numeric_limits<float>::quiet_NaN()}) {
    t = o;
    t.tree_threshold = bad_threshold;
    expect(t, kPrompt, "tree_threshold");
  }
  DecodeOptions b = o;
  b.block_size = 1;
  expect(b, kPrompt, "block_size");
  b.block_size = 257;
  expect(b, kPrompt, "block_size");
  DecodeOptions p = o;
  p.sampling.temperature = -1.f;
  EXPECT_EQ(ValidateDecodeRequest(kPrompt, p, kLimits).code(), absl::StatusCode::kInvalidArgument);
}

TEST(RequestLimitsTest, BlockRowsStayWithinTheTokensLeftAndTheContext) {
  EXPECT_EQ(BlockRows(16, 100, 10, 1000), 16);
  EXPECT_EQ(BlockRows(16, 5, 10, 1000), 5);
  EXPECT_EQ(BlockRows(16, 100, 995, 1000), 5);
  EXPECT_EQ(BlockRows(16, 100, 1000, 1000), 0);
}

}  // namespace
}  // namespace specdec::engine
