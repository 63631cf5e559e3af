#include "services/target/pass_planner.h"

#include <gtest/gtest.h>

namespace specdec::services {
namespace {

using Passes = std::vector<std::vector<size_t>>;

TEST(PassPlannerTest, VerifiesShareAPassWhateverTheirRows) {
  PassPlanner p(8);
  int a = 0, b = 0, c = 0;
  p.Place(0, {false, 17, nullptr, &a});
  p.Place(1, {false, 17, nullptr, &b});
  p.Place(2, {false, 1, nullptr, &c});
  EXPECT_EQ(p.passes(), (Passes{{0, 1, 2}}));
  EXPECT_EQ(p.rows(), (std::vector<int64_t>{35}));
}

TEST(PassPlannerTest, ASessionVerifiesOncePerPass) {
  PassPlanner p(8);
  int a = 0;
  p.Place(0, {false, 2, nullptr, &a});
  p.Place(1, {false, 2, nullptr, &a});
  EXPECT_EQ(p.passes(), (Passes{{0}, {1}}));
}

TEST(PassPlannerTest, PrefillsJoinWithinTheRowBudget) {
  PassPlanner p(10);
  int a = 0;
  p.Place(0, {false, 4, nullptr, &a});
  p.Place(1, {true, 6, nullptr, nullptr});  // 4 + 6 fits
  p.Place(2, {true, 3, nullptr, nullptr});  // 13 would not: a pass of its own
  p.Place(3, {true, 7, nullptr, nullptr});  // joins the second pass: 3 + 7
  EXPECT_EQ(p.passes(), (Passes{{0, 1}, {2, 3}}));
  EXPECT_EQ(p.rows(), (std::vector<int64_t>{10, 10}));
}

TEST(PassPlannerTest, DifferentCaptureLayersGoInDifferentPasses) {
  const std::vector<int64_t> l1 = {1, 3}, l2 = {2};
  PassPlanner p(100);
  int a = 0, b = 0, c = 0;
  p.Place(0, {false, 2, &l1, &a});
  p.Place(1, {false, 2, &l2, &b});
  p.Place(2, {false, 2, nullptr, &c});  // captures none: fits the first
  p.Place(3, {true, 5, &l2, nullptr});
  EXPECT_EQ(p.passes(), (Passes{{0, 2}, {1, 3}}));
}

TEST(PrefillBudgetTest, PromptsInQueueOrderWithinTheRowsAndAtLeastTheFirst) {
  PrefillBudget b(10);
  EXPECT_TRUE(b.Take(4));
  EXPECT_TRUE(b.Take(6));   // 10 in all
  EXPECT_FALSE(b.Take(1));  // 11 would not fit
  EXPECT_FALSE(b.Take(0));  // and no later prompt jumps the queue
}

TEST(PrefillBudgetTest, AFirstPromptLongerThanTheBudgetRunsAlone) {
  PrefillBudget b(10);
  EXPECT_TRUE(b.Take(25));
  EXPECT_FALSE(b.Take(1));
}

}  // namespace
}  // namespace specdec::services
