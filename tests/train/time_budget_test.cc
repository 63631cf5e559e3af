// TimeBudget: the rate is measured over steps first+10..first+60, the schedule is cut to what
// fits the budget (never below the next step), and a generous or absent budget changes nothing.
#include "train/time_budget.h"

#include <gtest/gtest.h>

namespace specdec::train {
namespace {

using Clock = TimeBudget::Clock;

// Runs steps first+1.. at `s_per_step` (the first 10 steps cost `startup_s` extra in total).
int64_t Simulate(double budget_s, int64_t first, int64_t total, double s_per_step, double startup_s,
                 double* measured = nullptr) {
  const Clock::time_point t0{};
  TimeBudget b(budget_s, first, t0);
  double t = startup_s;
  for (int64_t step = first + 1; step <= total; ++step) {
    t += s_per_step;
    const double r = b.AfterStep(
        step, &total,
        t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(t)));
    if (r > 0 && measured) *measured = r;
  }
  return total;
}

TEST(TimeBudgetTest, CutsTheScheduleToTheBudget) {
  double measured = 0;
  // 0.1 s/step after 5 s of start-up: 60 s allow about (60 - 5 - 6) / 0.1 = 490 more steps.
  EXPECT_NEAR(Simulate(60, 0, 10000, 0.1, 5, &measured), 550, 1);  // rounding of the rate
  EXPECT_NEAR(measured, 0.1, 1e-9);
  EXPECT_NEAR(Simulate(60, 200, 10000, 0.1, 5), 750, 1);  // resumed at step 200: counted from there
}

TEST(TimeBudgetTest, GenerousOrAbsentBudgetsChangeNothing) {
  EXPECT_EQ(Simulate(1e6, 0, 1000, 0.1, 5), 1000);
  EXPECT_EQ(Simulate(0, 0, 1000, 0.1, 5), 1000);
  EXPECT_EQ(Simulate(-1, 0, 1000, 0.1, 5), 1000);
}

TEST(TimeBudgetTest, NeverBelowTheNextStep) {
  EXPECT_EQ(Simulate(1, 0, 1000, 0.1, 5), 61);  // the budget was gone before the rate was known
}

}  // namespace
}  // namespace specdec::train
