// Admission control for the router: a bound on requests being served, with a FIFO queue whose
// wait is bounded, so overload turns into clear RESOURCE_EXHAUSTED answers instead of unbounded
// latency or memory.
#ifndef SPECDEC_SERVICES_ROUTER_ADMISSION_H_
#define SPECDEC_SERVICES_ROUTER_ADMISSION_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>

#include "absl/status/status.h"

namespace specdec::services {

// At most `max_active` requests are served at once; later ones wait in arrival order, at most
// `max_waiting` of them and each at most `timeout` (or until its own deadline, if sooner). A
// request that cannot wait gets RESOURCE_EXHAUSTED (queue full, or it waited `timeout`) or
// DEADLINE_EXCEEDED (its deadline passed while queued); one cancelled while queued gets
// CANCELLED. The target's KV budget stays the memory guard behind it: a request admitted here
// can still be refused there with RESOURCE_EXHAUSTED. Thread-safe.
class AdmissionQueue {
 public:
  struct Options {
    int max_active = 64;  // <= 0: unbounded
    int max_waiting = 256;
    std::chrono::milliseconds timeout{10000};
  };
  explicit AdmissionQueue(Options options) : options_(options) {}

  // Blocks until the request may be served. `cancelled` is polled while waiting. On OK the
  // caller must call Release() when the request ends. `waited_seconds` (optional) receives the
  // time spent queued.
  absl::Status Admit(std::chrono::system_clock::time_point deadline,
                     const std::function<bool()>& cancelled, double* waited_seconds = nullptr);
  void Release();

  int active() const;
  int waiting() const;

 private:
  Options options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  int active_ = 0;
  uint64_t next_ticket_ = 0;
  std::deque<uint64_t> queue_;  // tickets of waiting requests, oldest first
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_ADMISSION_H_
