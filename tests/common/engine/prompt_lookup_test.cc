#include "common/engine/prompt_lookup.h"

#include <gtest/gtest.h>

#include <vector>

namespace specdec::engine {
namespace {

using V = std::vector<int32_t>;

TEST(PromptLookupTest, TheLongestSuffixAtItsLatestOccurrenceWins) {
  // Suffix [1, 2, 3] occurs at 0 (followed by 4 5 6); [2, 3] also at 7 (followed by 9).
  const V tokens = {1, 2, 3, 4, 5, 6, 0, 2, 3, 9, 1, 2, 3};
  EXPECT_EQ(PromptLookup(tokens, 3, 1, 3), (V{4, 5, 6}));
  EXPECT_EQ(PromptLookup(tokens, 3, 1, 1), (V{4}));
  // Two occurrences of the 3-gram: the latest wins.
  const V longer = {1, 2, 3, 4, 1, 2, 3, 8, 1, 2, 3};
  EXPECT_EQ(PromptLookup(longer, 3, 1, 2), (V{8, 1}));
}

TEST(PromptLookupTest, NothingMatchesNothingIsDrafted) {
  EXPECT_TRUE(PromptLookup(V{1, 2, 3, 4}, 3, 1, 4).empty());
  EXPECT_TRUE(PromptLookup(V{5}, 3, 1, 4).empty());
  EXPECT_TRUE(PromptLookup(V{}, 3, 1, 4).empty());
  // A suffix below min_n does not count.
  EXPECT_TRUE(PromptLookup(V{4, 1, 2, 4}, 3, 2, 4).empty());
  EXPECT_EQ(PromptLookup(V{4, 1, 2, 4}, 3, 1, 4), (V{1, 2, 4}));
}

TEST(PromptLookupTest, ARunsStepDraftsWhatTheRunAndTheContextLeave) {
  // Cached 10 11 12 13 10 11, row 0 = 12: [10, 11, 12] occurred at 0, followed by 13 10 11.
  const V sequence = {10, 11, 12, 13, 10, 11, 12};
  EXPECT_EQ(LookupRunDraft(sequence, 3, 100, 64), (V{13, 10, 11}));
  EXPECT_EQ(LookupRunDraft(sequence, 8, 100, 64), (V{13, 10, 11, 12}));
  // The step commits at most tokens_left: at most tokens_left - 1 drafted.
  EXPECT_EQ(LookupRunDraft(sequence, 3, 3, 64), (V{13, 10}));
  EXPECT_TRUE(LookupRunDraft(sequence, 3, 1, 64).empty());
  // Rows 0.. of the step sit at positions 6..: 8 positions leave row 0 and one draft row.
  EXPECT_EQ(LookupRunDraft(sequence, 3, 100, 8), (V{13}));
  EXPECT_TRUE(LookupRunDraft(sequence, 3, 100, 7).empty());
  // No lookup asked, nothing cached, nothing matching: none.
  EXPECT_TRUE(LookupRunDraft(sequence, 0, 100, 64).empty());
  EXPECT_TRUE(LookupRunDraft(V{}, 3, 100, 64).empty());
  EXPECT_TRUE(LookupRunDraft(V{1, 2, 3}, 3, 100, 64).empty());
}

}  // namespace
}  // namespace specdec::engine
