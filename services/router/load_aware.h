// Load-aware speculation: whether a DFLASH_ADAPTIVE request should speculate at all, chosen from
// the per-request decode rates the router measured at each load level.
#ifndef SPECDEC_SERVICES_ROUTER_LOAD_AWARE_H_
#define SPECDEC_SERVICES_ROUTER_LOAD_AWARE_H_

#include <array>
#include <cstdint>
#include <mutex>
#include <string>

namespace specdec::services {

// Speculation pays per request (tau tokens per target pass) but costs the target batch room and
// the drafter time; under load the target's batched AR steps can deliver more tokens per second
// to every request than speculative ones. This model keeps, for each load level (requests in
// flight at the request's start, in buckets 1, 2, 3-4, 5-8, 9-16, 17+) and each arm (AR or
// speculative), the decode rate requests saw: exponentially decayed sums of committed tokens
// and of decode seconds, whose ratio weighs long requests more than a mean of per-request
// rates would (per-request rates vary with each prompt's acceptance). A request alone always
// speculates (BlockPilot then picks its block size); under load it takes the arm with the higher
// mean at its load level; until both arms have `min_samples` at that level the choice alternates
// (exploration), and a small share of later requests keeps exploring so the estimate follows
// changing conditions. Thread-safe.
class LoadAwareChooser {
 public:
  enum class Arm { kAr = 0, kSpeculative = 1 };
  struct Options {
    int min_samples = 4;        // per arm and level before exploiting
    double explore_every = 16;  // then every n-th request at a level tries the other arm
    double alpha = 0.1;         // decay of the sums per new sample
  };
  static constexpr int kLevels = 6;

  LoadAwareChooser() : LoadAwareChooser(Options{}) {}
  explicit LoadAwareChooser(Options options) : options_(options) {}

  // Level index of `in_flight` requests (including this one).
  static int Level(int64_t in_flight);
  static const char* LevelName(int level);
  static const char* ArmName(Arm arm) { return arm == Arm::kAr ? "AR" : "speculative"; }

  // The arm for a request starting with `in_flight` requests in flight.
  Arm Choose(int64_t in_flight);
  // A request of `arm` that started at `in_flight` decoded `tokens` in `decode_seconds`.
  void Observe(int64_t in_flight, Arm arm, int64_t tokens, double decode_seconds);

  // The current estimate (tokens/s; 0 when unknown) and sample count, for tests and logs.
  double Rate(int level, Arm arm) const;
  int64_t Samples(int level, Arm arm) const;

 private:
  struct Cell {
    double tokens = 0, seconds = 0;  // decayed sums
    double rate = 0;                 // tokens / seconds
    int64_t samples = 0;             // finished requests measured
    int64_t chosen = 0;              // requests sent down this arm
  };
  Options options_;
  mutable std::mutex mu_;
  std::array<std::array<Cell, 2>, kLevels> cells_{};
  std::array<int64_t, kLevels> requests_{};
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_LOAD_AWARE_H_
