#include "services/common/batch_coalescer.h"

#include <algorithm>

namespace specdec::services {
namespace {
double Seconds(BatchCoalescer::Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}
}  // namespace

void BatchCoalescer::Sent(uint64_t owner, Clock::time_point t) {
  Stream& s = streams_[owner];
  s.sent = t;
  s.away = true;
}

void BatchCoalescer::Arrived(uint64_t owner, Clock::time_point enqueued) {
  auto it = streams_.find(owner);
  if (it == streams_.end()) {
    streams_[owner];  // first operation: tracked from its first answer on
    return;
  }
  Stream& s = it->second;
  if (!s.away) return;
  s.away = false;
  const double gap = std::max(0.0, Seconds(enqueued - s.sent));
  s.gap = s.gap < 0 ? gap : (1 - options_.alpha) * s.gap + options_.alpha * gap;
}

void BatchCoalescer::Computed(double seconds) {
  compute_ = compute_ < 0 ? seconds : (1 - options_.alpha) * compute_ + options_.alpha * seconds;
}

double BatchCoalescer::MaxWaitSeconds() const {
  if (!enabled() || compute_ < 0) return 0;
  return std::min(Seconds(options_.max_wait), options_.fraction * compute_);
}

int BatchCoalescer::Awaited(Clock::time_point now) const {
  const double w = MaxWaitSeconds();
  if (w <= 0) return 0;
  int n = 0;
  for (const auto& [owner, s] : streams_) {
    if (!s.away || s.gap < 0) continue;
    // Expected back within the window, and not overdue by more than the window (a stream that
    // is that late is doing something else, e.g. its request finished).
    const double due = Seconds(s.sent - now) + s.gap;
    if (due <= w && due >= -w) ++n;
  }
  return n;
}

std::optional<BatchCoalescer::Clock::time_point> BatchCoalescer::WaitUntil(
    Clock::time_point now) const {
  if (Awaited(now) == 0) return std::nullopt;
  return now + std::chrono::duration_cast<Clock::duration>(
                   std::chrono::duration<double>(MaxWaitSeconds()));
}

}  // namespace specdec::services
