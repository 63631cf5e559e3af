#include "common/model/runtime.h"

#include <ATen/Parallel.h>

#include <thread>

namespace specdec::model {

int ConfigureComputeThreads(int threads) {
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  if (threads <= 0) threads = 1;
  at::set_num_threads(threads);
  return at::get_num_threads();
}

}  // namespace specdec::model
