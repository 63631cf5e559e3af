// Continuous batching on the target: which queued operations share one forward pass. Torch-free.
#ifndef SPECDEC_SERVICES_TARGET_PASS_PLANNER_H_
#define SPECDEC_SERVICES_TARGET_PASS_PLANNER_H_

#include <cstddef>
#include <cstdint>
#include <span>
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

// A prompt queued in a scheduler iteration: its rows not yet prefilled, and whether an earlier
// iteration ran its first rows (a prompt prefilled in parts).
struct QueuedPrompt {
  int64_t rows = 0;
  bool begun = false;
};

// The rows of each queued prompt (in queue order) that one scheduler iteration prefills: at most
// `max_rows` in all. Prompts that fit whole go first, in queue order until one does not fit in
// the room left (it and those after it wait for the next iteration), within the room a prompt
// begun earlier leaves them (a quarter of `max_rows`, or its rest when smaller). Prompts longer
// than `max_rows` run in parts (chunked prefill): the room the whole ones leave goes to them,
// those begun earlier first; 0 rows: the prompt waits for the next iteration. So a burst of new
// requests, or one long prompt, holds the running sequences' steps behind at most `max_rows`
// prompt rows per step instead of all of them at once, a burst's first tokens come out one pass
// apart instead of all after its last prompt, a short prompt does not wait for a long one's
// last part, and a prompt in parts advances at least a quarter of `max_rows` per iteration.
std::vector<int64_t> PrefillRows(int64_t max_rows, std::span<const QueuedPrompt> prompts);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_TARGET_PASS_PLANNER_H_
