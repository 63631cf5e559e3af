#include "common/model/ops.h"

#include <ATen/ATen.h>
#include <torch/version.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "common/model/balanced_parallel_for.h"
#include "common/model/cuda_ops.h"
#include "common/model/linear_f32_kernel.h"
#include "common/model/linear_kernel.h"
#include "common/model/parallel_linear.h"
#include "common/model/row_kernels.h"

namespace specdec::model {

// Whether a CUDA tensor's norms, and attention of recurring shapes, take ATen's fused operators
// (libtorch 2.4 and later: rms_norm, scaled_dot_product_attention) instead of compositions of
// small ones; each small operator is a kernel launch, and a decoding step is bound by them
// (design.md §2.9). SPECDEC_CUDA_FUSED_OPS=0 keeps the compositions (read once).
bool FusedOpsOn(const at::Tensor& t) {
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  static const bool on = [] {
    const char* v = std::getenv("SPECDEC_CUDA_FUSED_OPS");
    return v == nullptr || std::string(v) != "0";
  }();
  return on && t.is_cuda();
#else
  (void)t;
  return false;
#endif
}

int64_t GemmRows(int64_t rows) {
  static const bool enabled = [] {
    const char* v = std::getenv("SPECDEC_GEMM_ROW_BUCKETS");
    return v == nullptr || std::string(v) != "0";
  }();
  if (!enabled || rows <= 32) return rows;
  const int64_t step = rows <= 256 ? 16 : rows <= 1024 ? 64 : 128;
  return (rows + step - 1) / step * step;
}

int64_t LinearKernelMaxRows() {
  static const int64_t value = [] {
    const char* v = std::getenv("SPECDEC_LINEAR_KERNEL_MAX_ROWS");
    if (v != nullptr) return std::max<int64_t>(0, std::atoll(v));
    // With AVX-512 BF16 the kernel's dot products run as fast as oneDNN's at 33-256 rows, and
    // without AVX-512 ATen's bf16 product is a plain loop: the kernel takes every product. On
    // other AVX-512 CPUs oneDNN wins beyond the smallest products.
    if (LinearKernelNative()) return std::numeric_limits<int64_t>::max();
    const bool onednn_bf16 = __builtin_cpu_supports("avx512bw") &&
                             __builtin_cpu_supports("avx512vl") &&
                             __builtin_cpu_supports("avx512dq");
    return onednn_bf16 ? int64_t{2} : std::numeric_limits<int64_t>::max();
  }();
  return value;
}

namespace {

// The kernel dtype of a CPU tensor row_kernels.h can take, or nullopt: other dtypes and devices,
// tensors that autograd follows (training), and every tensor when SPECDEC_ROW_KERNELS=0 is in
// the environment (read once).
std::optional<KernelDType> RowKernelType(const at::Tensor& t) {
  static const bool enabled = [] {
    const char* v = std::getenv("SPECDEC_ROW_KERNELS");
    return v == nullptr || std::string(v) != "0";
  }();
  if (!enabled || !t.device().is_cpu() || t.requires_grad()) return std::nullopt;
  if (t.scalar_type() == at::kFloat) return KernelDType::kF32;
  if (t.scalar_type() == at::kBFloat16) return KernelDType::kBF16;
  return std::nullopt;
}

// Whether `weight` holds a matrix in linear_kernel.h's packed layout (PackLinearWeight): such
// tensors are [out / B, in / 32, 32 * B] for a block of B = 4 or 16 outputs.
bool IsPacked(const at::Tensor& weight) {
  return weight.dim() == 3 && (weight.size(2) == 4 * 32 || weight.size(2) == 16 * 32);
}

// The block of outputs of a packed matrix's layout.
int32_t PackBlock(const at::Tensor& weight) { return static_cast<int32_t>(weight.size(2) / 32); }

// The [out, in] of a 2-D or packed matrix.
std::pair<int64_t, int64_t> MatrixShape(const at::Tensor& weight) {
  if (IsPacked(weight)) return {weight.size(0) * PackBlock(weight), weight.size(1) * 32};
  return {weight.size(0), weight.size(-1)};
}

// The problem of x (bf16, contiguous rows) times `weight` (2-D or packed) into y.
LinearProblem KernelProblem(const uint16_t* x, int64_t rows, const at::Tensor& weight) {
  LinearProblem p;
  p.x = x;
  p.rows = rows;
  p.w = static_cast<const uint16_t*>(weight.data_ptr());
  p.w_block = IsPacked(weight) ? PackBlock(weight) : 0;
  std::tie(p.out, p.in) = MatrixShape(weight);
  p.x_stride = p.in;
  p.y_stride = p.out;
  return p;
}

// x W^T on linear_kernel.h, or an undefined tensor when the kernel does not take the operands.
at::Tensor KernelLinear(const at::Tensor& x, const at::Tensor& weight) {
  const auto [out, in] = MatrixShape(weight);
  if (x.dim() != 2 || x.size(0) == 0 || x.size(0) > LinearKernelMaxRows() ||
      RowKernelType(x) != KernelDType::kBF16 || RowKernelType(weight) != KernelDType::kBF16 ||
      (weight.dim() != 2 && !IsPacked(weight)) || !weight.is_contiguous() || x.stride(1) != 1 ||
      x.size(1) != in || !LinearKernelFits(in, out)) {
    return {};
  }
  at::Tensor y = at::empty({x.size(0), out}, x.options());
  LinearProblem p = KernelProblem(static_cast<const uint16_t*>(x.data_ptr()), x.size(0), weight);
  p.x_stride = x.stride(0);
  p.y = static_cast<uint16_t*>(y.data_ptr());
  RunLinearParallel(p);
  return y;
}

// Whether float products take linear_f32_kernel.h: not when SPECDEC_F32_KERNEL=0 is in the
// environment (the library's product; read once).
bool F32KernelOn() {
  static const bool enabled = [] {
    const char* v = std::getenv("SPECDEC_F32_KERNEL");
    return v == nullptr || std::string(v) != "0";
  }();
  return enabled;
}

// x W^T for float x and float W on linear_f32_kernel.h: every row count sums each output in one
// order, so a row's result never depends on the rows beside it. Undefined when the kernel does not
// take the operands or is off.
at::Tensor F32KernelLinear(const at::Tensor& x, const at::Tensor& weight) {
  if (!F32KernelOn() || x.dim() != 2 || x.size(0) == 0 || RowKernelType(x) != KernelDType::kF32 ||
      RowKernelType(weight) != KernelDType::kF32 || weight.dim() != 2 || !weight.is_contiguous() ||
      x.stride(1) != 1 || x.size(1) != weight.size(1) ||
      !LinearF32KernelFits(weight.size(1), weight.size(0))) {
    return {};
  }
  const int64_t rows = x.size(0), in = weight.size(1), out = weight.size(0);
  at::Tensor y = at::empty({rows, out}, x.options());
  LinearF32Problem p;
  p.x = x.data_ptr<float>();
  p.rows = rows;
  p.x_stride = x.stride(0);
  p.w = weight.data_ptr<float>();
  p.in = in;
  p.y = y.data_ptr<float>();
  p.y_stride = out;
  p.out = out;
  RunLinearF32Parallel(p);
  return y;
}

// x W^T for float activations x and bf16 weights W: x rounded to bf16 (what the product
// consumes), the sums kept in float. Every row count runs on linear_kernel.h, so a row's result
// never depends on the rows beside it; widths the kernel does not take go through ATen's bf16
// product, rounded to bf16 on the way out.
at::Tensor MixedLinear(const at::Tensor& x, const at::Tensor& weight) {
  const int64_t rows = x.size(0), in = x.size(1);
  const auto [out, w_in] = MatrixShape(weight);
  if (!RowKernelType(x) || !RowKernelType(weight) || !weight.is_contiguous() ||
      (weight.dim() != 2 && !IsPacked(weight)) || w_in != in || !LinearKernelFits(in, out) ||
      rows == 0) {
    return at::linear(x.to(at::kBFloat16), UnpackLinearWeight(weight)).to(at::kFloat);
  }
  const at::Tensor xc = x.stride(1) == 1 ? x : x.contiguous();
  at::Tensor xb = at::empty({rows, in}, weight.options().dtype(at::kBFloat16));
  auto* xbp = static_cast<uint16_t*>(xb.data_ptr());
  RoundRowsToBf16(xc.data_ptr<float>(), rows, in, xc.stride(0), xbp);
  LinearProblem p = KernelProblem(xbp, rows, weight);
  at::Tensor y = at::empty({rows, p.out}, x.options());
  p.y_f32 = y.data_ptr<float>();
  RunLinearParallel(p);
  return y;
}

}  // namespace

std::optional<RowMatrix> RowMatrixOf(const at::Tensor& weight) {
  const std::optional<KernelDType> dt = RowKernelType(weight);
  if (!dt || !weight.is_contiguous() || (weight.dim() != 2 && !IsPacked(weight))) {
    return std::nullopt;
  }
  const auto [out, in] = MatrixShape(weight);
  RowMatrix m{weight.data_ptr(), out, in, *dt == KernelDType::kBF16,
              IsPacked(weight) ? PackBlock(weight) : 0};
  if (m.bf16 ? LinearKernelFits(in, out) : F32KernelOn() && LinearF32KernelFits(in, out)) {
    return m;
  }
  return std::nullopt;
}

at::Tensor PackLinearWeight(const at::Tensor& weight) {
  static const bool enabled = [] {
    const char* v = std::getenv("SPECDEC_PACKED_WEIGHTS");
    return v == nullptr || std::string(v) != "0";
  }();
  const int32_t block = LinearPackBlock();
  if (!enabled || block == 0 || LinearKernelMaxRows() != std::numeric_limits<int64_t>::max() ||
      RowKernelType(weight) != KernelDType::kBF16 || weight.dim() != 2 ||
      !LinearKernelFits(weight.size(1), weight.size(0))) {
    return weight;
  }
  const at::Tensor w = weight.contiguous();
  at::Tensor packed = at::empty({w.size(0) / block, w.size(1) / 32, 32 * block}, w.options());
  PackLinearWeights(static_cast<const uint16_t*>(w.data_ptr()), w.size(1), w.size(0), block,
                    static_cast<uint16_t*>(packed.data_ptr()));
  return packed;
}

at::Tensor PadOutputsForKernel(const at::Tensor& weight) {
  if (RowKernelType(weight) != KernelDType::kBF16 || weight.dim() != 2) return weight;
  const int64_t out = weight.size(0), in = weight.size(1);
  constexpr int64_t kOutputBlock = 16;  // LinearKernelFits: `out` a multiple of 16
  const int64_t padded = (out + kOutputBlock - 1) / kOutputBlock * kOutputBlock;
  if (LinearKernelFits(in, out) || !LinearKernelFits(in, padded)) return weight;
  at::Tensor w = at::zeros({padded, in}, weight.options());
  w.narrow(0, 0, out).copy_(weight);
  return w;
}

at::Tensor UnpackLinearWeight(const at::Tensor& weight) {
  if (!IsPacked(weight)) return weight;
  const auto [out, in] = MatrixShape(weight);
  at::Tensor w = at::empty({out, in}, weight.options());
  UnpackLinearWeights(static_cast<const uint16_t*>(weight.data_ptr()), in, out, PackBlock(weight),
                      static_cast<uint16_t*>(w.data_ptr()));
  return w;
}

at::Tensor EmbeddingRows(const at::Tensor& weight, const at::Tensor& ids) {
  if (!IsPacked(weight)) return weight.index_select(0, ids.to(weight.device()));
  const at::Tensor idx = ids.to(at::kCPU, at::kLong).contiguous();
  const auto [vocab, in] = MatrixShape(weight);
  const int32_t block = PackBlock(weight);
  at::Tensor rows = at::empty({idx.numel(), in}, weight.options());
  const auto* src = static_cast<const uint16_t*>(weight.data_ptr());
  auto* dst = static_cast<uint16_t*>(rows.data_ptr());
  const int64_t* id = idx.data_ptr<int64_t>();
  for (int64_t r = 0; r < idx.numel(); ++r) {
    TORCH_CHECK(id[r] >= 0 && id[r] < vocab, "token id ", id[r], " is outside the vocabulary");
    CopyPackedRow(src, in, id[r], block, dst + r * in);
  }
  return rows;
}

namespace {

// The row-independent mode's product of more rows than one RowsLinear launch takes (a prompt's,
// or a batch's with one): launches of at most CudaRowsLinearMaxRows() rows, each row computed as
// it is alone; undefined where the kernel declines.
at::Tensor RowsLinearInChunks(const at::Tensor& x, const at::Tensor& weight,
                              const at::Tensor& residual) {
  const int64_t chunk = CudaRowsLinearMaxRows();
  if (chunk <= 0) return at::Tensor();
  std::vector<at::Tensor> parts;
  for (int64_t r = 0; r < x.size(0); r += chunk) {
    const int64_t n = std::min(chunk, x.size(0) - r);
    at::Tensor y;
    const at::Tensor part_residual = residual.defined() ? residual.narrow(0, r, n) : residual;
    if (!CudaRowsLinear(x.narrow(0, r, n), weight, part_residual, &y)) return at::Tensor();
    parts.push_back(std::move(y));
  }
  return at::cat(parts);
}

// x weight^T (+ residual) on specdec's own CUDA kernels where they take the product: the
// row-independent products when opted in for this many rows (in the row-independent mode, for
// any number of rows), else the decoding step's vector products; undefined otherwise (cuBLAS's
// then).
at::Tensor OwnCudaLinear(const at::Tensor& x, const at::Tensor& weight,
                         const at::Tensor& residual) {
  if (x.dim() != 2) return at::Tensor();
  at::Tensor y;
  if (x.size(0) <= CudaRowsLinearMaxRows() && CudaRowsLinear(x, weight, residual, &y)) return y;
  if (x.size(0) > CudaRowsLinearMaxRows() && CudaRowIndependent()) {
    if (y = RowsLinearInChunks(x, weight, residual); y.defined()) return y;
  }
  if (x.size(0) <= CudaVectorLinearMaxRows() && CudaVectorLinear(x, weight, residual, &y)) return y;
  return at::Tensor();
}

}  // namespace

at::Tensor Linear(const at::Tensor& x, const at::Tensor& weight) {
  if (at::Tensor y = OwnCudaLinear(x, weight, at::Tensor()); y.defined()) return y;
  if (x.scalar_type() == at::kFloat && weight.scalar_type() == at::kBFloat16 && x.dim() == 2 &&
      x.device().is_cpu()) {
    return MixedLinear(x, weight);
  }
  if (at::Tensor y = KernelLinear(x, weight); y.defined()) return y;
  // A bf16 x whose rows are strided takes the kernel once copied, as its contiguous copy would;
  // only a product the kernel does not take at all unpacks a packed matrix.
  if (x.dim() == 2 && x.stride(1) != 1 && x.scalar_type() == at::kBFloat16) {
    if (at::Tensor y = KernelLinear(x.contiguous(), weight); y.defined()) return y;
  }
  if (IsPacked(weight)) return Linear(x, UnpackLinearWeight(weight));
  if (at::Tensor y = F32KernelLinear(x, weight); y.defined()) return y;
  if (x.dim() == 2 && x.size(0) == 1 && x.scalar_type() == at::kFloat) {
    return at::mv(weight, x.select(0, 0)).unsqueeze(0);
  }
  if (x.dim() == 2 && x.scalar_type() == at::kBFloat16 && x.device().is_cpu()) {
    const int64_t rows = x.size(0), padded = GemmRows(rows);
    if (padded != rows) {
      at::Tensor xp = at::empty({padded, x.size(1)}, x.options());
      xp.narrow(0, 0, rows).copy_(x);
      xp.narrow(0, rows, padded - rows).zero_();
      return at::linear(xp, weight).narrow(0, 0, rows);
    }
  }
  return at::linear(x, weight);
}

at::Tensor RmsNorm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const std::optional<KernelDType> dt = RowKernelType(x);
  if (dt && x.dim() >= 1 && x.dim() <= 3 && x.numel() > 0 && x.stride(-1) == 1 &&
      weight.scalar_type() == x.scalar_type() && weight.is_contiguous() &&
      weight.numel() == x.size(-1) && weight.device().is_cpu() && !weight.requires_grad()) {
    RowSet rows;
    rows.data = x.data_ptr();
    rows.dim = x.size(-1);
    if (x.dim() >= 2) {
      rows.outer = x.size(0);
      rows.outer_stride = x.stride(0);
    } else {
      rows.outer = 1;
    }
    if (x.dim() == 3) {
      rows.inner = x.size(1);
      rows.inner_stride = x.stride(1);
    }
    at::Tensor out = at::empty(x.sizes(), x.options());
    RmsNormRows(rows, weight.data_ptr(), static_cast<float>(eps), *dt, out.data_ptr());
    return out;
  }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  // One kernel: normalized and scaled in float, rounded once.
  if (FusedOpsOn(x)) return at::rms_norm(x, {x.size(-1)}, weight, eps);
#endif
  at::Tensor xf = x.to(at::kFloat);
  at::Tensor var = xf.pow(2).mean(-1, /*keepdim=*/true);
  return (xf * at::rsqrt(var + eps)).to(x.scalar_type()) * weight;
}

