// Wall-clock helpers shared by the engine and the services.
#ifndef SPECDEC_COMMON_UTIL_CLOCK_H_
#define SPECDEC_COMMON_UTIL_CLOCK_H_

#include <chrono>

namespace specdec {

using SteadyClock = std::chrono::steady_clock;

// Milliseconds from `start` to now on the steady clock.
inline double MsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double, std::milli>(SteadyClock::now() - start).count();
}

}  // namespace specdec

#endif  // SPECDEC_COMMON_UTIL_CLOCK_H_
