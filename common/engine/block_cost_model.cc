#include "common/engine/block_cost_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

namespace specdec::engine {
namespace {

size_t ClassIndex(int acceptance_class) {
  return static_cast<size_t>(
      std::clamp(acceptance_class, 0, BlockCostModel::kAcceptanceClasses - 1));
}

}  // namespace

BlockCostModel::BlockCostModel(Options options) : options_(options) {}

int BlockCostModel::AcceptanceClass(double temperature) {
  if (!(temperature > 0)) return 0;
  if (temperature <= 0.5) return 1;
  return temperature <= 1 ? 2 : 3;
}

void BlockCostModel::Line::Add(double decay, double weight, double xi, double yi) {
  w = w * decay + weight;
  x = x * decay + weight * xi;
  y = y * decay + weight * yi;
  xx = xx * decay + weight * xi * xi;
  xy = xy * decay + weight * xi * yi;
  double a = 0, c = 0;
  if (Fit(&a, &c)) {
    kept_a = a;
    kept_c = c;
  }
}

bool BlockCostModel::Line::Fit(double* a, double* c) const {
  if (w <= 0) return false;
  const double mx = x / w, my = y / w;
  const double var = xx / w - mx * mx;
  if (var <= 0.01 * mx * mx) return false;
  *c = (xy / w - mx * my) / var;
  *a = my - *c * mx;
  return *a >= 0 && *c >= 0;
}

double BlockCostModel::Line::At(double xi, const Line* shape) const {
  if (w <= 0 || xx <= 0) return 0;
  double a = 0, c = 0;
  if (Fit(&a, &c)) return a + c * xi;
  const double mx = x / w, my = y / w;
  if (kept_c >= 0 && kept_a + kept_c * mx > 0) {
    return my * (kept_a + kept_c * xi) / (kept_a + kept_c * mx);
  }
  if (shape != nullptr && shape->Fit(&a, &c) && a + c * mx > 0) {
    return my * (a + c * xi) / (a + c * mx);
  }
  return xy / xx * xi;  // through the origin
}

void BlockCostModel::Curve::Add(double decay, double weight, int rows, double ms) {
  scale *= decay;
  if (scale < 1e-100) {  // fold the decay into the points before their values grow too large
    for (Point& p : points) {
      p.weight *= scale;
      p.weighted_ms *= scale;
    }
    scale = 1;
  }
  auto it = std::lower_bound(points.begin(), points.end(), rows,
                             [](const Point& p, int r) { return p.rows < r; });
  if (it == points.end() || it->rows != rows) it = points.insert(it, Point{rows, 0, 0});
  it->weight += weight / scale;
  it->weighted_ms += weight * ms / scale;
}

std::vector<double> BlockCostModel::Curve::AtEach(int most, const Line& line,
                                                  const Line* shape) const {
  constexpr double kMinWeight = 0.5;  // about one pass of weight left after decay
  std::vector<std::pair<int, double>> means;  // (rows, mean ms) of the points with weight
  for (const Point& p : points) {
    if (p.weight * scale >= kMinWeight) means.emplace_back(p.rows, p.weighted_ms / p.weight);
  }
  // least[i]: the least mean at means[i] or beyond, the bound of every rows up to means[i]'s.
  std::vector<double> least(means.size() + 1, std::numeric_limits<double>::infinity());
  for (size_t i = means.size(); i-- > 0;) least[i] = std::min(means[i].second, least[i + 1]);
  std::vector<double> out(static_cast<size_t>(std::max(most, 0)) + 1);
  size_t i = 0;  // the first mean at `rows` rows or more
  for (int rows = 0; rows <= most; ++rows) {
    while (i < means.size() && means[i].first < rows) ++i;
    double ms;
    if (i < means.size() && means[i].first == rows) {
      ms = means[i].second;
    } else if (i == 0 || i == means.size()) {  // nothing measured on one side
      ms = line.At(rows, shape);
    } else {
      const auto& [lo_rows, lo_ms] = means[i - 1];
      const auto& [hi_rows, hi_ms] = means[i];
      const double t = static_cast<double>(rows - lo_rows) / (hi_rows - lo_rows);
      ms = lo_ms + t * (hi_ms - lo_ms);
    }
    out[static_cast<size_t>(rows)] = std::min(ms, least[i]);
  }
  return out;
}

double BlockCostModel::Curve::At(int rows, const Line& line, const Line* shape) const {
  return AtEach(rows, line, shape)[static_cast<size_t>(std::max(rows, 0))];
}

void BlockCostModel::ObserveStep(const StepCost& step) {
  if (step.pass_rows <= 0 || step.pass_ms <= 0) return;
  // Every sequence of a pass reports it: together they weigh one pass.
  const double weight = 1.0 / std::max(1, step.sessions);
  const double decay = step.sessions <= 1 ? options_.decay : std::pow(options_.decay, weight);
  std::lock_guard<std::mutex> lock(mu_);
  if (step.prompt_rows <= 0) {
    verify_.Add(decay, weight, step.pass_rows, step.pass_ms);
    verify_curve_.Add(decay, weight, step.pass_rows, step.pass_ms);
  }
  const bool drafted = step.draft_rows > 0 && step.draft_ms > 0;
  if (drafted) {
    draft_.Add(decay, weight, step.draft_rows, step.draft_ms);
    draft_curve_.Add(decay, weight, step.draft_rows, step.draft_ms);
  }
  if (step.wall_ms >= 0) {
    const double passes = step.pass_ms + (drafted ? step.draft_ms : 0);
    const double rest = std::max(0.0, step.wall_ms - passes);
    Mean& mean = step.sessions >= 2 ? shared_rest_ : drafted ? spec_overhead_ : ar_overhead_;
    mean.w = mean.w * decay + weight;
    mean.sum = mean.sum * decay + weight * (step.sessions >= 2 ? rest / passes : rest);
  }
}

void BlockCostModel::Acceptance::Add(double decay, int drafted_tokens, int accepted_tokens,
                                     int acceptance_class) {
  const size_t c = ClassIndex(acceptance_class);
  for (int i = 0; i < kMaxPositions; ++i) {
    drafted[c][i] *= decay;
    accepted[c][i] *= decay;
    if (i < drafted_tokens) {
      drafted[c][i] += 1;
      if (i < accepted_tokens) accepted[c][i] += 1;
    }
  }
}

double BlockCostModel::Acceptance::Share(int position, int acceptance_class, double* weight) const {
  *weight = 0;
  if (position < 0 || position >= kMaxPositions) return 0;
  const size_t c = ClassIndex(acceptance_class);
  const size_t i = static_cast<size_t>(position);
  double d = drafted[c][i], a = accepted[c][i];
  if (d <= 1e-9) {  // unmeasured in this class: every class's steps
    d = a = 0;
    for (size_t k = 0; k < drafted.size(); ++k) {
      d += drafted[k][i];
      a += accepted[k][i];
    }
  }
  if (d <= 1e-9) return 0;
  *weight = d;
  return a / d;
}

void BlockCostModel::ObserveAcceptance(int drafted, int accepted, int acceptance_class) {
  if (drafted <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  drafter_acceptance_.Add(options_.decay, drafted, accepted, acceptance_class);
  ++spec_steps_;
}

void BlockCostModel::ObserveLookup(int drafted, int accepted, int acceptance_class, int match) {
  if (drafted <= 0) return;
  std::lock_guard<std::mutex> lock(mu_);
  lookup_acceptance_[LookupMatchIndex(match)].Add(options_.decay, drafted, accepted,
                                                  acceptance_class);
}

double BlockCostModel::TauLocked(int block, int acceptance_class) const {
  double tau = 1;
  for (int i = 0; i + 1 < block && i < kMaxPositions; ++i) {
    double weight = 0;
    tau += drafter_acceptance_.Share(i, acceptance_class, &weight);
  }
  return tau;
}

double BlockCostModel::OverheadMsLocked(bool drafted) const {
  const Mean& own = drafted ? spec_overhead_ : ar_overhead_;
  const Mean& other = drafted ? ar_overhead_ : spec_overhead_;
  if (own.w > 0) return own.sum / own.w;
  return other.w > 0 ? other.sum / other.w : 0;
}

double BlockCostModel::WithRestLocked(int sessions, double passes_ms, bool drafted) const {
  if (sessions >= 2 && shared_rest_.w > 0) {
    return passes_ms * (1 + shared_rest_.sum / shared_rest_.w);
  }
  return passes_ms + OverheadMsLocked(drafted);
}

double BlockCostModel::StepMsLocked(int sessions, int block) const {
  const int rows = std::max(1, sessions) * std::max(1, block);
  double ms = verify_curve_.At(rows, verify_);
  if (block >= 2) ms += draft_curve_.At(rows, draft_, &verify_);
  return WithRestLocked(sessions, ms, block >= 2);
}

double BlockCostModel::DrafterlessStepMs(int sessions, int rows) const {
  std::lock_guard<std::mutex> lock(mu_);
  return DrafterlessStepMsLocked(sessions, rows);
}

double BlockCostModel::DrafterlessStepMsLocked(int sessions, int rows) const {
  return WithRestLocked(
      sessions, verify_curve_.At(std::max(1, sessions) * std::max(1, rows), verify_), false);
}

BlockCostModel::Reading BlockCostModel::Read(int sessions, int max_block, int max_rows,
                                             int acceptance_class) const {
  Reading r;
  r.step_ms.assign(static_cast<size_t>(std::max(1, max_block)) + 1, 0.0);
  r.drafterless_ms.assign(static_cast<size_t>(std::max(0, max_rows)) + 1, 0.0);
  const int positions = std::clamp(max_block - 1, 0, kMaxPositions);
  r.share.assign(static_cast<size_t>(positions), 0.0);
  r.share_weight.assign(static_cast<size_t>(positions), 0.0);
  const size_t n = static_cast<size_t>(std::max(1, sessions));
  std::lock_guard<std::mutex> lock(mu_);
  // Each curve at every row count once (StepMsLocked and DrafterlessStepMsLocked, term by term).
  const int most = static_cast<int>(n) * std::max({1, max_block, max_rows});
  const std::vector<double> verify = verify_curve_.AtEach(most, verify_);
  const std::vector<double> draft = draft_curve_.AtEach(most, draft_, &verify_);
  for (size_t b = 1; b < r.step_ms.size(); ++b) {
    r.step_ms[b] = WithRestLocked(sessions, verify[n * b] + (b >= 2 ? draft[n * b] : 0), b >= 2);
  }
  for (size_t rows = 1; rows < r.drafterless_ms.size(); ++rows) {
    r.drafterless_ms[rows] = WithRestLocked(sessions, verify[n * rows], false);
  }
  for (int i = 0; i < positions; ++i) {
    const size_t k = static_cast<size_t>(i);
    r.share[k] = drafter_acceptance_.Share(i, acceptance_class, &r.share_weight[k]);
  }
  for (size_t m = 0; m < lookup_acceptance_.size(); ++m) {
    r.lookup_share[m] = lookup_acceptance_[m].Share(0, acceptance_class, &r.lookup_weight[m]);
  }
  return r;
}

double BlockCostModel::AcceptedShare(int position, int acceptance_class, double* weight) const {
  std::lock_guard<std::mutex> lock(mu_);
  return drafter_acceptance_.Share(position, acceptance_class, weight);
}

double BlockCostModel::LookupShare(int position, int acceptance_class, int match,
                                   double* weight) const {
  std::lock_guard<std::mutex> lock(mu_);
  return lookup_acceptance_[LookupMatchIndex(match)].Share(position, acceptance_class, weight);
}

double BlockCostModel::Tau(int block, int acceptance_class) const {
  std::lock_guard<std::mutex> lock(mu_);
  return TauLocked(block, acceptance_class);
}

double BlockCostModel::StepMs(int sessions, int block) const {
  std::lock_guard<std::mutex> lock(mu_);
  return StepMsLocked(sessions, block);
}

int BlockCostModel::BestBlock(int sessions, int max_block, int acceptance_class) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (max_block <= 2 || spec_steps_ < options_.min_steps || verify_.w <= 0 || draft_.w <= 0) {
    return max_block;
  }
  int best = max_block;
  double best_rate = -1;
  // From the largest block down, a smaller one only when strictly faster.
  for (int b = max_block; b >= 2; --b) {
    const double ms = StepMsLocked(sessions, b);
    if (ms <= 0) return max_block;
    const double rate = TauLocked(b, acceptance_class) / ms;
    if (rate > best_rate) {
      best_rate = rate;
      best = b;
    }
  }
  return best;
}

int64_t BlockCostModel::NextDecision() {
  std::lock_guard<std::mutex> lock(mu_);
  return decisions_++;
}

int64_t BlockCostModel::CountUndraftedDecision(int acceptance_class) {
  std::lock_guard<std::mutex> lock(mu_);
  return ++undrafted_decisions_[ClassIndex(acceptance_class)];
}

void BlockCostModel::ResetUndrafted(int acceptance_class) {
  std::lock_guard<std::mutex> lock(mu_);
  undrafted_decisions_[ClassIndex(acceptance_class)] = 0;
}

bool BlockCostModel::NextLosingRequestMeasures(int acceptance_class, int initial, int longest) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t c = ClassIndex(acceptance_class);
  int64_t& wait = measure_wait_[c];
  int64_t& since = losing_requests_[c];
  if (wait == 0) {
    wait = std::max(1, initial);
    since = 0;
    return true;
  }
  if (++since < wait) return false;
  since = 0;
  wait = std::min<int64_t>(2 * wait, std::max(initial, longest));
  return true;
}

void BlockCostModel::ResetLosing(int acceptance_class) {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t c = ClassIndex(acceptance_class);
  measure_wait_[c] = 0;
  losing_requests_[c] = 0;
}

int BlockCostModel::ProbeWait(ProbeKind kind, int acceptance_class, int initial) const {
  std::lock_guard<std::mutex> lock(mu_);
  const int wait = probe_wait_[static_cast<size_t>(kind)][ClassIndex(acceptance_class)];
  return wait > 0 ? wait : initial;
}

void BlockCostModel::SetProbeWait(ProbeKind kind, int acceptance_class, int wait) {
  std::lock_guard<std::mutex> lock(mu_);
  probe_wait_[static_cast<size_t>(kind)][ClassIndex(acceptance_class)] = wait;
}

int64_t BlockCostModel::SpeculativeSteps() const {
  std::lock_guard<std::mutex> lock(mu_);
  return spec_steps_;
}

}  // namespace specdec::engine
