#include "train/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_format.h"

namespace specdec::train {

Progress::Progress(std::string label, int64_t total, int64_t start)
    : label_(std::move(label)),
      total_(total),
      start_(start),
      tty_(isatty(fileno(stderr)) != 0),
      begin_(std::chrono::steady_clock::now()),
      last_draw_(begin_ - std::chrono::hours(1)) {}

std::string Progress::Format(const std::string& label, int64_t done, int64_t total,
                             double rate_per_s, const std::string& metrics) {
  constexpr int kWidth = 24;
  const double frac = total > 0 ? std::clamp(static_cast<double>(done) / total, 0.0, 1.0) : 1.0;
  const int filled = static_cast<int>(frac * kWidth);
  std::string bar = std::string(filled, '#') + std::string(kWidth - filled, '.');
  std::string eta = "--:--";
  if (rate_per_s > 0 && done <= total) {
    const int64_t secs = static_cast<int64_t>((total - done) / rate_per_s);
    eta = secs >= 3600 ? absl::StrFormat("%d:%02d:%02d", secs / 3600, (secs / 60) % 60, secs % 60)
                       : absl::StrFormat("%02d:%02d", secs / 60, secs % 60);
  }
  return absl::StrFormat("%s [%s] %d/%d %3.0f%% %.2f it/s ETA %s %s", label, bar, done, total,
                         100.0 * frac, rate_per_s, eta, metrics);
}

void Progress::Draw(int64_t done, const std::string& metrics, bool final) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - begin_).count();
  const double rate = elapsed > 0 ? static_cast<double>(done - start_) / elapsed : 0.0;
  const std::string line = Format(label_, done, total_, rate, metrics);
  if (tty_) {
    std::fprintf(stderr, "\r%s\033[K%s", line.c_str(), final ? "\n" : "");
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
  std::fflush(stderr);
  last_draw_ = now;
}

void Progress::Update(int64_t done, const std::string& metrics) {
  const auto now = std::chrono::steady_clock::now();
  const auto gap = tty_ ? std::chrono::milliseconds(500) : std::chrono::milliseconds(10000);
  if (now - last_draw_ >= gap) Draw(done, metrics, false);
}

void Progress::Finish(const std::string& metrics) { Draw(total_, metrics, true); }

}  // namespace specdec::train
