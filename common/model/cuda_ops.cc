#include "common/model/cuda_ops.h"

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "common/model/cuda_kernels.h"

namespace specdec::model {
namespace {

std::optional<cuda::ElementType> ElementTypeOf(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return cuda::ElementType::kF32;
    case at::kBFloat16:
      return cuda::ElementType::kBF16;
    case at::kHalf:
      return cuda::ElementType::kF16;
    default:
      return std::nullopt;
  }
}

void* CurrentStream(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(t.get_device())).stream();
}

void Check(int error, const char* what) {
  TORCH_CHECK(error == cudaSuccess, what, ": ",
              cudaGetErrorString(static_cast<cudaError_t>(error)));
}

// A norm weight the kernel can read: [d], contiguous, on x's device, of x's dtype.
bool UsableNorm(const at::Tensor& w, const at::Tensor& x, int64_t d) {
  return w.defined() && w.device() == x.device() && w.scalar_type() == x.scalar_type() &&
         w.dim() == 1 && w.size(0) == d && w.is_contiguous();
}

// A RoPE table the kernel can read: [rows, d], contiguous, float or x's dtype, on x's device.
bool UsableTable(const at::Tensor& t, const at::Tensor& x, int64_t rows, int64_t d) {
  return t.device() == x.device() && t.dim() == 2 && t.size(0) == rows && t.size(1) == d &&
         t.is_contiguous() && (t.scalar_type() == at::kFloat || t.scalar_type() == x.scalar_type());
}

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// An environment variable's row count, clamped to [0, most]; `fallback` when unset.
int64_t EnvRows(const char* name, int64_t fallback, int64_t most) {
  const char* v = std::getenv(name);
  return std::clamp<int64_t>(v != nullptr ? std::atoll(v) : fallback, 0, most);
}

// An environment variable's kernel shape in [0, count); `fallback` when unset or out of range.
int EnvShape(const char* name, int fallback, int count) {
  const char* v = std::getenv(name);
  const int value = v != nullptr ? std::atoi(v) : fallback;
  return value >= 0 && value < count ? value : fallback;
}

}  // namespace

bool CudaRowIndependent() {
  static const bool on = [] {
    const char* v = std::getenv("SPECDEC_CUDA_ROW_INDEPENDENT");
    return v != nullptr && std::string(v) == "1";
  }();
  return on && CudaKernelsOn();
}

int64_t CudaRowsLinearMaxRows() {
  static const int64_t value =
      EnvRows("SPECDEC_CUDA_ROWS_LINEAR_MAX_ROWS",
              CudaRowIndependent() ? cuda::kRowsLinearMaxRows : 0, cuda::kRowsLinearMaxRows);
  return CudaKernelsOn() ? value : 0;
}

int64_t CudaVectorLinearMaxRows() {
  static const int64_t value =
      EnvRows("SPECDEC_CUDA_VECTOR_LINEAR_MAX_ROWS", 1, cuda::kVectorLinearMaxRows);
  return CudaKernelsOn() ? value : 0;
}

int64_t CudaFixedAttentionMaxRows() {
  static const int64_t value =
      EnvRows("SPECDEC_CUDA_ATTENTION_MAX_ROWS", CudaRowIndependent() ? 64 : 1, 64);
  return CudaKernelsOn() ? value : 0;
}

