// Load-aware speculation: whether the next step of a DFLASH_ADAPTIVE request speculates or runs as
// a plain AR step, learned from the step costs the router measures at each load level.
#ifndef SPECDEC_SERVICES_ROUTER_LOAD_AWARE_H_
#define SPECDEC_SERVICES_ROUTER_LOAD_AWARE_H_

#include <array>
#include <chrono>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>

namespace specdec::services {

// Speculation pays per request (tau tokens per target pass) but costs batch room on the target
// and time on the drafter; under load the target's batched AR steps can deliver more tokens per
// second to every request than speculative ones. Which arm wins depends on the models, the
// hardware and the load, so it is measured, not tabled.
//
// Time is cut into epochs. During an epoch every load-aware step of every request takes the
// same arm, so the population is homogeneous and what is measured in it is what that arm
// delivers at that load (a per-request measure in a mixed population is
// misleading: speculative requests riding in batches with AR ones look faster than either
// population alone). An epoch's rate is the output tokens every request committed while it was
// open, per second and per request in flight: the system's throughput, normalized by the load.
// It counts what the time of the requests' steps alone would miss: the gaps between a request's
// runs, its drafter and policy start-up, the prompts that joined the passes (a faster arm
// finishes requests sooner and admits their successors sooner). Its load level is the
// time-averaged number of requests in flight (buckets 1, 2, 3-4, 5-8, 9-16, 17+). An epoch lasts
// as long as a request does (the decayed mean lifetime of the requests that ran to their end,
// within Options::epoch and max_epoch), so that it sees every phase of the requests' lives: a
// closed loop of equal requests moves in a convoy (all prompts prefilled together, then all
// decoding), and epochs shorter than its cycle fall into one phase or the other, so that
// adjacent epochs compare the phases instead of the arms.
//
// Epoch rates are noisy (which prompts are in flight, their acceptance, prefills, a shared
// machine), so arms are compared in pairs: two adjacent epochs at the same level with different
// arms saw mostly the same requests and the same machine, and the log of their rate ratio
// (speculative over AR) is one sample of the level's advantage of speculation. The estimate is
// the median of the last `window` samples: one epoch hit by a burst of prefills (or a stalled
// machine) sits in two pairs, and a mean would follow it. Until a level has `min_pairs` samples
// its epochs alternate; then each epoch takes the arm the median favours, except that now and
// then one runs the other arm, which makes new pairs with its neighbours so the estimate follows
// changing conditions: every third epoch until the level is confident (it has `confident_pairs`
// pairs, or at least `min_pairs` that all favour the same arm with a median of at least
// `decisive_margin`: a clear loser is not worth a dozen explorations), then every
// `explore_every` epochs while the arms are even, up to five times as seldom when one is
// clearly ahead (exploring a losing arm is what this costs). Speculation's advantage only
// shrinks as the load grows, so a level's estimate counts for no more than that of any lower
// level that has learned (LogAdvantage reports the level's own); where such a lower level found
// AR at least as fast, a level runs AR without alternating or exploring (no pair of its own
// could change that), until that lower level's estimate turns positive.
//
// Exploring costs most where it loses most: under heavy load a speculative epoch makes every
// request in flight catch its drafter up on its whole context and verify whole blocks in the
// shared batch. Exploration therefore backs off: an exploring epoch whose steps were too slow to
// leave `min_steps` clean steps in it (too slow to be measured within an epoch at all), or, once
// the level is settled (confident, or on a prior), one that lost its first pair, doubles the
// level's exploration interval, up to `max_backoff` times; one that won resets it. A level still
// alternating whose speculative epochs twice in a row were too slow to measure stops alternating
// and starts out on AR. Between explorations a level runs one arm for many epochs; Step::holds
// says until when, so that a request can run that arm on the target for that long without
// stopping at every epoch end (each stop costs it a target pass under load). Thread-safe.
class LoadAwareSpeculation {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Arm { kAr = 0, kSpeculative = 1 };
  struct Options {
    Clock::duration epoch = std::chrono::milliseconds(250);  // the shortest epoch
    int min_pairs = 4;             // paired samples per level before exploiting
    int confident_pairs = 12;      // below this, every 3rd epoch at a level explores
    double decisive_margin = 0.3;  // ... unless all its pairs agree and their median is this far
    int explore_every = 10;  // then the other arm every n-th epoch at a level, at the most often
    int window = 15;         // paired samples the median is taken over
    double alpha = 0.15;     // weight of a new epoch in the per-arm rate means (metrics)
    int min_steps = 4;       // clean steps an epoch needs to be measured
    int max_backoff = 8;     // exploration interval multiplier after lost explorations
    int max_hold = 4;        // epochs after the current one that Step::holds may cover
    // An epoch lasts as long as a request does (the decayed mean lifetime of the requests that
    // ran to their end), from `epoch` up to this.
    Clock::duration max_epoch = std::chrono::seconds(2);
    double lifetime_alpha = 0.05;  // weight of a finished request's lifetime in that mean
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
  // `lifetime`: how long it was in flight, when it ran to its end (zero: not counted).
  void RequestFinished(Clock::time_point now, Clock::duration lifetime = Clock::duration::zero());

