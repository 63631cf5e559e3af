#include "common/model/row_layer.h"

#include <algorithm>
#include <cstring>

#include "common/model/parallel_linear.h"
#include "common/model/row_kernels.h"

namespace specdec::model {
namespace {

// The rows of a [rows, dim] float matrix whose rows are `stride` elements apart.
RowSet Rows(const float* data, int64_t rows, int64_t stride, int64_t dim) {
  RowSet set;
  set.data = data;
  set.outer = rows;
  set.outer_stride = stride;
  set.dim = dim;
  return set;
}

// The heads [rows, heads, d] of a matrix whose rows are `stride` elements apart.
RowSet Heads(const float* data, int64_t rows, int64_t stride, int64_t heads, int64_t d) {
  RowSet set = Rows(data, rows, stride, d);
  set.inner = heads;
  set.inner_stride = d;
  return set;
}

// x += y, elementwise over n floats.
void AddInto(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

// The weights a product reads ahead for `m` (none for null).
NextWeights NextOf(const RowMatrix* m) {
  NextWeights next;
  if (m == nullptr) return next;
  next.data = m->data;
  next.out = m->out;
  next.in = m->in;
  next.element_bytes = m->bf16 ? 2 : 4;
  return next;
}

}  // namespace

RowLayerPass::RowLayerPass(const RowLayerShape& shape, int64_t rows, const float* cos,
                           const float* sin, bool read_ahead)
    : shape_(shape), rows_(rows), cos_(cos), sin_(sin), read_ahead_(read_ahead) {
  const int64_t q_width = shape.heads * shape.head_dim;
  const int64_t kv_width = shape.kv_heads * shape.head_dim;
  const int64_t widest_in = std::max({shape.hidden, q_width, shape.intermediate});
  h_.resize(rows * shape.hidden);
  qkv_.resize(rows * (q_width + 2 * kv_width));
  q_.resize(rows * q_width);
  k_.resize(rows * kv_width);
  v_.resize(rows * kv_width);
  normed_.resize(rows * q_width);
  attn_.resize(rows * q_width);
  sums_.resize(rows * shape.hidden);
  gu_.resize(rows * 2 * shape.intermediate);
  act_.resize(rows * shape.intermediate);
  x_bf16_.resize(rows * widest_in);
}

void RowLayerPass::Product(const RowMatrix& m, const float* x, float* y, const RowMatrix* next) {
  if (!read_ahead_) next = nullptr;
  if (!m.bf16) {
    LinearF32Problem p;
    p.x = x;
    p.rows = rows_;
    p.x_stride = m.in;
    p.w = static_cast<const float*>(m.data);
    p.in = m.in;
    p.out = m.out;
    p.y = y;
    p.y_stride = m.out;
    RunLinearF32Parallel(p, NextOf(next));
    return;
  }
  RoundRowsToBf16(x, rows_, m.in, m.in, x_bf16_.data());
  LinearProblem p;
  p.x = x_bf16_.data();
  p.rows = rows_;
  p.x_stride = m.in;
  p.w = static_cast<const uint16_t*>(m.data);
  p.w_block = m.block;
  p.in = m.in;
  p.out = m.out;
  p.y_f32 = y;
  p.y_stride = m.out;
  RunLinearParallel(p, NextOf(next));
}

void RowLayerPass::NormRopeQk(const RowLayerWeights& w) {
  const int64_t d = shape_.head_dim, heads = shape_.heads, kv_heads = shape_.kv_heads;
  const int64_t width = (heads + 2 * kv_heads) * d;
  const float* q_in = qkv_.data();
  const float* k_in = qkv_.data() + heads * d;
  if (w.q_norm != nullptr) {
    RmsNormRows(Heads(q_in, rows_, width, heads, d), w.q_norm, shape_.eps, KernelDType::kF32,
                normed_.data());
    RopeRows(Heads(normed_.data(), rows_, heads * d, heads, d), cos_, sin_, KernelDType::kF32,
             q_.data());
    RmsNormRows(Heads(k_in, rows_, width, kv_heads, d), w.k_norm, shape_.eps, KernelDType::kF32,
                normed_.data());
    RopeRows(Heads(normed_.data(), rows_, kv_heads * d, kv_heads, d), cos_, sin_, KernelDType::kF32,
             k_.data());
    return;
  }
  RopeRows(Heads(q_in, rows_, width, heads, d), cos_, sin_, KernelDType::kF32, q_.data());
  RopeRows(Heads(k_in, rows_, width, kv_heads, d), cos_, sin_, KernelDType::kF32, k_.data());
}

void RowLayerPass::Run(const RowLayerWeights& w, int64_t layer, RowAttend attend, float* x,
                       const RowMatrix* after) {
  const int64_t hidden = shape_.hidden, inter = shape_.intermediate;
  const int64_t q_width = shape_.heads * shape_.head_dim;
  const int64_t kv_width = shape_.kv_heads * shape_.head_dim;
  const int64_t width = q_width + 2 * kv_width;
  RmsNormRows(Rows(x, rows_, hidden, hidden), w.input_norm, shape_.eps, KernelDType::kF32,
              h_.data());
  Product(w.qkv, h_.data(), qkv_.data(), &w.o);
  NormRopeQk(w);
  for (int64_t r = 0; r < rows_; ++r) {
    std::memcpy(v_.data() + r * kv_width, qkv_.data() + r * width + q_width + kv_width,
                kv_width * sizeof(float));
  }
  attend(layer, q_.data(), k_.data(), v_.data(), attn_.data());
  Product(w.o, attn_.data(), sums_.data(), &w.gate_up);
  AddInto(x, sums_.data(), rows_ * hidden);
  RmsNormRows(Rows(x, rows_, hidden, hidden), w.post_norm, shape_.eps, KernelDType::kF32,
              h_.data());
  Product(w.gate_up, h_.data(), gu_.data(), &w.down);
  SwiGluRows(gu_.data(), rows_, 2 * inter, inter, KernelDType::kF32, act_.data());
  Product(w.down, act_.data(), sums_.data(), after);
  AddInto(x, sums_.data(), rows_ * hidden);
}

}  // namespace specdec::model
