#include "common/model/compute_pool.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace specdec::model {
namespace {

// How long an idle worker spins before it sleeps: longer than the gaps between a step's regions
// (the serial work between products, tens of microseconds), short enough that a worker between
// requests, or while another process computes, gives its core back.
constexpr auto kSpinBeforeSleep = std::chrono::microseconds(200);

// The most workers a pool starts (a run of more threads runs the rest on the caller's turn).
constexpr int kMaxWorkers = 255;

thread_local bool t_in_run = false;

std::atomic<int> g_compute_threads{1};

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Sleeps while *word holds `value` (returns at once when it no longer does), and wakes one thread
// sleeping on *word: the kernel's futex calls, used directly so that the pool's spin is the only
// one (std::atomic's wait spins and yields on its own before it sleeps).
void FutexWait(std::atomic<uint32_t>& word, uint32_t value) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, value, nullptr,
          nullptr, 0);
}
void FutexWakeOne(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr,
          0);
}

// Reads one cache line of `ahead` into the L2 cache and moves past it; false when none is left.
inline bool ReadOneLineAhead(ReadAhead& ahead) {
  if (ahead.bytes <= 0) return false;
#if defined(__x86_64__) || defined(__i386__)
  _mm_prefetch(ahead.begin, _MM_HINT_T1);
#else
  __builtin_prefetch(ahead.begin, 0, 2);
#endif
  ahead.begin += 64;
  ahead.bytes -= 64;
  return true;
}

// Spins (pausing, or reading a line of `ahead`) until done() holds. Past `spin`, or at once when
// the run has more threads than the machine has cores, it yields the core between checks, so that a
// thread it waits for can run there.
template <typename Done>
void SpinUntil(Done done, std::chrono::microseconds spin, ReadAhead ahead = {}) {
  const auto deadline = std::chrono::steady_clock::now() + spin;
  bool yield = spin.count() == 0;
  for (int i = 1; !done(); ++i) {
    if (yield) {
      std::this_thread::yield();
    } else {
      if (!ReadOneLineAhead(ahead)) CpuRelax();
      if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) yield = true;
    }
  }
}

// One worker's wake-up word, on its own cache line: the caller stores the run's number there, and
// calls into the kernel only when the worker sleeps.
struct alignas(64) WorkerSlot {
  std::atomic<uint32_t> run{0};
  std::atomic<bool> asleep{false};
};

class Pool {
 public:
  void Run(int threads, absl::FunctionRef<void(int)> run,
           absl::FunctionRef<ReadAhead(int)>* read_ahead) {
    std::unique_lock<std::mutex> lock(run_mu_, std::try_to_lock);
    if (threads <= 1 || t_in_run || !lock.owns_lock()) {
      RunAlone(threads, run);
      return;
    }
    const int helpers = std::min(threads - 1, kMaxWorkers);
    StartWorkers(helpers);
    spin_.store(threads > cores_ ? 0 : kSpinBeforeSleep.count(), std::memory_order_relaxed);
    run_ = &run;
    read_ahead_ = read_ahead;
    pending_.store(helpers, std::memory_order_relaxed);
    ++runs_;
    for (int w = 0; w < helpers; ++w) {
      WorkerSlot& slot = *slots_[static_cast<size_t>(w)];
      slot.run.store(runs_, std::memory_order_seq_cst);
      if (slot.asleep.load(std::memory_order_seq_cst)) FutexWakeOne(slot.run);
    }
    t_in_run = true;
    run(0);
    for (int t = helpers + 1; t < threads; ++t) run(t);
    t_in_run = false;
    SpinUntil([&] { return pending_.load(std::memory_order_acquire) == 0; },
              std::chrono::microseconds(spin_.load(std::memory_order_relaxed)),
              read_ahead != nullptr ? (*read_ahead)(0) : ReadAhead{});
  }

