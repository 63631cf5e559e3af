#include "services/target/pass_planner.h"

#include <gtest/gtest.h>

#include <limits>

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

std::vector<int64_t> Rows(int64_t max_rows, std::vector<QueuedPrompt> prompts) {
  return PrefillRows(max_rows, prompts);
}

TEST(PrefillRowsTest, WholePromptsInQueueOrderWithinTheBudget) {
  EXPECT_EQ(Rows(10, {{4}, {6}, {1}}), (std::vector<int64_t>{4, 6, 0}));  // 11 would not fit
  // One that fits the budget but not the room left waits, and so do those after it.
  EXPECT_EQ(Rows(10, {{3}, {8}, {2}}), (std::vector<int64_t>{3, 0, 0}));
  EXPECT_EQ(Rows(std::numeric_limits<int64_t>::max(), {{500}, {900}}),
            (std::vector<int64_t>{500, 900}));  // no budget
}

TEST(PrefillRowsTest, ALongPromptRunsInPartsAndShortOnesDoNotWaitBehindIt) {
  // A prompt longer than the budget: its first 16 rows, then 16 at a time.
  EXPECT_EQ(Rows(16, {{40}}), (std::vector<int64_t>{16}));
  EXPECT_EQ(Rows(16, {{24, true}}), (std::vector<int64_t>{16}));
  // Short prompts queued behind a long one go whole, first; the long one takes the room left.
  EXPECT_EQ(Rows(16, {{40}, {5}, {6}}), (std::vector<int64_t>{5, 5, 6}));
  // Begun earlier, it keeps a quarter of the budget from the whole prompts, then takes the room
  // they leave.
  EXPECT_EQ(Rows(16, {{24, true}, {10}, {2}, {7}}), (std::vector<int64_t>{4, 10, 2, 0}));
  EXPECT_EQ(Rows(16, {{24, true}, {14}}), (std::vector<int64_t>{16, 0}));
  // Its last rows, fewer than the reserve, leave the rest of the room to the others.
  EXPECT_EQ(Rows(16, {{2, true}, {14}, {3}}), (std::vector<int64_t>{2, 14, 0}));
  // Two long prompts: the one begun first, then the new one in the room left.
  EXPECT_EQ(Rows(16, {{10, true}, {30}}), (std::vector<int64_t>{10, 6}));
}

TEST(PrefillRowsTest, AnEmptyPromptTakesNoRowsAndHoldsNothingBack) {
  EXPECT_EQ(Rows(16, {{0}, {16}}), (std::vector<int64_t>{0, 16}));
}

}  // namespace
}  // namespace specdec::services
