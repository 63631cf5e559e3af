// How sure a speedup is: `specdec bench` runs AR and each method on the same prompts, and the
// method's speedup is AR's total time over the method's. The prompts differ (some loop, some do
// not), and so does the machine from one prompt to the next, so the bench also gives an interval:
// the 2.5th and 97.5th percentiles of the same ratio over prompt sets resampled with replacement
// (each prompt's pair of times kept together), a percentile bootstrap.
#ifndef SPECDEC_CLI_SPEEDUP_INTERVAL_H_
#define SPECDEC_CLI_SPEEDUP_INTERVAL_H_

#include <cstdint>
#include <span>

namespace specdec::cli {

struct SpeedupInterval {
  double speedup = 0;  // sum(ar_ms) / sum(method_ms); 0 when the method took no time
  double low = 0;      // the 95% interval's ends (both the speedup with under 2 prompts)
  double high = 0;
};

// ar_ms[i] and method_ms[i]: prompt i's times (the spans are as long as each other). The
// resampling is seeded: the same times give the same interval.
SpeedupInterval BootstrapSpeedup(std::span<const double> ar_ms, std::span<const double> method_ms,
                                 int resamples = 2000, uint64_t seed = 1);

}  // namespace specdec::cli

#endif  // SPECDEC_CLI_SPEEDUP_INTERVAL_H_
