// A progress line for long training runs: bar, steps, rate, ETA and the caller's metrics.
#ifndef SPECDEC_TRAIN_PROGRESS_H_
#define SPECDEC_TRAIN_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <string>

namespace specdec::train {

class Progress {
 public:
  // `start` is the step a resumed run begins at; the rate counts only steps run in this process.
  Progress(std::string label, int64_t total, int64_t start = 0);
  // Redraws at most twice a second on a terminal (every 10 s as plain lines otherwise).
  void Update(int64_t done, const std::string& metrics);
  // Draws the final state and ends the line.
  void Finish(const std::string& metrics);

  // "[#####.....] 50/100 50% 3.20 it/s ETA 00:15 <metrics>" (exposed for tests).
  static std::string Format(const std::string& label, int64_t done, int64_t total,
                            double rate_per_s, const std::string& metrics);

 private:
  void Draw(int64_t done, const std::string& metrics, bool final);
  std::string label_;
  int64_t total_;
  int64_t start_;
  bool tty_;
  std::chrono::steady_clock::time_point begin_, last_draw_;
};

}  // namespace specdec::train

#endif  // SPECDEC_TRAIN_PROGRESS_H_
