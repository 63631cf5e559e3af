#include "services/router/load_aware.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace specdec::services {
namespace {
double Seconds(LoadAwareSpeculation::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
}  // namespace

LoadAwareSpeculation::LoadAwareSpeculation(Options options) : options_(options) {}

int LoadAwareSpeculation::Level(double in_flight) {
  const double n = std::round(in_flight);
  if (n <= 1) return 0;
  if (n <= 2) return 1;
  if (n <= 4) return 2;
  if (n <= 8) return 3;
  if (n <= 16) return 4;
  return 5;
}

const char* LoadAwareSpeculation::LevelName(int level) {
  static const char* kNames[kLevels] = {"1", "2", "3-4", "5-8", "9-16", "17+"};
  return level >= 0 && level < kLevels ? kNames[level] : "?";
}

void LoadAwareSpeculation::AdvanceLoadLocked(Clock::time_point now) {
  if (open_ && now > load_since_) {
    load_integral_ += static_cast<double>(in_flight_) * Seconds(now - load_since_);
  }
  load_since_ = std::max(load_since_, now);
}

void LoadAwareSpeculation::RequestStarted(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  AdvanceLoadLocked(now);
  ++in_flight_;
}

void LoadAwareSpeculation::RequestFinished(Clock::time_point now, Clock::duration lifetime) {
  std::lock_guard<std::mutex> lock(mu_);
  AdvanceLoadLocked(now);
  in_flight_ = std::max<int64_t>(0, in_flight_ - 1);
  if (lifetime > Clock::duration::zero()) {
    const double s = Seconds(lifetime);
    lifetime_ = lifetimes_ == 0
                    ? s
                    : (1 - options_.lifetime_alpha) * lifetime_ + options_.lifetime_alpha * s;
    ++lifetimes_;
  }
}

LoadAwareSpeculation::Clock::duration LoadAwareSpeculation::EpochLengthLocked() const {
  const auto lifetime =
      std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(lifetime_));
  return std::clamp(lifetime, options_.epoch, std::max(options_.epoch, options_.max_epoch));
}

LoadAwareSpeculation::Clock::duration LoadAwareSpeculation::EpochLength() const {
  std::lock_guard<std::mutex> lock(mu_);
  return EpochLengthLocked();
}

void LoadAwareSpeculation::JudgeExplorationLocked(int level, bool won) {
  LevelState& l = levels_[level];
  l.backoff = won ? 1 : std::min(std::max(1, options_.max_backoff), l.backoff * 2);
}

void LoadAwareSpeculation::MeasureLocked(const Closed& e) {
  if (e.epoch == 0) return;
  if (!e.measurable || e.steps < options_.min_steps || e.tokens <= 0) {
    // Steps began in it, with requests in flight throughout, but too few finished cleanly: its
    // arm's steps are too slow to measure within an epoch at this load (an epoch with few steps
    // begun, or one that outlived itself with nothing in flight, was merely quiet; one that
    // outlived itself with requests in flight was slow).
    if (e.started >= options_.min_steps && e.load >= 1.0) {
      LevelState& l = levels_[e.chosen_level];
      ++l.unmeasured;
      if (e.exploring) JudgeExplorationLocked(e.chosen_level, false);
      if (e.alternating && e.arm == Arm::kSpeculative) {
        ++l.slow_spec;
        JudgeExplorationLocked(e.chosen_level, false);
      }
    }
    last_.valid = false;
    return;
  }
  if (e.alternating && e.arm == Arm::kSpeculative) levels_[e.chosen_level].slow_spec = 0;
  const int level = Level(e.load);
  const double rate = e.tokens / e.span / std::max(1.0, e.load);
  Cell& c = cells_[level][static_cast<int>(e.arm)];
  c.rate = c.epochs == 0 ? rate : (1 - options_.alpha) * c.rate + options_.alpha * rate;
  ++c.epochs;
  bool judged = false;
  // A pair: the epoch right before was measured at this level with the other arm.
  if (last_.valid && last_.epoch + 1 == e.epoch && last_.level == level && last_.arm != e.arm) {
    const double spec = e.arm == Arm::kSpeculative ? rate : last_.rate;
    const double ar = e.arm == Arm::kAr ? rate : last_.rate;
    const double sample = std::log(spec / ar);
    LevelState& l = levels_[level];
    l.samples.push_back(sample);
    while (static_cast<int>(l.samples.size()) > std::max(1, options_.window)) l.samples.pop_front();
    std::vector<double> sorted(l.samples.begin(), l.samples.end());
    std::sort(sorted.begin(), sorted.end());
    const size_t m = sorted.size();
    l.log_advantage = m % 2 ? sorted[m / 2] : (sorted[m / 2 - 1] + sorted[m / 2]) / 2;
    ++l.pairs;
    // An exploration is judged by its first pair: did the explored arm beat its neighbour?
    auto won = [&](Arm explored) {
      return explored == Arm::kSpeculative ? sample > 0 : sample < 0;
    };
    if (last_.exploring) {
      JudgeExplorationLocked(last_.chosen_level, won(last_.arm));
    } else if (e.exploring && e.settled) {
      JudgeExplorationLocked(e.chosen_level, won(e.arm));
      judged = true;
    }
  }
  last_ = Measured{true,          e.epoch, level, e.arm, rate, e.exploring && e.settled && !judged,
                   e.chosen_level};
}

