#include "common/engine/ngram_drafter.h"

#include <gtest/gtest.h>

#include <vector>

namespace specdec::engine {
namespace {

using V = std::vector<int32_t>;

TEST(NgramDrafterTest, TheLongestSuffixAtItsLatestOccurrenceWins) {
  // Suffix [2, 3] occurred at 1 (followed by 9) and at 5 (followed by 4 5): the latest wins.
  const V tokens = {1, 2, 3, 9, 7, 2, 3, 4, 5, 6, 2, 3};
  EXPECT_EQ(NgramDrafter::Lookup(tokens, 3, 1, 3), (V{4, 5, 6}));
  EXPECT_EQ(NgramDrafter::Lookup(tokens, 3, 1, 1), (V{4}));
  // The 3-gram [6, 2, 3] never occurred before: the 2-gram is used.
  // A longer match beats a later shorter one: [9, 7] then 2 occurs once.
  const V longer = {9, 7, 2, 8, 1, 7, 2, 5, 9, 7, 2};
  EXPECT_EQ(NgramDrafter::Lookup(longer, 3, 1, 2), (V{8, 1}));
}

TEST(NgramDrafterTest, NothingMatchesNothingIsDrafted) {
  EXPECT_TRUE(NgramDrafter::Lookup(V{1, 2, 3, 4}, 3, 1, 4).empty());
  EXPECT_TRUE(NgramDrafter::Lookup(V{5}, 3, 1, 4).empty());
  EXPECT_TRUE(NgramDrafter::Lookup(V{}, 3, 1, 4).empty());
  // Below min_n a match does not count.
  EXPECT_TRUE(NgramDrafter::Lookup(V{4, 1, 2, 4}, 3, 2, 4).empty());
  EXPECT_EQ(NgramDrafter::Lookup(V{4, 1, 2, 4}, 3, 1, 4), (V{1, 2, 4}));
}

TEST(NgramDrafterTest, ProposalsFollowTheCommittedTokens) {
  NgramDrafter d;
  const V prompt = {10, 11, 12, 13, 10, 11};
  ASSERT_TRUE(d.Open(prompt).ok());
  // Context prompt + [12]: [10, 11, 12] occurred at 0, followed by 13 10 11.
  auto p = d.Propose(12, DraftShape{3, 0});
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->tokens, (V{13, 10, 11}));
  EXPECT_EQ(p->proposal, Proposal::kOneHot);
  EXPECT_EQ(p->positions, 3);
  // The target accepted 13 and 10, then committed 99.
  StepResult step;
  step.committed = {13, 10, 99};
  ASSERT_TRUE(d.Accept(step).ok());
  // Context is now ... 12 13 10 + [99]: 99 never occurred.
  p = d.Propose(99, DraftShape{3, 0});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->tokens.empty());
}

}  // namespace
}  // namespace specdec::engine