at::Tensor SwiGlu(const at::Tensor& gu, int64_t inter) {
  const std::optional<KernelDType> dt = RowKernelType(gu);
  if (dt && gu.dim() == 2 && gu.size(1) == 2 * inter && gu.stride(1) == 1 && gu.numel() > 0) {
    at::Tensor out = at::empty({gu.size(0), inter}, gu.options());
    SwiGluRows(gu.data_ptr(), gu.size(0), gu.stride(0), inter, *dt, out.data_ptr());
    return out;
  }
  at::Tensor out;
  if (CudaSwiGlu(gu, inter, &out)) return out;
  return at::silu(gu.narrow(-1, 0, inter)) * gu.narrow(-1, inter, inter);
}

at::Tensor RopeInvFreq(const ModelConfig& c) {
  const int64_t d = c.head_dim;
  at::Tensor exponents = at::arange(0, d, 2, at::kLong).to(at::kFloat) / static_cast<float>(d);
  at::Tensor inv_freq = 1.0 / at::pow(static_cast<float>(c.rope_theta), exponents);
  const RopeScaling& s = c.rope_scaling;
  if (s.type == RopeScaling::Type::kLinear) {
    inv_freq = inv_freq / s.factor;
  } else if (s.type == RopeScaling::Type::kLlama3) {
    const double old_len = static_cast<double>(s.original_max_position_embeddings);
    const double low_wavelen = old_len / s.low_freq_factor;
    const double high_wavelen = old_len / s.high_freq_factor;
    at::Tensor wavelen = 2.0 * M_PI / inv_freq;
    at::Tensor scaled = at::where(wavelen > low_wavelen, inv_freq / s.factor, inv_freq);
    at::Tensor smooth =
        (old_len / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
    at::Tensor smoothed = (1 - smooth) * scaled / s.factor + smooth * scaled;
    at::Tensor medium = (wavelen >= high_wavelen).logical_and(wavelen <= low_wavelen);
    inv_freq = at::where(medium, smoothed, scaled);
  }
  return inv_freq.contiguous();
}

void RopeCosSin(const at::Tensor& inv_freq, const at::Tensor& positions, at::Tensor* cos,
                at::Tensor* sin) {
  at::Tensor freqs = positions.to(at::kFloat).unsqueeze(1) * inv_freq.unsqueeze(0);  // [n, d/2]
  at::Tensor emb = at::cat({freqs, freqs}, 1);
  *cos = emb.cos();
  *sin = emb.sin();
}

RopeTable::RopeTable(const at::Tensor& inv_freq, int64_t positions) : inv_freq_(inv_freq) {
  if (!inv_freq.device().is_cpu() || positions <= 0) return;
  positions = std::min(positions, kMaxPositions);
  at::Tensor cos, sin;
  RopeCosSin(inv_freq, at::arange(positions, at::kLong), &cos, &sin);
  const int64_t half = inv_freq.size(0);
  cos_half_ = cos.narrow(1, 0, half).contiguous();
  sin_half_ = sin.narrow(1, 0, half).contiguous();
  positions_ = positions;
}

void RopeTable::CosSin(const at::Tensor& positions, at::Tensor* cos, at::Tensor* sin) const {
  const bool gather = positions_ > 0 && positions.device().is_cpu() &&
                      positions.scalar_type() == at::kLong && positions.dim() == 1;
  const at::Tensor pos = gather ? positions.contiguous() : at::Tensor();
  const int64_t n = gather ? pos.size(0) : 0;
  const int64_t* p = gather ? pos.data_ptr<int64_t>() : nullptr;
  for (int64_t i = 0; i < n; ++i) {
    if (p[i] < 0 || p[i] >= positions_) {
      RopeCosSin(inv_freq_, positions, cos, sin);
      return;
    }
  }
  if (!gather) {
    RopeCosSin(inv_freq_, positions, cos, sin);
    return;
  }
  const int64_t half = cos_half_.size(1);
  *cos = at::empty({n, 2 * half}, at::kFloat);
  *sin = at::empty({n, 2 * half}, at::kFloat);
  const size_t bytes = static_cast<size_t>(half) * sizeof(float);
  for (const auto& [table, out] : {std::pair{&cos_half_, cos}, std::pair{&sin_half_, sin}}) {
    const float* src = table->data_ptr<float>();
    float* dst = out->data_ptr<float>();
    for (int64_t i = 0; i < n; ++i) {
      std::memcpy(dst + 2 * i * half, src + p[i] * half, bytes);
      std::memcpy(dst + (2 * i + 1) * half, src + p[i] * half, bytes);
    }
  }
}

at::Tensor ApplyRope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const std::optional<KernelDType> dt = RowKernelType(x);
  if (dt && x.dim() == 3 && x.numel() > 0 && x.stride(2) == 1 && x.size(2) % 2 == 0 &&
      cos.scalar_type() == at::kFloat && sin.scalar_type() == at::kFloat && cos.is_contiguous() &&
      sin.is_contiguous() && cos.dim() == 2 && cos.sizes() == sin.sizes() &&
      cos.size(0) == x.size(0) && cos.size(1) == x.size(2) && cos.device().is_cpu() &&
      sin.device().is_cpu() && !cos.requires_grad() && !sin.requires_grad()) {
    RowSet rows;
    rows.data = x.data_ptr();
    rows.outer = x.size(0);
    rows.outer_stride = x.stride(0);
    rows.inner = x.size(1);
    rows.inner_stride = x.stride(1);
    rows.dim = x.size(2);
    at::Tensor out = at::empty(x.sizes(), x.options());
    RopeRows(rows, cos.data_ptr<float>(), sin.data_ptr<float>(), *dt, out.data_ptr());
    return out;
  }
  const int64_t half = x.size(-1) / 2;
  at::Tensor c = cos.to(x.scalar_type()).unsqueeze(1);
  at::Tensor s = sin.to(x.scalar_type()).unsqueeze(1);
  at::Tensor x1 = x.narrow(-1, 0, half);
  at::Tensor x2 = x.narrow(-1, half, half);
  if (FusedOpsOn(x)) {
    // x * cos, then each half's rotated term in one multiply-add: three kernels instead of five.
    at::Tensor out = x * c;
    out.narrow(-1, 0, half).addcmul_(x2, s.narrow(-1, 0, half), -1);
    out.narrow(-1, half, half).addcmul_(x1, s.narrow(-1, half, half));
    return out;
  }
  at::Tensor rotated = at::cat({-x2, x1}, -1);
  return x * c + rotated * s;
}