bool LoadAwareSpeculation::ConfidentLocked(const LevelState& l) const {
  if (l.pairs >= options_.confident_pairs) return true;
  // Decisive: every pair so far favours the same arm, and the median by a wide margin. Each
  // epoch spent exploring such a loser costs more than a close call's, and the chance that
  // min_pairs noisy pairs all agree when the arms are even is 2^(1 - min_pairs).
  if (l.pairs < options_.min_pairs || std::abs(l.log_advantage) < options_.decisive_margin) {
    return false;
  }
  for (double x : l.samples) {
    if ((x > 0) != (l.log_advantage > 0) || x == 0) return false;
  }
  return true;
}

LoadAwareSpeculation::Rule LoadAwareSpeculation::RuleLocked(int level) const {
  const LevelState& l = levels_[level];
  // Speculation's advantage only shrinks as the load grows (each request gets less of the
  // target's batch room), so the lower levels that have learned bound this one's: no level is
  // credited with more advantage than any of them measured (under heavy load a level's epoch
  // pairs are the noisiest, with bursts of prompts, and one that read a spurious advantage would
  // speculate where every lighter load found AR faster).
  bool bounded = false;
  double bound = 0;
  for (int k = level - 1; k >= 0; --k) {
    if (!ConfidentLocked(levels_[k])) continue;
    bound = bounded ? std::min(bound, levels_[k].log_advantage) : levels_[k].log_advantage;
    bounded = true;
  }
  Rule r;
  if (bounded && bound <= 0) {
    // A lower level found AR at least as fast, so this level's advantage is capped at or below
    // zero whatever its own pairs say: it runs AR, without alternating, and exploring it could
    // not change that (an exploration costs the most here: every request in flight catches its
    // drafter up and verifies whole blocks in the shared pass). The lower levels' explorations
    // keep the bound current; once it turns positive this level learns as usual.
    r.best = Arm::kAr;
    r.every = 0;
    r.settled = true;
    return r;
  }
  const bool confident = ConfidentLocked(l);
  // Speculative epochs too slow to be measured here: as good as a prior that AR wins.
  const bool slow_spec = l.slow_spec >= 2;
  if (l.pairs < options_.min_pairs && !slow_spec) {
    r.alternate = true;
    r.every = 2;
    return r;
  }
  const double advantage = bounded ? std::min(l.log_advantage, bound) : l.log_advantage;
  r.best = l.pairs < options_.min_pairs || advantage <= 0 ? Arm::kAr : Arm::kSpeculative;
  // Explore often while the estimate rests on few pairs (unless something says where to look);
  // then the clearer the advantage, the rarer the exploration: every explore_every epochs when
  // the arms are even, up to 5x as seldom when one is 40% (log 0.4) ahead. Lost explorations
  // multiply that by the backoff.
  r.every = options_.explore_every;
  r.settled = true;
  if (confident) {
    r.every *= 1 + std::min(4.0, std::abs(advantage) / 0.1);
  } else if (!slow_spec) {
    r.every = 3;
    r.settled = false;
  }
  r.every *= l.backoff;
  return r;
}

LoadAwareSpeculation::Arm LoadAwareSpeculation::ChooseLocked(int level) {
  LevelState& l = levels_[level];
  ++l.epochs;
  hold_ = 0;
  capped_ = false;
  auto other = [](Arm a) { return a == Arm::kAr ? Arm::kSpeculative : Arm::kAr; };
  const Rule r = RuleLocked(level);
  exploring_ = alternating_ = false;
  settled_ = r.settled;
  // arm_ and level_ still describe the epoch that just ended (if any).
  if (r.alternate) {
    // Explore: alternate, so that every epoch pairs with the one before it; speculation first.
    alternating_ = true;
    return epoch_ > 0 && level_ == level ? other(arm_) : Arm::kSpeculative;
  }
  exploring_ = r.every > 0 && ++l.since_explore >= r.every;
  if (exploring_) l.since_explore = 0;
  // The epochs after this one that keep r.best: until the one that reaches `every` explores.
  hold_ = 0;
  capped_ = false;
  if (!exploring_) {
    const double until = r.every > 0 ? std::ceil(r.every - static_cast<double>(l.since_explore)) - 1
                                     : options_.max_hold + 1;
    hold_ = std::clamp(static_cast<int>(until), 0, std::max(0, options_.max_hold));
    capped_ = options_.max_hold > 0 && until > hold_;
  }
  return exploring_ ? other(r.best) : r.best;
}

