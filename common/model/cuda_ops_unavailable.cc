// The build without CUDA kernels (libtorch without CUDA): every operator declines.
#include "common/model/cuda_ops.h"

namespace specdec::model {

bool CudaKernelsOn() { return false; }

bool CudaRowIndependent() { return false; }

int64_t CudaRowsLinearMaxRows() { return 0; }

int64_t CudaVectorLinearMaxRows() { return 0; }

int64_t CudaFixedAttentionMaxRows() { return 0; }

bool CudaNormRopeQk(const at::Tensor&, int64_t, int64_t, int64_t, const at::Tensor&,
                    const at::Tensor&, double, const at::Tensor&, const at::Tensor&, at::Tensor*,
                    at::Tensor*) {
  return false;
}

bool CudaSwiGlu(const at::Tensor&, int64_t, at::Tensor*) { return false; }

bool CudaRowsLinear(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor*, int) {
  return false;
}

bool CudaVectorLinear(const at::Tensor&, const at::Tensor&, const at::Tensor&, at::Tensor*, int) {
  return false;
}

bool CudaFixedAttention(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&,
                        double, at::Tensor*) {
  return false;
}

}  // namespace specdec::model