void NormRopeQk(const at::Tensor& qkv, const ModelConfig& c, const at::Tensor& q_norm,
                const at::Tensor& k_norm, const at::Tensor& cos, const at::Tensor& sin,
                at::Tensor* q, at::Tensor* k) {
  const int64_t rows = qkv.size(0), heads = c.num_attention_heads, kv_heads = c.num_key_value_heads;
  const int64_t d = c.head_dim;
  const at::Tensor none;
  if (CudaNormRopeQk(qkv, heads, kv_heads, d, c.qk_norm ? q_norm : none, c.qk_norm ? k_norm : none,
                     c.rms_norm_eps, cos, sin, q, k)) {
    return;
  }
  *q = qkv.narrow(1, 0, heads * d).reshape({rows, heads, d});
  *k = qkv.narrow(1, heads * d, kv_heads * d).reshape({rows, kv_heads, d});
  if (c.qk_norm) {
    *q = RmsNorm(*q, q_norm, c.rms_norm_eps);
    *k = RmsNorm(*k, k_norm, c.rms_norm_eps);
  }
  *q = ApplyRope(*q, cos, sin);
  *k = ApplyRope(*k, cos, sin);
}

at::Tensor AddLinear(const at::Tensor& x, const at::Tensor& a, const at::Tensor& weight) {
  if (at::Tensor y = OwnCudaLinear(a, weight, x); y.defined()) return y;
  if (FusedOpsOn(x) && x.dim() == 2 && a.dim() == 2 && a.scalar_type() == weight.scalar_type() &&
      x.scalar_type() == weight.scalar_type()) {
    return at::addmm(x, a, weight.t());
  }
  return x + Linear(a, weight);
}

