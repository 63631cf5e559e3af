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

std::vector<int64_t> PrefillRows(int64_t max_rows, std::span<const QueuedPrompt> prompts) {
  std::vector<int64_t> take(prompts.size(), 0);
  int64_t reserve = 0;  // for the first prompt begun earlier
  for (const QueuedPrompt& p : prompts) {
    if (p.begun) {
      reserve = std::min(p.rows, std::max<int64_t>(1, max_rows / 4));
      break;
    }
  }
  int64_t room = max_rows;
  // Whole prompts in queue order, until one does not fit (a prompt longer than the budget
  // neither fits nor holds the others back: it runs in parts).
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].begun || prompts[i].rows > max_rows) continue;
    if (prompts[i].rows > room - reserve) break;
    take[i] = prompts[i].rows;
    room -= take[i];
  }
  // Prompts in parts, those begun earlier first.
  for (const bool begun : {true, false}) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      if (prompts[i].begun != begun || (!begun && prompts[i].rows <= max_rows)) continue;
      take[i] = std::min(prompts[i].rows, room);
      room -= take[i];
    }
  }
  return take;
}

}  // namespace specdec::services
