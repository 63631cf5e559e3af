// Fixed passes (design.md §2.9): one sequence's pass of a given shape whose every tensor keeps its
// address from one use to the next, so that a CUDA graph captured once replays it. The tokens,
// positions, the first new slot and the new rows' mask are written into input tensors before
// each run; the keys and values go into the cache's buffers at that slot; attention reads the
// buffers' whole capacity with the slots past the new rows masked; logits and features are read
// from output tensors after it.
#include <ATen/ATen.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "common/model/cuda_graph.h"
#include "common/model/fixed_pass_set.h"
#include "common/model/ops.h"
#include "common/model/transformer.h"
#include "common/model/transformer_internal.h"

namespace specdec::model {
namespace {

struct PassShape {
  int64_t rows = 0;
  LogitsMode logits = LogitsMode::kLast;
  std::vector<int64_t> capture_layers;
  bool operator<(const PassShape& o) const {
    return std::tie(rows, logits, capture_layers) < std::tie(o.rows, o.logits, o.capture_layers);
  }
};

}  // namespace

struct Transformer::FixedPass {
  PassCapture capture;  // declared first: its graph is freed after the tensors it wrote
  PassShape shape;
  at::Tensor ints;      // int64 [2 rows + 1] on the device: tokens, positions, the first new slot
  at::Tensor mask;      // float [rows, rows] on the device: the new rows' mask among themselves
  at::Tensor logits;    // float [1 or rows, vocab] on the device; undefined for kNone
  at::Tensor features;  // [rows, capture width] on the device; undefined without capture layers
};

namespace {

// Host copies of `in`'s inputs for a pass after `past` cached tokens, copied to `ints` and `mask`
// without waiting (pinned staging on a CUDA device; the caching host allocator keeps a staging
// block until its copy is done).
void WritePassInputs(const SequenceInput& in, int64_t past, at::Tensor& ints, at::Tensor& mask) {
  const int64_t n = static_cast<int64_t>(in.tokens.size());
  const bool pinned = ints.device().is_cuda();
  at::Tensor host =
      at::empty({2 * n + 1}, at::TensorOptions().dtype(at::kLong).pinned_memory(pinned));
  int64_t* p = host.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    p[i] = in.tokens[i];
    p[n + i] = in.positions.empty() ? past + i : in.positions[i];
  }
  p[2 * n] = past;
  at::Tensor host_mask =
      at::empty({n, n}, at::TensorOptions().dtype(at::kFloat).pinned_memory(pinned));
  host_mask.copy_(NewRowsMask(in, 0, n));
  ints.copy_(host, /*non_blocking=*/true);
  mask.copy_(host_mask, /*non_blocking=*/true);
}

}  // namespace

bool Transformer::captures_graphs() const {
  return options_.device.is_cuda() && options_.cuda_graphs && CudaGraph::Available();
}

bool Transformer::TakesFixedPass(const SequenceInput& in) const {
  return (captures_graphs() || options_.uncaptured_fixed_passes) &&
         static_cast<int64_t>(in.tokens.size()) <= kMaxCapturedRows;
}

void Transformer::RunFixedPassBody(FixedPass& pass, const KvCache& cache) const {
  const ModelConfig& c = config_;
  const int64_t n = pass.shape.rows, capacity = cache.capacity();
  const at::Tensor tokens = pass.ints.narrow(0, 0, n);
  const at::Tensor positions = pass.ints.narrow(0, n, n);
  const at::Tensor slot = pass.ints.narrow(0, 2 * n, 1);
  at::Tensor cos, sin;
  RopeCosSin(weights_->inv_freq, positions, &cos, &sin);
  if (!device().is_cpu()) {  // once here, not in every layer's ApplyRope (the same rounding)
    cos = cos.to(*options_.activation_dtype);
    sin = sin.to(*options_.activation_dtype);
  }
  // The keys a row may see: the first `slot` slots, then the new rows as their mask says.
  const at::Tensor slots = slot + at::arange(n, pass.ints.options());
  const at::Tensor mask =
      PrepareRecurringMask(CapacityMask(slots, pass.mask, capacity), *options_.activation_dtype,
                           c.num_attention_heads / c.num_key_value_heads);
  const LayerAttend attend = [&](int64_t l, const at::Tensor& q, const at::Tensor& k,
                                 const at::Tensor& v) {
    const at::Tensor& keys = cache.KeyBuffer(l);
    const at::Tensor& values = cache.ValueBuffer(l);
    keys.index_copy_(1, slots, k.transpose(0, 1).to(keys.scalar_type()));
    values.index_copy_(1, slots, v.transpose(0, 1).to(values.scalar_type()));
    return Attention(q, keys, values, mask, /*recurring_shape=*/true);
  };
  at::Tensor x = EmbeddingRows(weights_->embed, tokens).to(*options_.activation_dtype);
  std::vector<at::Tensor> layer_out(c.num_hidden_layers);
  const std::vector<int64_t>& capture = pass.shape.capture_layers;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    RunDecoderLayer(weights_->layers[l], c, l, cos, sin, attend, x);
    if (std::find(capture.begin(), capture.end(), l) != capture.end()) layer_out[l] = x;
  }
  pass.features = CapturedFeatures(layer_out, capture);
  pass.logits = at::Tensor();
  if (pass.shape.logits != LogitsMode::kNone) {
    pass.logits =
        DeviceLogits(FinalNorm(pass.shape.logits == LogitsMode::kLast ? x.narrow(0, n - 1, 1) : x));
  }
}

std::optional<std::vector<SequenceOutput>> Transformer::RunFixedPass(
    const SequenceInput& in, const ForwardOptions& options) const {
  KvCache& cache = *in.cache;
  const int64_t n = static_cast<int64_t>(in.tokens.size());
  cache.Reserve(n);  // may move the buffers, which drops their passes
  const PassShape shape{n, in.logits, options.capture_layers};
  bool is_new = false;
  FixedPass& pass = FixedPassSet<PassShape, FixedPass>::Of(cache).Use(shape, &is_new);
  if (is_new) {
    pass.shape = shape;
    pass.ints = at::empty({2 * n + 1}, at::TensorOptions().dtype(at::kLong).device(device()));
    pass.mask = at::empty({n, n}, at::TensorOptions().dtype(at::kFloat).device(device()));
  }
  const bool capturing = !options_.uncaptured_fixed_passes;
  // A shape's first use takes the general path: most shapes of a tree search never recur.
  if (pass.capture.SkipsThisUse(capturing)) return std::nullopt;

  WritePassInputs(in, cache.length(), pass.ints, pass.mask);
  const auto body = [&] { RunFixedPassBody(pass, cache); };
  pass.capture.Run(body);
  std::vector<SequenceOutput> out(1);
  // The one wait for the device: the logits the accept decision reads.
  if (pass.logits.defined()) out[0].logits = pass.logits.to(at::kCPU);
  if (pass.features.defined()) out[0].features = pass.features.clone();
  pass.capture.CaptureIfDue(capturing, device().index(), body, &captured_graphs_);
  cache.Commit(n);
  return out;
}

}  // namespace specdec::model
