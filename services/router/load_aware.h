// Load-aware speculation: whether the next step of a DFLASH_ADAPTIVE request speculates or runs as
// a plain AR step, learned from the step costs the router measures at each load level.
#ifndef SPECDEC_SERVICES_ROUTER_LOAD_AWARE_H_
#define SPECDEC_SERVICES_ROUTER_LOAD_AWARE_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace specdec::services {

// Speculation pays per request (tau tokens per target pass) but costs batch room on the target
// and time on the drafter; under load the target's batched AR steps can deliver more tokens per
// second to every request than speculative ones. Which arm wins depends on the models, the
// hardware and the load, so it is measured, not tabled.
//
// Time is cut into epochs (default 250 ms). During an epoch every load-aware step of every
// request takes the same arm, so the population is homogeneous and the step costs measured in
// it are the costs that arm has at that load (a per-request measure in a mixed population is
// misleading: speculative requests riding in batches with AR ones look faster than either
// population alone). The load level of an epoch is the time-averaged number of requests in
// flight (buckets 1, 2, 3-4, 5-8, 9-16, 17+). Each (level, arm) cell keeps exponentially
// decayed sums of committed tokens and step seconds of the clean steps of its epochs (a step is
// clean when the request's previous step ran in the same epoch, so no step of the other arm
// overlapped it); their ratio is the per-request decode rate, which at equal load is
// proportional to the system's throughput. A new epoch takes the faster arm at the current
// level; until both arms have `min_epochs` samples at a level the arms alternate, and then every
// `explore_every`-th epoch at a level runs the other arm so the estimates follow changing
// conditions. Thread-safe.
class LoadAwareSpeculation {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Arm { kAr = 0, kSpeculative = 1 };
  struct Options {
    Clock::duration epoch = std::chrono::milliseconds(250);
    int min_epochs = 2;     // per arm and level before exploiting
    int explore_every = 8;  // then every n-th epoch at a level runs the other arm (0 = never)
    double alpha = 0.2;     // weight of a new epoch in the decayed sums
    int min_steps = 4;      // clean steps an epoch needs to count as a sample
  };
  static constexpr int kLevels = 6;

  LoadAwareSpeculation() : LoadAwareSpeculation(Options{}) {}
  explicit LoadAwareSpeculation(Options options);

  // Level index of `in_flight` requests (rounded to the nearest whole request).
  static int Level(double in_flight);
  static const char* LevelName(int level);
  static const char* ArmName(Arm arm) { return arm == Arm::kAr ? "AR" : "speculative"; }

  // A request (of any method) entered or left the router.
  void RequestStarted(Clock::time_point now);
  void RequestFinished(Clock::time_point now);

  struct Step {
    Arm arm = Arm::kSpeculative;
    uint64_t epoch = 0;
    int level = 0;
    bool new_epoch = false;  // this call began the epoch (for metrics)
  };
  // The arm of the next step of a load-aware request.
  Step Next(Clock::time_point now);
  // That step committed `tokens` in `seconds`; `clean` when the request's previous step ran in
  // the same epoch.
  void Observe(const Step& step, int64_t tokens, double seconds, bool clean);

  // The current estimate (tokens/s per request; 0 when unknown) and the epochs behind it.
  double Rate(int level, Arm arm) const;
  int64_t Epochs(int level, Arm arm) const;
  int64_t in_flight() const;

 private:
  struct Cell {
    double tokens = 0, seconds = 0;  // decayed sums
    double rate = 0;
    int64_t epochs = 0;  // epochs measured
    int64_t chosen = 0;  // epochs run
  };
  void AdvanceLoadLocked(Clock::time_point now);
  void CloseEpochLocked(Clock::time_point now);
  Arm ChooseLocked(int level);

  Options options_;
  mutable std::mutex mu_;
  std::array<std::array<Cell, 2>, kLevels> cells_{};
  std::array<int64_t, kLevels> epochs_at_level_{};
  int64_t in_flight_ = 0;
  Clock::time_point load_since_{};  // load integral measured up to here
  // The current epoch.
  bool open_ = false;
  uint64_t epoch_ = 0;
  Arm arm_ = Arm::kSpeculative;
  int level_ = 0;
  Clock::time_point start_{}, end_{};
  double load_integral_ = 0;  // request-seconds since start_
  double tokens_ = 0, seconds_ = 0;
  int64_t steps_ = 0;
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_LOAD_AWARE_H_