bool CudaKernelsOn() {
  static const bool on = [] {
    const char* v = std::getenv("SPECDEC_CUDA_KERNELS");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

bool CudaNormRopeQk(const at::Tensor& qkv, int64_t heads, int64_t kv_heads, int64_t d,
                    const at::Tensor& q_norm, const at::Tensor& k_norm, double eps,
                    const at::Tensor& cos, const at::Tensor& sin, at::Tensor* q, at::Tensor* k) {
  if (!CudaKernelsOn() || !qkv.is_cuda() || qkv.dim() != 2 || qkv.stride(1) != 1 ||
      qkv.size(1) < (heads + 2 * kv_heads) * d || d % 2 != 0 || qkv.requires_grad()) {
    return false;
  }
  const std::optional<cuda::ElementType> type = ElementTypeOf(qkv.scalar_type());
  const int64_t rows = qkv.size(0);
  const bool normed = q_norm.defined() || k_norm.defined();
  if (!type || (normed && (!UsableNorm(q_norm, qkv, d) || !UsableNorm(k_norm, qkv, d))) ||
      !UsableTable(cos, qkv, rows, d) || !UsableTable(sin, qkv, rows, d) ||
      cos.scalar_type() != sin.scalar_type()) {
    return false;
  }
  const c10::cuda::CUDAGuard guard(qkv.device());
  *q = at::empty({rows, heads, d}, qkv.options());
  *k = at::empty({rows, kv_heads, d}, qkv.options());
  cuda::NormRopeQkArgs args;
  args.qkv = qkv.data_ptr();
  args.rows = rows;
  args.row_stride = qkv.stride(0);
  args.heads = static_cast<int>(heads);
  args.kv_heads = static_cast<int>(kv_heads);
  args.head_dim = static_cast<int>(d);
  args.q_norm = normed ? q_norm.data_ptr() : nullptr;
  args.k_norm = normed ? k_norm.data_ptr() : nullptr;
  args.eps = static_cast<float>(eps);
  args.cos = cos.data_ptr();
  args.sin = sin.data_ptr();
  args.tables_f32 = cos.scalar_type() == at::kFloat;
  args.q_out = q->data_ptr();
  args.k_out = k->data_ptr();
  args.type = *type;
  Check(cuda::LaunchNormRopeQk(args, CurrentStream(qkv)), "specdec NormRopeQk kernel");
  return true;
}

bool CudaSwiGlu(const at::Tensor& gu, int64_t inter, at::Tensor* out) {
  if (!CudaKernelsOn() || !gu.is_cuda() || gu.dim() != 2 || gu.stride(1) != 1 ||
      gu.size(1) != 2 * inter || gu.requires_grad()) {
    return false;
  }
  const std::optional<cuda::ElementType> type = ElementTypeOf(gu.scalar_type());
  if (!type) return false;
  const c10::cuda::CUDAGuard guard(gu.device());
  *out = at::empty({gu.size(0), inter}, gu.options());
  cuda::SwiGluArgs args;
  args.gate_up = gu.data_ptr();
  args.rows = gu.size(0);
  args.row_stride = gu.stride(0);
  args.inter = inter;
  args.out = out->data_ptr();
  args.type = *type;
  Check(cuda::LaunchSwiGlu(args, CurrentStream(gu)), "specdec SwiGlu kernel");
  return true;
}

namespace {

// The arguments of a product of x's few bf16 rows by a contiguous bf16 weight [n, k] (k a
// multiple of `k_multiple`, rows 16-byte aligned), `residual` [m, n] added when defined; y is
// allocated. False where the kernels cannot read the operands.
bool RowsProductArgs(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& residual,
                     int64_t max_rows, int64_t k_multiple, cuda::RowsLinearArgs* args,
                     at::Tensor* y) {
  if (!CudaKernelsOn() || !x.is_cuda() || x.scalar_type() != at::kBFloat16 || x.dim() != 2 ||
      x.size(0) == 0 || x.size(0) > max_rows || x.stride(1) != 1 ||
      (x.size(0) > 1 && x.stride(0) % 8 != 0) || !Aligned16(x.data_ptr()) || x.requires_grad()) {
    return false;
  }
  const int64_t m = x.size(0), k = x.size(1);
  if (weight.device() != x.device() || weight.scalar_type() != at::kBFloat16 || weight.dim() != 2 ||
      weight.size(1) != k || k % k_multiple != 0 || !weight.is_contiguous() ||
      !Aligned16(weight.data_ptr()) || weight.requires_grad()) {
    return false;
  }
  const int64_t n = weight.size(0);
  if (residual.defined() &&
      (residual.device() != x.device() || residual.scalar_type() != at::kBFloat16 ||
       residual.dim() != 2 || residual.size(0) != m || residual.size(1) != n ||
       residual.stride(1) != 1)) {
    return false;
  }
  *y = at::empty({m, n}, x.options());
  args->x = x.data_ptr();
  args->m = m;
  args->x_stride = x.stride(0);
  args->w = weight.data_ptr();
  args->n = n;
  args->k = k;
  args->residual = residual.defined() ? residual.data_ptr() : nullptr;
  args->residual_stride = residual.defined() ? residual.stride(0) : 0;
  args->y = y->data_ptr();
  args->y_stride = n;
  return true;
}

}  // namespace

bool CudaRowsLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& residual,
                    at::Tensor* y, int shape) {
  static const int configured = EnvShape("SPECDEC_CUDA_ROWS_LINEAR_SHAPE",
                                         cuda::kRowsLinearDefaultShape, cuda::kRowsLinearShapes);
  if (shape >= cuda::kRowsLinearShapes) return false;
  cuda::RowsLinearArgs args;
  if (!RowsProductArgs(x, weight, residual, cuda::kRowsLinearMaxRows, 32, &args, y)) return false;
  const c10::cuda::CUDAGuard guard(x.device());
  Check(cuda::LaunchRowsLinear(args, CurrentStream(x), shape >= 0 ? shape : configured),
        "specdec RowsLinear kernel");
  return true;
}

bool CudaVectorLinear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& residual,
                      at::Tensor* y, int shape) {
  static const int configured =
      EnvShape("SPECDEC_CUDA_VECTOR_LINEAR_SHAPE", cuda::kVectorLinearDefaultShape,
               cuda::kVectorLinearShapes);
  if (shape >= cuda::kVectorLinearShapes) return false;
  cuda::VectorLinearArgs args;
  if (!RowsProductArgs(x, weight, residual, cuda::kVectorLinearMaxRows, 8, &args, y)) {
    return false;
  }
  const c10::cuda::CUDAGuard guard(x.device());
  Check(cuda::LaunchVectorLinear(args, CurrentStream(x), shape >= 0 ? shape : configured),
        "specdec VectorLinear kernel");
  return true;
}

