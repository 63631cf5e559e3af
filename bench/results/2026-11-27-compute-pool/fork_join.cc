// Empty parallel regions of 2 threads: OpenMP's (libgomp) against a worker that spins on one word
// (the mechanism of common/model/compute_pool.cc, without its sleep). Throwaway measurement:
//   g++ -O2 -fopenmp fork_join.cc -o fork_join -lpthread && ./fork_join
//   perf stat -e syscalls:sys_enter_futex ./fork_join   # the futex calls per region
#include <immintrin.h>
#include <omp.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
using Clock = std::chrono::steady_clock;
std::atomic<long> sink{0};
struct alignas(64) Gen {
  std::atomic<unsigned> v{0};
};
Gen go, done;
std::atomic<bool> stop{false};
void Worker() {
  unsigned seen = 0;
  while (true) {
    unsigned g;
    while ((g = go.v.load(std::memory_order_acquire)) == seen) {
      if (stop.load(std::memory_order_relaxed)) return;
      _mm_pause();
    }
    seen = g;
    sink.fetch_add(1, std::memory_order_relaxed);
    done.v.store(g, std::memory_order_release);
  }
}
int main() {
  const int N = 200000;
  for (int round = 0; round < 3; ++round) {
    auto t0 = Clock::now();
    for (int i = 0; i < N; ++i) {
#pragma omp parallel num_threads(2)
      { sink.fetch_add(1, std::memory_order_relaxed); }
    }
    auto t1 = Clock::now();
    std::printf("omp parallel: %.3f us/region\n",
                std::chrono::duration<double, std::micro>(t1 - t0).count() / N);
  }
  std::thread w(Worker);
  for (int round = 0; round < 3; ++round) {
    auto t0 = Clock::now();
    for (int i = 0; i < N; ++i) {
      unsigned g = go.v.load() + 1;
      go.v.store(g, std::memory_order_release);
      sink.fetch_add(1, std::memory_order_relaxed);
      while (done.v.load(std::memory_order_acquire) != g) _mm_pause();
    }
    auto t1 = Clock::now();
    std::printf("spin pool: %.3f us/region\n",
                std::chrono::duration<double, std::micro>(t1 - t0).count() / N);
  }
  stop = true;
  w.join();
}
