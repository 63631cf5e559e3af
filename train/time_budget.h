// --time-budget for the trainers: measure the step rate once start-up costs are past, then cut
// the schedule to the steps that fit the budget.
#ifndef SPECDEC_TRAIN_TIME_BUDGET_H_
#define SPECDEC_TRAIN_TIME_BUDGET_H_

#include <chrono>
#include <cstdint>

namespace specdec::train {

// Measures seconds per step over steps first+10 .. first+60 (the first steps pay for allocation
// and warm-up) and, at step first+60, lowers the total so the run ends within the budget counted
// from `start`. A budget <= 0 does nothing. Not thread-safe: the training loop owns it.
class TimeBudget {
 public:
  using Clock = std::chrono::steady_clock;
  TimeBudget(double budget_s, int64_t first_step, Clock::time_point start)
      : budget_s_(budget_s), first_step_(first_step), start_(start), warm_(start) {}

  // Call after finishing step `step` (1-based count of steps done). May lower *total_steps, never
  // below step + 1; returns the measured seconds per step when it did, else 0.
  double AfterStep(int64_t step, int64_t* total_steps, Clock::time_point now = Clock::now());

 private:
  double budget_s_;
  int64_t first_step_;
  Clock::time_point start_, warm_;
};

}  // namespace specdec::train

#endif  // SPECDEC_TRAIN_TIME_BUDGET_H_