bool CudaFixedAttention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                        const at::Tensor& bias, double scale, at::Tensor* out) {
  if (!CudaKernelsOn() || !q.is_cuda() || q.dim() != 3 || keys.dim() != 3 || !q.is_contiguous() ||
      !keys.is_contiguous() || !values.is_contiguous() || keys.sizes() != values.sizes() ||
      q.requires_grad()) {
    return false;
  }
  const std::optional<cuda::ElementType> type = ElementTypeOf(q.scalar_type());
  const int64_t n = q.size(0), heads = q.size(1), d = q.size(2);
  const int64_t kv_heads = keys.size(0), capacity = keys.size(1);
  if (!type || !cuda::FixedAttentionTakes(*type, static_cast<int>(d)) || keys.size(2) != d ||
      kv_heads == 0 || heads % kv_heads != 0 || n == 0 || capacity == 0) {
    return false;
  }
  for (const at::Tensor* t : {&keys, &values}) {
    if (t->device() != q.device() || t->scalar_type() != q.scalar_type()) return false;
  }
  if (bias.defined() &&
      (bias.device() != q.device() || bias.scalar_type() != q.scalar_type() || bias.dim() != 2 ||
       bias.size(0) != heads / kv_heads * n || bias.size(1) != capacity || !bias.is_contiguous())) {
    return false;
  }
  const c10::cuda::CUDAGuard guard(q.device());
  *out = at::empty({n, heads * d}, q.options());
  const at::Tensor scratch =
      at::empty({cuda::FixedAttentionScratchFloats(n, capacity, static_cast<int>(heads),
                                                   static_cast<int>(d))},
                q.options().dtype(at::kFloat));
  cuda::FixedAttentionArgs args;
  args.q = q.data_ptr();
  args.keys = keys.data_ptr();
  args.values = values.data_ptr();
  args.bias = bias.defined() ? bias.data_ptr() : nullptr;
  args.out = out->data_ptr();
  args.scratch = scratch.data_ptr<float>();
  args.n = n;
  args.capacity = capacity;
  args.heads = static_cast<int>(heads);
  args.kv_heads = static_cast<int>(kv_heads);
  args.head_dim = static_cast<int>(d);
  args.scale = static_cast<float>(scale);
  args.type = *type;
  Check(cuda::LaunchFixedAttention(args, CurrentStream(q)), "specdec FixedAttention kernel");
  return true;
}

}  // namespace specdec::model
