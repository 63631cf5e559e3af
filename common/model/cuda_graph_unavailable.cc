// Builds whose libtorch has no CUDA: nothing can be captured (see cuda_graph.h).
#include "common/model/cuda_graph.h"

namespace specdec::model {

bool CudaGraph::Available() { return false; }

absl::StatusOr<std::unique_ptr<CudaGraph>> CudaGraph::Capture(int, const std::function<void()>&) {
  return absl::UnimplementedError("this build's libtorch has no CUDA: no CUDA graphs");
}

}  // namespace specdec::model
