#include "common/model/runtime.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/model/compute_pool.h"

namespace specdec::model {

namespace {

// `threads` (<= 0: the online cores) under SPECDEC_MAX_COMPUTE_THREADS.
int CappedThreads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0) threads = 1;
  if (const char* cap = std::getenv("SPECDEC_MAX_COMPUTE_THREADS"); cap != nullptr) {
    if (const int n = std::atoi(cap); n > 0) threads = std::min(threads, n);
  }
  return threads;
}

}  // namespace

int ConfigureComputeThreads(int threads) {
  SetComputeThreads(CappedThreads(threads));
  at::set_num_threads(1);
  return ComputeThreads();
}

int ConfigureTrainingThreads(int threads) {
  SetComputeThreads(CappedThreads(threads));
  at::set_num_threads(ComputeThreads());
  return ComputeThreads();
}

int ConfigureKernelCache(int capacity) {
  if (capacity > 0) {
    const std::string value = std::to_string(capacity);
    setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", value.c_str(), /*overwrite=*/0);
    setenv("LRU_CACHE_CAPACITY", value.c_str(), /*overwrite=*/0);
  }
  const char* in_force = std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY");
  return in_force ? std::atoi(in_force) : 0;
}

}  // namespace specdec::model
