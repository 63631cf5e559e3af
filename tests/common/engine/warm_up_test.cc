// The warm-up request's prompt and options (common/engine/warm_up.h).
#include "common/engine/warm_up.h"

#include <gtest/gtest.h>

namespace specdec::engine {
namespace {

TEST(WarmUpTest, WithoutATokenizerThePromptIsSixteenIdsWithinTheVocabulary) {
  auto ids = WarmUpPrompt(nullptr, 8);
  ASSERT_TRUE(ids.ok()) << ids.status();
  ASSERT_EQ(ids->size(), 16u);
  for (int32_t id : *ids) {
    EXPECT_GE(id, 0);
    EXPECT_LT(id, 8);
  }
  EXPECT_EQ((*ids)[0], 1);
  EXPECT_EQ((*ids)[7], 0);  // 8 wraps around the vocabulary
}

TEST(WarmUpTest, MakesAGreedyAdaptiveRequestWithoutStopsOrLookupsAndKeepsTheRest) {
  DecodeOptions o;
  o.method = Method::kDraftChain;
  o.block_size = 5;
  o.sampling.temperature = 0.8f;
  o.stop_token_ids = {2};
  o.stop_strings = {"\n"};
  o.draft_length = 7;
  MakeWarmUp(40, o);
  EXPECT_EQ(o.method, Method::kDflashAdaptive);
  EXPECT_EQ(o.block_size, 0);  // the cost-aware choice, not a fixed block
  EXPECT_EQ(o.max_new_tokens, 40);
  EXPECT_EQ(o.sampling.temperature, 0.f);
  EXPECT_TRUE(o.stop_token_ids.empty());
  EXPECT_TRUE(o.stop_strings.empty());
  EXPECT_FALSE(o.adaptive_lookup);
  EXPECT_EQ(o.draft_length, 7);
}

TEST(WarmUpTest, SharesCostsButNoAcceptance) { EXPECT_FALSE(WarmUpHookOptions().share_acceptance); }

}  // namespace
}  // namespace specdec::engine
