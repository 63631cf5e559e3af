// A captured CUDA graph of a fixed-shape pass: its kernels replayed with one launch. Torch-free
// interface; cuda_graph.cc captures through PyTorch's CUDA graphs where libtorch has CUDA, and
// cuda_graph_unavailable.cc answers UNIMPLEMENTED elsewhere.
#ifndef SPECDEC_COMMON_MODEL_CUDA_GRAPH_H_
#define SPECDEC_COMMON_MODEL_CUDA_GRAPH_H_

#include <functional>
#include <memory>

#include "absl/status/statusor.h"

namespace specdec::model {

class CudaGraph {
 public:
  virtual ~CudaGraph() = default;

  // Whether this build can capture graphs (libtorch with CUDA).
  static bool Available();

  // Captures the kernels `pass` launches on CUDA device `device_index` (negative: the current one),
  // on a side stream, after one uncaptured run of `pass` on that stream (the libraries' lazy set-up
  // stays out of the graph). `pass` must launch the same work every time, without host
  // synchronization; the tensors it allocates while captured live in the graph's own memory pool.
  // Waits for the device's queued work first.
  static absl::StatusOr<std::unique_ptr<CudaGraph>> Capture(int device_index,
                                                            const std::function<void()>& pass);

  // Launches the captured kernels on the current stream.
  virtual void Replay() = 0;
};

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_CUDA_GRAPH_H_
