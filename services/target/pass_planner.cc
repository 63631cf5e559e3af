#include "services/target/pass_planner.h"

#include <algorithm>

namespace specdec::services {

bool PassPlanner::Fits(size_t pass, const PassItem& item) const {
  const std::vector<int64_t>* c = capture_[pass];
  if (item.capture != nullptr && c != nullptr && *item.capture != *c) return false;
  if (item.prefill) return rows_[pass] + item.rows <= prefill_max_rows_;
  // A session verifies at most once per pass (a re-attached handle could come twice).
  const auto& s = sessions_[pass];
  return std::find(s.begin(), s.end(), item.session) == s.end();
}

void PassPlanner::Place(size_t index, const PassItem& item) {
  size_t pass = 0;
  while (pass < passes_.size() && !Fits(pass, item)) ++pass;
  if (pass == passes_.size()) {
    passes_.emplace_back();
    sessions_.emplace_back();
    capture_.push_back(nullptr);
    rows_.push_back(0);
  }
  passes_[pass].push_back(index);
  if (!item.prefill) sessions_[pass].push_back(item.session);
  if (capture_[pass] == nullptr) capture_[pass] = item.capture;
  rows_[pass] += item.rows;
}

bool PrefillBudget::Take(int64_t rows) {
  if (closed_ || (any_ && taken_ + rows > max_rows_)) {
    closed_ = true;
    return false;
  }
  any_ = true;
  taken_ += rows;
  return true;
}

}  // namespace specdec::services
