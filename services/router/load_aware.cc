#include "services/router/load_aware.h"

#include <algorithm>
#include <cmath>

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

void LoadAwareSpeculation::RequestFinished(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  AdvanceLoadLocked(now);
  in_flight_ = std::max<int64_t>(0, in_flight_ - 1);
}

void LoadAwareSpeculation::CloseEpochLocked(Clock::time_point now) {
  AdvanceLoadLocked(now);
  open_ = false;
  const double span = Seconds(now - start_);
  // An epoch that outlived itself by a whole epoch was idle for part of it: its load average
  // says nothing about the load its steps saw, so it is not measured.
  if (steps_ < options_.min_steps || seconds_ <= 0 || span > 2 * Seconds(options_.epoch)) return;
  const int level = Level(load_integral_ / span);
  Cell& c = cells_[level][static_cast<int>(arm_)];
  const double keep = c.epochs == 0 ? 0.0 : 1 - options_.alpha;
  c.tokens = keep * c.tokens + tokens_;
  c.seconds = keep * c.seconds + seconds_;
  c.rate = c.tokens / c.seconds;
  ++c.epochs;
}

LoadAwareSpeculation::Arm LoadAwareSpeculation::ChooseLocked(int level) {
  Cell& ar = cells_[level][0];
  Cell& spec = cells_[level][1];
  const int64_t n = ++epochs_at_level_[level];
  Arm pick;
  if (ar.epochs < options_.min_epochs || spec.epochs < options_.min_epochs) {
    // Explore: the arm run less often at this level so far, speculation first.
    pick = ar.chosen < spec.chosen ? Arm::kAr : Arm::kSpeculative;
  } else {
    const Arm best = ar.rate > spec.rate ? Arm::kAr : Arm::kSpeculative;
    const bool explore = options_.explore_every > 0 && n % options_.explore_every == 0;
    pick = explore ? (best == Arm::kAr ? Arm::kSpeculative : Arm::kAr) : best;
  }
  ++cells_[level][static_cast<int>(pick)].chosen;
  return pick;
}

LoadAwareSpeculation::Step LoadAwareSpeculation::Next(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  Step s;
  if (!open_ || now >= end_) {
    // The level of the next epoch: the load averaged over the epoch that just ended when it ran
    // until now, else (first epoch, or after an idle spell) the requests in flight now.
    double load = static_cast<double>(in_flight_);
    const bool recent = open_ && Seconds(now - end_) < Seconds(options_.epoch);
    if (open_) {
      AdvanceLoadLocked(now);
      const double span = Seconds(now - start_);
      if (recent && span > 0) load = load_integral_ / span;
      CloseEpochLocked(now);
    }
    level_ = Level(std::max(1.0, load));
    arm_ = ChooseLocked(level_);
    open_ = true;
    ++epoch_;
    start_ = now;
    end_ = now + options_.epoch;
    load_since_ = now;
    load_integral_ = 0;
    tokens_ = seconds_ = 0;
    steps_ = 0;
    s.new_epoch = true;
  }
  s.arm = arm_;
  s.epoch = epoch_;
  s.level = level_;
  return s;
}

void LoadAwareSpeculation::Observe(const Step& step, int64_t tokens, double seconds, bool clean) {
  if (!clean || tokens <= 0 || seconds <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (!open_ || step.epoch != epoch_) return;  // finished after its epoch closed
  tokens_ += static_cast<double>(tokens);
  seconds_ += seconds;
  ++steps_;
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