  struct Step {
    Arm arm = Arm::kSpeculative;
    uint64_t epoch = 0;
    int level = 0;
    bool new_epoch = false;    // this call began the epoch (for metrics)
    Clock::time_point ends{};  // when the epoch is due to end
    // When the arm is next due to change at this level, as planned now: the end of the last
    // epoch before the level's next exploration (at most `max_hold` epochs after this one), or
    // `ends` while the level alternates or this epoch explores. A request may run this arm
    // until then without asking again (and should still report each step with its epoch).
    Clock::time_point holds{};
    // How long a run of this arm beginning now may last: until `holds` when the arm is due to
    // change then; `max_hold` epochs when `holds` only caps the plan (no change is due until
    // later), so that the runs of requests that began at different times also end at
    // different times instead of all stopping (and missing the next pass) at once.
    Clock::duration run_for{};
  };
  // The arm of the next step of a load-aware request.
  Step Next(Clock::time_point now);
  // What Next would answer at `now` within the open epoch, without counting a step; nullopt when
  // no epoch is open then (Next would begin one).
  std::optional<Step> Peek(Clock::time_point now) const;
  // That step ended; `clean` when the request's previous step ran in the same epoch. A clean step
  // counts for the epoch it began in, if it ends before the epoch after that one closes: an
  // epoch with fewer than `min_steps` of them was too slow to measure.
  void Observe(const Step& step, bool clean);
  // A request (of any method) committed `tokens` output tokens at `now`: they count for the
  // epoch open then.
  void Committed(Clock::time_point now, int64_t tokens);

  // Decayed mean rate of an arm's epochs at a level (output tokens/s per request in flight; 0
  // when unknown) and the epochs measured.
  double Rate(int level, Arm arm) const;
  int64_t Epochs(int level, Arm arm) const;
  // The median of log(speculative rate / AR rate) over the recent adjacent epoch pairs at a
  // level, and the pairs measured there so far.
  double LogAdvantage(int level) const;
  int64_t Pairs(int level) const;
  // Epochs between explorations of the other arm at a level (the current rule, backoff
  // included; 2 while the level alternates; 0 when it does not explore, a lower level having
  // found AR at least as fast), and the backoff multiplier itself.
  double ExploreInterval(int level) const;
  int Backoff(int level) const;
  // Epochs at a level (the level they were chosen at) too slow to leave `min_steps` clean steps.
  int64_t Unmeasured(int level) const;
  int64_t in_flight() const;
  // The length of the epochs that begin now.
  Clock::duration EpochLength() const;

 private:
  struct Cell {
    double rate = 0;     // decayed mean of epoch rates
    int64_t epochs = 0;  // epochs measured
  };
  struct LevelState {
    std::deque<double> samples;  // recent paired log(spec rate / AR rate), oldest first
    double log_advantage = 0;    // their median
    int64_t pairs = 0;
    int64_t epochs = 0;         // epochs run
    int64_t since_explore = 0;  // epochs since the last exploring one
    int backoff = 1;            // exploration interval multiplier (1, 2, 4, ... max_backoff)
    int slow_spec = 0;          // consecutive alternating speculative epochs too slow to measure
    int64_t unmeasured = 0;
  };
  struct Measured {  // the last epoch that was measured
    bool valid = false;
    uint64_t epoch = 0;
    int level = 0;
    Arm arm = Arm::kAr;
    double rate = 0;
    bool exploring = false;  // explored while settled and not yet judged by a pair
    int chosen_level = 0;
  };
  // A closed epoch whose last steps may still be running: it is measured when the next epoch
  // closes, so that slow steps that straddle its end count too (dropping them would favour the
  // arm with the longer steps, whose slow steps are the likelier to straddle).
  struct Closed {
    uint64_t epoch = 0;  // 0: none
    Arm arm = Arm::kAr;
    int chosen_level = 0;      // the level it was chosen at
    bool exploring = false;    // it ran the arm the level does not favour, to explore
    bool alternating = false;  // it ran while its level alternated
    bool settled = false;      // it ran while its level was settled (Rule::settled)
    bool measurable = false;
    double load = 0;      // time-averaged requests in flight
    double span = 0;      // seconds it was open
    double tokens = 0;    // output tokens committed while it was open
    int64_t steps = 0;    // clean steps measured
    int64_t started = 0;  // steps begun
  };
  void AdvanceLoadLocked(Clock::time_point now);
  Step OpenStepLocked(Clock::time_point now) const;
  void MeasureLocked(const Closed& e);
  Arm ChooseLocked(int level);
  // An exploring epoch at `level` lost (or could not be measured), or won.
  void JudgeExplorationLocked(int level, bool won);
  struct Rule {
    bool alternate = false;  // still alternating arms
    Arm best = Arm::kAr;     // otherwise: the arm to run
    double every = 2;        // and every how many epochs to run the other one instead (0: never)
    bool settled = false;    // the level is confident, has a prior or found speculation too slow
  };
  Rule RuleLocked(int level) const;
  Clock::duration EpochLengthLocked() const;
  // The level has `confident_pairs` pairs, or is decisive (see Options::decisive_margin).
  bool ConfidentLocked(const LevelState& l) const;

  Options options_;
  mutable std::mutex mu_;
  std::array<std::array<Cell, 2>, kLevels> cells_{};
  std::array<LevelState, kLevels> levels_{};
  Measured last_;
  int64_t in_flight_ = 0;
  Clock::time_point load_since_{};  // load integral measured up to here
  // The current epoch.
  bool open_ = false;
  uint64_t epoch_ = 0;
  Arm arm_ = Arm::kSpeculative;
  int level_ = 0;
  bool exploring_ = false, alternating_ = false, settled_ = false;
  int hold_ = 0;         // epochs after this one planned to run the same arm (Step::holds)
  bool capped_ = false;  // hold_ is max_hold although the arm is planned to last longer
  Clock::time_point start_{}, end_{};
  Clock::duration length_{};  // end_ - start_
  double lifetime_ = 0;       // decayed mean request lifetime (seconds)
  int64_t lifetimes_ = 0;
  double load_integral_ = 0;  // request-seconds since start_
  double tokens_ = 0;         // output tokens committed since start_
  int64_t steps_ = 0, started_ = 0;
  Closed closed_;  // the epoch before the current one
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_LOAD_AWARE_H_