at::Tensor CapacityMask(const at::Tensor& slots, const at::Tensor& new_rows, int64_t capacity) {
  const int64_t n = slots.size(0);
  const at::TensorOptions floats = slots.options().dtype(at::kFloat);
  at::Tensor mask = at::zeros({n, capacity}, floats);
  mask.masked_fill_(at::arange(capacity, slots.options()).ge(slots.narrow(0, 0, 1)).unsqueeze(0),
                    -std::numeric_limits<float>::infinity());
  mask.index_copy_(1, slots, new_rows.defined() ? new_rows : at::zeros({n, n}, floats));
  return mask;
}

at::Tensor PrepareRecurringMask(const at::Tensor& mask, at::ScalarType dtype, int64_t group) {
  if (!mask.defined() || !FusedOpsOn(mask)) return mask;
  return mask.to(dtype).repeat({group, 1});
}

at::Tensor Attention(const at::Tensor& q, const at::Tensor& keys, const at::Tensor& values,
                     const at::Tensor& mask, bool recurring_shape) {
  const int64_t n = q.size(0);
  const int64_t heads = q.size(1);
  const int64_t d = q.size(2);
  const int64_t kv_heads = keys.size(0);
  const int64_t m = keys.size(1);
  const int64_t group = heads / kv_heads;
  if (at::Tensor out;
      recurring_shape && n <= CudaFixedAttentionMaxRows() &&
      CudaFixedAttention(q, keys, values, mask, 1.0 / std::sqrt(static_cast<double>(d)), &out)) {
    return out;
  }
  // [n, kv, g, d] -> [kv, g*n, d]: all query heads sharing a KV head form one matmul.
  at::Tensor qg =
      q.view({n, kv_heads, group, d}).permute({1, 2, 0, 3}).reshape({kv_heads, group * n, d});
  if (keys.scalar_type() != q.scalar_type()) {  // a bf16 cache under float rows
    return Attention(q, keys.to(q.scalar_type()), values.to(q.scalar_type()), mask,
                     recurring_shape);
  }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
  if (recurring_shape && FusedOpsOn(q)) {
    // The group's query rows as one head each of kv_heads batches: [1, kv, g*n, d]; the mask
    // repeated per group row, additive in q's dtype (0 and -inf are exact in bf16).
    std::optional<at::Tensor> bias;
    if (mask.defined()) {
      const bool prepared = mask.scalar_type() == q.scalar_type() && mask.size(0) == group * n;
      bias = prepared ? mask : mask.to(q.scalar_type()).repeat({group, 1});
    }
    at::Tensor out = at::scaled_dot_product_attention(qg.unsqueeze(0), keys.unsqueeze(0),
                                                      values.unsqueeze(0), bias);
    return out.view({kv_heads, group, n, d}).permute({2, 0, 1, 3}).reshape({n, heads * d});
  }
#endif
  at::Tensor scores = at::matmul(qg, keys.transpose(1, 2)).to(at::kFloat);  // [kv, g*n, m]
  scores.mul_(1.0 / std::sqrt(static_cast<double>(d)));
  if (mask.defined()) {
    scores = (scores.view({kv_heads, group, n, m}) + mask).view({kv_heads, group * n, m});
  }
  at::Tensor probs = at::softmax(scores, -1).to(q.scalar_type());
  at::Tensor out = at::matmul(probs, values);  // [kv, g*n, d]
  return out.view({kv_heads, group, n, d}).permute({2, 0, 1, 3}).reshape({n, heads * d});
}

