#include "services/router/load_aware.h"

namespace specdec::services {

int LoadAwareChooser::Level(int64_t in_flight) {
  if (in_flight <= 1) return 0;
  if (in_flight == 2) return 1;
  if (in_flight <= 4) return 2;
  if (in_flight <= 8) return 3;
  if (in_flight <= 16) return 4;
  return 5;
}

const char* LoadAwareChooser::LevelName(int level) {
  static const char* kNames[kLevels] = {"1", "2", "3-4", "5-8", "9-16", "17+"};
  return level >= 0 && level < kLevels ? kNames[level] : "?";
}

LoadAwareChooser::Arm LoadAwareChooser::Choose(int64_t in_flight) {
  const int l = Level(in_flight);
  if (l == 0) return Arm::kSpeculative;  // alone: no batch room to lose, the policy decides
  std::lock_guard<std::mutex> lock(mu_);
  const int64_t n = requests_[l]++;
  Cell& ar = cells_[l][0];
  Cell& spec = cells_[l][1];
  Arm pick;
  if (ar.samples < options_.min_samples || spec.samples < options_.min_samples) {
    // Explore: the arm chosen less often so far (requests still running count), speculation
    // first.
    pick = ar.chosen < spec.chosen ? Arm::kAr : Arm::kSpeculative;
  } else {
    const Arm best = ar.rate > spec.rate ? Arm::kAr : Arm::kSpeculative;
    const int64_t every = static_cast<int64_t>(options_.explore_every);
    const bool explore = every > 0 && n % every == every - 1;
    pick = explore ? (best == Arm::kAr ? Arm::kSpeculative : Arm::kAr) : best;
  }
  ++cells_[l][static_cast<int>(pick)].chosen;
  return pick;
}

void LoadAwareChooser::Observe(int64_t in_flight, Arm arm, int64_t tokens, double decode_seconds) {
  if (tokens <= 0 || decode_seconds <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  Cell& c = cells_[Level(in_flight)][static_cast<int>(arm)];
  const double keep = c.samples == 0 ? 0.0 : 1 - options_.alpha;
  c.tokens = keep * c.tokens + static_cast<double>(tokens);
  c.seconds = keep * c.seconds + decode_seconds;
  c.rate = c.tokens / c.seconds;
  ++c.samples;
}

double LoadAwareChooser::Rate(int level, Arm arm) const {
  std::lock_guard<std::mutex> lock(mu_);
  return cells_[level][static_cast<int>(arm)].rate;
}

int64_t LoadAwareChooser::Samples(int level, Arm arm) const {
  std::lock_guard<std::mutex> lock(mu_);
  return cells_[level][static_cast<int>(arm)].samples;
}

}  // namespace specdec::services
