#include "common/model/cuda_graph.h"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <exception>

#include "absl/strings/str_cat.h"

namespace specdec::model {
namespace {

class TorchCudaGraph : public CudaGraph {
 public:
  at::cuda::CUDAGraph graph;
  void Replay() override { graph.replay(); }
};

}  // namespace

bool CudaGraph::Available() { return true; }

absl::StatusOr<std::unique_ptr<CudaGraph>> CudaGraph::Capture(int device_index,
                                                              const std::function<void()>& pass) {
  try {
    if (device_index < 0) device_index = c10::cuda::current_device();
    c10::cuda::CUDAGuard device_guard(static_cast<c10::DeviceIndex>(device_index));
    auto captured = std::make_unique<TorchCudaGraph>();
    c10::cuda::CUDAStream stream =
        c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(device_index));
    c10::cuda::device_synchronize();  // the pass reads what the current stream wrote
    {
      c10::cuda::CUDAStreamGuard stream_guard(stream);
      pass();  // warm-up: handles and workspaces of this stream
      stream.synchronize();
      // Thread-local: other threads' passes on other caches keep running while this captures.
      captured->graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
      try {
        pass();
      } catch (...) {
        try {
          captured->graph.capture_end();
        } catch (...) {
        }
        throw;
      }
      captured->graph.capture_end();
    }
    stream.synchronize();
    return std::unique_ptr<CudaGraph>(std::move(captured));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("capturing a CUDA graph failed: ", e.what()));
  }
}

}  // namespace specdec::model