void FusedAttentionRows(const void* q, const void* k, const void* v, void* out, KernelDType dtype,
                        int64_t heads, int64_t kv_heads, int64_t d, int64_t layer,
                        std::span<const FusedAttentionInput> inputs) {
  const size_t elem = dtype == KernelDType::kBF16 ? 2 : 4;
  const auto* qp = static_cast<const char*>(q);
  const auto* kp = static_cast<const char*>(k);
  const auto* vp = static_cast<const char*>(v);
  auto* op = static_cast<char*>(out);
  std::vector<AttentionSequence> seqs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const FusedAttentionInput& in = inputs[i];
    AttentionSequence& s = seqs[i];
    s.q = qp + in.offset * heads * d * elem;
    s.q_row_stride = heads * d;
    s.out = op + in.offset * heads * d * elem;
    s.out_row_stride = heads * d;
    s.new_keys = kp + in.offset * kv_heads * d * elem;
    s.new_values = vp + in.offset * kv_heads * d * elem;
    s.keys = in.cache->KeyData(layer);
    s.values = in.cache->ValueData(layer);
    s.capacity = in.cache->capacity();
    s.past = in.past;
    s.n = in.n;
    s.tree_parents = in.tree_parents;
    s.bidirectional = in.bidirectional;
  }
  // SPECDEC_ATTENTION_PAIRS=0 (read once) keeps bf16 attention on the kernel's float path.
  static const bool pairs = [] {
    const char* v = std::getenv("SPECDEC_ATTENTION_PAIRS");
    return v == nullptr || std::string(v) != "0";
  }();
  // The caches' dtype: the rows' own, or bf16 under float rows (LoadOptions::kv_dtype).
  const std::optional<KernelDType> cache_dtype =
      inputs.empty()
          ? std::nullopt
          : std::optional(inputs[0].cache->shape().dtype == at::kBFloat16 ? KernelDType::kBF16
                                                                          : KernelDType::kF32);
  const AttentionProblem problem{
      seqs,  heads,      kv_heads,
      d,     dtype,      static_cast<float>(1.0 / std::sqrt(static_cast<double>(d))),
      pairs, cache_dtype};
  BalancedParallelFor(AttentionWorkItems(problem), 1,
                      [&](int64_t b, int64_t e) { RunAttention(problem, b, e); });
}

void FusedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, int64_t layer,
                    std::span<const FusedAttentionInput> inputs, at::Tensor& out) {
  const at::Tensor qc = q.contiguous(), kc = k.contiguous(), vc = v.contiguous();
  const KernelDType dtype =
      q.scalar_type() == at::kBFloat16 ? KernelDType::kBF16 : KernelDType::kF32;
  FusedAttentionRows(qc.data_ptr(), kc.data_ptr(), vc.data_ptr(), out.data_ptr(), dtype, q.size(1),
                     k.size(1), q.size(2), layer, inputs);
}

}  // namespace specdec::model
