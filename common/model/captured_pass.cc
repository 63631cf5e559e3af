// Fixed passes (design.md §2.9): one sequence's pass of a given shape whose every tensor keeps its
// address from one use to the next, so that a CUDA graph captured once replays it. The tokens,
// positions, the first new slot and the new rows' mask are written into input tensors before
// each run; the keys and values go into the cache's buffers at that slot; attention reads the
// buffers' whole capacity with the slots past the new rows masked; logits and features are read
// from output tensors after it.
#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include "common/model/cuda_graph.h"
#include "common/model/ops.h"
#include "common/model/transformer.h"
#include "common/model/transformer_internal.h"

namespace specdec::model {
namespace {

// Shapes a cache keeps passes for; others run through the general path.
constexpr size_t kMaxShapesPerCache = 8;

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
  PassShape shape;
  int uses = 0;
  bool capture_failed = false;
  std::unique_ptr<CudaGraph> graph;  // declared first: freed after the tensors it wrote
  at::Tensor ints;      // int64 [2 rows + 1] on the device: tokens, positions, the first new slot
  at::Tensor mask;      // float [rows, rows] on the device: the new rows' mask among themselves
  at::Tensor logits;    // float [1 or rows, vocab] on the device; undefined for kNone
  at::Tensor features;  // [rows, capture width] on the device; undefined without capture layers
};

namespace {

// A cache's fixed passes, one per shape; dropped with the cache or when its buffers move. A
// template, so that the private Transformer::FixedPass is named only inside its members.
template <typename Pass>
struct FixedPasses : KvCache::Attachment {
  std::map<PassShape, Pass> passes;
};

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

std::atomic<bool> capture_failure_reported{false};

}  // namespace

bool Transformer::TakesFixedPass(const SequenceInput& in) const {
  const bool captured = options_.device.is_cuda() && options_.cuda_graphs && CudaGraph::Available();
  return (captured || options_.uncaptured_fixed_passes) &&
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
  at::Tensor mask = at::zeros({n, capacity}, pass.mask.options());
  mask.masked_fill_(at::arange(capacity, pass.ints.options()).ge(slot).unsqueeze(0),
                    -std::numeric_limits<float>::infinity());
  mask.index_copy_(1, slots, pass.mask);
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
  using Passes = FixedPasses<FixedPass>;
  auto* passes = dynamic_cast<Passes*>(cache.attachment());
  if (passes == nullptr) {
    auto fresh = std::make_unique<Passes>();
    passes = fresh.get();
    cache.set_attachment(std::move(fresh));
  }
  const PassShape shape{n, in.logits, options.capture_layers};
  auto it = passes->passes.find(shape);
  if (it == passes->passes.end()) {
    if (passes->passes.size() >= kMaxShapesPerCache) return std::nullopt;
    it = passes->passes.try_emplace(shape).first;
    FixedPass& fresh = it->second;
    fresh.shape = shape;
    fresh.ints = at::empty({2 * n + 1}, at::TensorOptions().dtype(at::kLong).device(device()));
    fresh.mask = at::empty({n, n}, at::TensorOptions().dtype(at::kFloat).device(device()));
  }
  FixedPass& pass = it->second;
  const bool capture = !options_.uncaptured_fixed_passes;
  // A shape's first use takes the general path: most shapes of a tree search never recur.
  if (pass.capture_failed || (capture && ++pass.uses == 1)) return std::nullopt;

  WritePassInputs(in, cache.length(), pass.ints, pass.mask);
  if (pass.graph != nullptr) {
    pass.graph->Replay();
  } else {
    RunFixedPassBody(pass, cache);
  }
  std::vector<SequenceOutput> out(1);
  // The one wait for the device: the logits the accept decision reads.
  if (pass.logits.defined()) out[0].logits = pass.logits.to(at::kCPU);
  if (pass.features.defined()) out[0].features = pass.features.clone();
  if (capture && pass.graph == nullptr) {
    auto graph = CudaGraph::Capture(device().index(), [&] { RunFixedPassBody(pass, cache); });
    if (graph.ok()) {
      pass.graph = *std::move(graph);
      captured_graphs_.fetch_add(1);
    } else {
      pass.capture_failed = true;
      if (!capture_failure_reported.exchange(true)) {
        std::fprintf(stderr, "specdec: %s; such passes run uncaptured\n",
                     std::string(graph.status().message()).c_str());
      }
    }
  }
  cache.Commit(n);
  return out;
}

}  // namespace specdec::model
