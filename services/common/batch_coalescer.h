// Batch coalescing for the session loop: whether the scheduler should hold a batch briefly for
// streams whose next operation is about to arrive.
#ifndef SPECDEC_SERVICES_COMMON_BATCH_COALESCER_H_
#define SPECDEC_SERVICES_COMMON_BATCH_COALESCER_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <unordered_map>

namespace specdec::services {

// Each request's steps are driven by a client (the router) that sends the next operation only
// after the previous answer came back, so two concurrent streams left alone fall into lockstep
// ping-pong: each arrives while the other computes, and every pass runs one session. The
// coalescer learns, per stream, the gap between an answer leaving and the stream's next
// operation arriving, and tells the scheduler to wait for streams expected back within
// `fraction` of a batch's compute time (at most `max_wait`): that wait costs a fraction of a
// step, while a batch of two costs far less than two passes. Streams away for longer (e.g. a
// speculative request drafting on another service) are not waited for, so pipelining between
// services is kept, and a lone stream never waits. Not thread-safe: the scheduler thread owns it.
class BatchCoalescer {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    double fraction = 0.25;  // of the mean batch compute time
    Clock::duration max_wait = std::chrono::milliseconds(2);
    double alpha = 0.3;  // EWMA weight of a new gap or compute sample
  };

  BatchCoalescer() : BatchCoalescer(Options{}) {}
  explicit BatchCoalescer(Options options) : options_(options) {}

  bool enabled() const { return options_.max_wait > Clock::duration::zero(); }
  // An answer to stream `owner` left at `t`.
  void Sent(uint64_t owner, Clock::time_point t);
  // An operation of stream `owner`, enqueued at `enqueued`, was taken by the scheduler.
  void Arrived(uint64_t owner, Clock::time_point enqueued);
  // The stream ended.
  void Ended(uint64_t owner) { streams_.erase(owner); }
  // A batch took `seconds` of compute.
  void Computed(double seconds);

  // The time until which the scheduler should wait for more operations at `now`, or nullopt when
  // no stream is expected back soon enough.
  std::optional<Clock::time_point> WaitUntil(Clock::time_point now) const;
  // How many streams WaitUntil waits for at `now` (for tests and logs).
  int Awaited(Clock::time_point now) const;

 private:
  struct Stream {
    Clock::time_point sent{};
    double gap = -1;    // seconds; < 0 until measured
    bool away = false;  // answered, next operation not arrived yet
  };
  double MaxWaitSeconds() const;

  Options options_;
  double compute_ = -1;  // EWMA of batch compute seconds; < 0 until measured
  std::unordered_map<uint64_t, Stream> streams_;
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_BATCH_COALESCER_H_
