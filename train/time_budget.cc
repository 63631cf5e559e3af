#include "train/time_budget.h"

#include <algorithm>

namespace specdec::train {

double TimeBudget::AfterStep(int64_t step, int64_t* total_steps, Clock::time_point now) {
  if (budget_s_ <= 0) return 0;
  if (step == first_step_ + 10) warm_ = now;
  if (step != first_step_ + 60) return 0;
  const double spent = std::chrono::duration<double>(now - start_).count();
  const double per_step = std::chrono::duration<double>(now - warm_).count() / 50.0;
  if (per_step <= 0) return 0;
  const int64_t fit = step + static_cast<int64_t>((budget_s_ - spent) / per_step);
  if (fit >= *total_steps) return 0;
  *total_steps = std::max(step + 1, fit);
  return per_step;
}

}  // namespace specdec::train