LoadAwareSpeculation::Step LoadAwareSpeculation::Next(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  bool new_epoch = false;
  if (!open_ || now >= end_) {
    // The level of the next epoch: the load averaged over the epoch that just ended when it ran
    // until now, else (first epoch, or after an idle spell) the requests in flight now.
    double load = static_cast<double>(in_flight_);
    const bool recent = open_ && Seconds(now - end_) < Seconds(length_);
    if (open_) {
      AdvanceLoadLocked(now);
      const double span = Seconds(now - start_);
      if (recent && span > 0) load = load_integral_ / span;
      // The epoch before the one ending now has had all its steps finish: measure it. The one
      // ending now waits for its straggling steps (to count its clean ones).
      MeasureLocked(closed_);
      closed_ = Closed{epoch_, arm_, level_, exploring_, alternating_, settled_,
                       false,  0,    span,   tokens_,    steps_,       started_};
      // An epoch that outlived itself by a whole epoch was idle for part of it: its load
      // average says nothing about the load its steps saw, so it is not measured.
      closed_.measurable = span > 0 && span <= 2 * Seconds(length_);
      closed_.load = span > 0 ? load_integral_ / span : 0;
      open_ = false;
    }
    const int level = Level(std::max(1.0, load));
    arm_ = ChooseLocked(level);
    level_ = level;
    open_ = true;
    ++epoch_;
    start_ = now;
    length_ = EpochLengthLocked();
    end_ = now + length_;
    load_since_ = now;
    load_integral_ = 0;
    tokens_ = 0;
    steps_ = started_ = 0;
    new_epoch = true;
  }
  ++started_;
  Step s = OpenStepLocked(now);
  s.new_epoch = new_epoch;
  return s;
}

LoadAwareSpeculation::Step LoadAwareSpeculation::OpenStepLocked(Clock::time_point now) const {
  Step s;
  s.arm = arm_;
  s.epoch = epoch_;
  s.level = level_;
  s.ends = end_;
  s.holds = end_ + hold_ * length_;
  s.run_for = capped_ ? std::max(0, options_.max_hold) * length_
                      : std::max(Clock::duration::zero(), s.holds - now);
  return s;
}

std::optional<LoadAwareSpeculation::Step> LoadAwareSpeculation::Peek(Clock::time_point now) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_ || now >= end_) return std::nullopt;
  return OpenStepLocked(now);
}

void LoadAwareSpeculation::Observe(const Step& step, bool clean) {
  if (!clean) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (open_ && step.epoch == epoch_) {
    ++steps_;
  } else if (step.epoch == closed_.epoch) {
    ++closed_.steps;
  }  // else: it outlived the epoch after its own and is not counted
}

void LoadAwareSpeculation::Committed(Clock::time_point now, int64_t tokens) {
  if (tokens <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (open_ && now >= start_) tokens_ += static_cast<double>(tokens);
}

double LoadAwareSpeculation::LogAdvantage(int level) const {
  std::lock_guard<std::mutex> lock(mu_);
  return levels_[level].log_advantage;
}

int64_t LoadAwareSpeculation::Pairs(int level) const {
  std::lock_guard<std::mutex> lock(mu_);
  return levels_[level].pairs;
}

double LoadAwareSpeculation::ExploreInterval(int level) const {
  std::lock_guard<std::mutex> lock(mu_);
  return RuleLocked(level).every;
}

int LoadAwareSpeculation::Backoff(int level) const {
  std::lock_guard<std::mutex> lock(mu_);
  return levels_[level].backoff;
}

int64_t LoadAwareSpeculation::Unmeasured(int level) const {
  std::lock_guard<std::mutex> lock(mu_);
  return levels_[level].unmeasured;
}

double LoadAwareSpeculation::Rate(int level, Arm arm) const {
  std::lock_guard<std::mutex> lock(mu_);
  return cells_[level][static_cast<int>(arm)].rate;
}

int64_t LoadAwareSpeculation::Epochs(int level, Arm arm) const {
  std::lock_guard<std::mutex> lock(mu_);
  return cells_[level][static_cast<int>(arm)].epochs;
}

int64_t LoadAwareSpeculation::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return in_flight_;
}

}  // namespace specdec::services