 private:
  static void RunAlone(int threads, absl::FunctionRef<void(int)> run) {
    const bool outer = t_in_run;
    t_in_run = true;
    for (int t = 0; t < std::max(threads, 1); ++t) run(t);
    t_in_run = outer;
  }

  // Called with run_mu_ held, between runs.
  void StartWorkers(int count) {
    while (static_cast<int>(workers_.size()) < count) {
      const int index = static_cast<int>(workers_.size()) + 1;
      slots_.push_back(std::make_unique<WorkerSlot>());
      slots_.back()->run.store(runs_, std::memory_order_relaxed);
      workers_.emplace_back(
          [this, index, slot = slots_.back().get(), seen = runs_] { Work(index, *slot, seen); });
    }
  }

  // `seen`: the run number the worker starts from (the slot may have moved on before it starts).
  [[noreturn]] void Work(int index, WorkerSlot& slot, uint32_t seen) {
    t_in_run = true;  // loops nested in a worker's share run on the worker alone
    ReadAhead ahead;
    while (true) {
      seen = WaitForNext(slot, seen, ahead);
      (*run_)(index);
      ahead = read_ahead_ != nullptr ? (*read_ahead_)(index) : ReadAhead{};
      pending_.fetch_sub(1, std::memory_order_release);
    }
  }

  // Spins until the slot's run number moves past `seen`, then sleeps on it.
  uint32_t WaitForNext(WorkerSlot& slot, uint32_t seen, ReadAhead ahead) {
    const std::chrono::microseconds spin(spin_.load(std::memory_order_relaxed));
    const auto deadline = std::chrono::steady_clock::now() + spin;
    for (int i = 1; spin.count() > 0; ++i) {
      const uint32_t r = slot.run.load(std::memory_order_acquire);
      if (r != seen) return r;
      if (!ReadOneLineAhead(ahead)) CpuRelax();
      if (i % 64 == 0 && std::chrono::steady_clock::now() > deadline) break;
    }
    slot.asleep.store(true, std::memory_order_seq_cst);
    uint32_t r;
    while ((r = slot.run.load(std::memory_order_seq_cst)) == seen) FutexWait(slot.run, seen);
    slot.asleep.store(false, std::memory_order_relaxed);
    return r;
  }

  // The machine's cores, read once (the call reads a file).
  const int cores_ = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::mutex run_mu_;  // held by the thread whose run the workers serve; guards what follows
  std::vector<std::thread> workers_;                // worker i (from 1) runs run(i)
  std::vector<std::unique_ptr<WorkerSlot>> slots_;  // worker i's is slots_[i - 1]
  uint32_t runs_ = 0;                               // runs so far
  // The current run's body, published to its workers by their slots' stores.
  absl::FunctionRef<void(int)>* run_ = nullptr;
  absl::FunctionRef<ReadAhead(int)>* read_ahead_ = nullptr;  // the current run's; may be null
  std::atomic<int64_t> spin_{0};             // microseconds an idle thread spins
  alignas(64) std::atomic<int> pending_{0};  // workers yet to finish the current run
};

// Never destroyed: its workers outlive every static, and the process's exit ends them.
Pool& ThePool() {
  static Pool* pool = new Pool;
  return *pool;
}

}  // namespace

void RunOnComputeThreads(int threads, absl::FunctionRef<void(int thread)> run) {
  ThePool().Run(threads, run, nullptr);
}

void RunOnComputeThreads(int threads, absl::FunctionRef<void(int thread)> run,
                         absl::FunctionRef<ReadAhead(int thread)> read_ahead) {
  ThePool().Run(threads, run, &read_ahead);
}

void SetComputeThreads(int threads) {
  g_compute_threads.store(std::max(threads, 1), std::memory_order_relaxed);
}

int ComputeThreads() { return g_compute_threads.load(std::memory_order_relaxed); }

bool InComputeRun() { return t_in_run; }

}  // namespace specdec::model
