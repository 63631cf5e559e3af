// Continuous batching on the target: which queued operations share one forward pass. Torch-free.
#ifndef SPECDEC_SERVICES_TARGET_PASS_PLANNER_H_
#define SPECDEC_SERVICES_TARGET_PASS_PLANNER_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace specdec::services {

// One operation that wants a forward pass.
struct PassItem {
  bool prefill = false;  // a new request's prompt (else a verify or a run's step)
  int64_t rows = 0;      // rows it adds to a pass
  // The feature layers its pass must capture; null when it wants none.
  const std::vector<int64_t>* capture = nullptr;
  const void* session = nullptr;  // the session it runs on (verifies: at most once per pass)
};

// Groups items into passes, in order, each item into the first pass it fits: verifies share a
// pass whatever its rows (each session at most once); a prefill joins a pass only while the pass
// stays within `prefill_max_rows` rows; items that capture different layers go in different
// passes (an item capturing none fits any). Returns the passes as lists of item indices; `rows`
// gets each pass's rows. Place every verify before any prefill so prompts fill the room the
// verifies left.
class PassPlanner {
 public:
  explicit PassPlanner(int64_t prefill_max_rows) : prefill_max_rows_(prefill_max_rows) {}
  void Place(size_t index, const PassItem& item);
  const std::vector<std::vector<size_t>>& passes() const { return passes_; }
  const std::vector<int64_t>& rows() const { return rows_; }

 private:
  bool Fits(size_t pass, const PassItem& item) const;

  const int64_t prefill_max_rows_;
  std::vector<std::vector<size_t>> passes_;
  std::vector<std::vector<const void*>> sessions_;
  std::vector<const std::vector<int64_t>*> capture_;
  std::vector<int64_t> rows_;
};

// The prompts one scheduler iteration prefills: in queue order, while their rows total at most
// `max_rows`, and at least the first. Every later prompt waits for the next iteration (first in
// its queue), so a burst of new requests costs the running sequences about one pass of prompts
// per step instead of all of them at once, and the burst's first tokens come out one pass apart
// instead of all after the last prompt's pass.
class PrefillBudget {
 public:
  explicit PrefillBudget(int64_t max_rows) : max_rows_(max_rows) {}
  // Whether a prompt of `rows` rows is prefilled in this iteration; once one is not, none is.
  bool Take(int64_t rows);

 private:
  const int64_t max_rows_;
  int64_t taken_ = 0;
  bool any_ = false, closed_ = false;
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_TARGET_PASS_PLANNER_H_
