#include "common/model/transformer.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/model/cuda_ops.h"
#include "common/model/huge_pages.h"
#include "common/model/kv_cache_pool.h"
#include "common/model/ops.h"
#include "common/model/transformer_internal.h"
#include "common/model/weights.h"
#include "common/util/status_macros.h"

namespace specdec::model {
namespace {

// Longest run of new rows that attends through the fused kernel; longer ones use ATen's matmuls.
// Every length by default: the kernel is as fast as ATen's bf16 matmuls for prefills too (it
// scores no key a causal row cannot see), and ATen's go through oneDNN, which compiles and
// caches kernels per (rows, keys) shape, so every new prompt length added memory.
// SPECDEC_ATTENTION_KERNEL_MAX_ROWS overrides it (0 = never use the kernel).
int64_t KernelMaxRows() {
  static const int64_t value = [] {
    const char* env = std::getenv("SPECDEC_ATTENTION_KERNEL_MAX_ROWS");
    return env != nullptr ? std::atoll(env) : std::numeric_limits<int64_t>::max();
  }();
  return value;
}

std::atomic<uint64_t> next_model_id{1};

// LoadOptions::activation_dtype when unset: float on the CPU unless SPECDEC_ACTIVATIONS=bf16 (read
// once); the weights' dtype on a CUDA device.
at::ScalarType DefaultActivationDtype(at::ScalarType weights, c10::Device device) {
  static const bool weights_dtype_on_cpu = [] {
    const char* v = std::getenv("SPECDEC_ACTIVATIONS");
    return v != nullptr && std::string(v) == "bf16";
  }();
  return device.is_cpu() && !weights_dtype_on_cpu ? at::kFloat : weights;
}

// LoadOptions::kv_dtype when unset: the weights' dtype, unless SPECDEC_KV_DTYPE=f32 (read once)
// keeps it in the activations'.
at::ScalarType DefaultKvDtype(at::ScalarType weights, at::ScalarType activations) {
  static const bool activations_dtype = [] {
    const char* v = std::getenv("SPECDEC_KV_DTYPE");
    return v != nullptr && std::string(v) == "f32";
  }();
  return activations_dtype ? activations : weights;
}

// The new rows of a forward pass's batch, one sequence after another, and what every layer
// shares: positions, masks and which sequences attend through which path.
struct ForwardRows {
  std::span<const SequenceInput> batch;
  c10::Device device = c10::kCPU;  // the model's
  int64_t total = 0;               // new rows of all sequences
  at::Tensor tokens, positions;    // int64 [total]
  at::Tensor cos, sin;             // RoPE tables of `positions`
  std::vector<at::Tensor> masks;   // per sequence; undefined for a single causal row
  std::vector<int64_t> offsets;    // first row of each sequence
  std::vector<size_t> aten_index;  // sequences attending through ATen's matmuls
  std::vector<FusedAttentionInput> kernel_inputs;  // the others, in one fused call
  // The row-independent mode (cuda_ops.h): per sequence, the capacity mask (CapacityMask, as
  // PrepareRecurringMask prepares it) through which it attends with CudaFixedAttention, as a
  // fixed pass of its rows would; undefined for the others.
  std::vector<at::Tensor> fixed_masks;
};

// Checks sequence `s` of a batch; `seen` collects the caches of the sequences before it.
absl::Status ValidateSequence(const SequenceInput& in, size_t s, uint64_t model_id,
                              int64_t vocab_size, int64_t max_context,
                              std::unordered_set<const KvCache*>& seen) {
  if (in.cache == nullptr || in.cache->shape().owner_id != model_id) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", s, ": KV cache missing or created by another model"));
  }
  if (!seen.insert(in.cache).second) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", s, ": the same KV cache appears twice in one batch"));
  }
  const int64_t n = static_cast<int64_t>(in.tokens.size());
  if (n == 0) return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": no tokens"));
  for (int64_t i = 0; i < n; ++i) {
    if (in.tokens[i] < 0 || in.tokens[i] >= vocab_size) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": token id ", in.tokens[i],
                                                     " at index ", i, " is outside [0, ",
                                                     vocab_size, ")"));
    }
  }
  if (!in.positions.empty() && static_cast<int64_t>(in.positions.size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", s, ": ", in.positions.size(), " positions for ", n, " tokens"));
  }
  for (int32_t p : in.positions) {
    if (p < 0 || p >= max_context) {
      return absl::InvalidArgumentError(
          absl::StrCat("sequence ", s, ": position ", p, " outside [0, ", max_context, ")"));
    }
  }
  if (!in.tree_parents.empty()) {
    if (static_cast<int64_t>(in.tree_parents.size()) != n) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": ", in.tree_parents.size(),
                                                     " tree parents for ", n, " tokens"));
    }
    for (int64_t i = 0; i < n; ++i) {
      if (in.tree_parents[i] < -1 || in.tree_parents[i] >= i) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": tree parent of node ", i,
                                                       " is ", in.tree_parents[i],
                                                       "; it must be -1 or an earlier node"));
      }
    }
  }
  if (in.cache->length() + n > max_context) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", s, ": ", in.cache->length(), " cached + ", n,
                     " new tokens exceed the maximum context of ", max_context));
  }
  return absl::OkStatus();
}

// Validation at the boundary: nothing is written before every check passed. Returns the number of
// new rows of the whole batch.
absl::StatusOr<int64_t> ValidateForward(std::span<const SequenceInput> batch,
                                        const ForwardOptions& options, const ModelConfig& c,
                                        uint64_t model_id, int64_t max_context) {
  std::unordered_set<const KvCache*> seen;
  int64_t total = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    RETURN_IF_ERROR(ValidateSequence(batch[s], s, model_id, c.vocab_size, max_context, seen));
    total += static_cast<int64_t>(batch[s].tokens.size());
  }
  for (int64_t layer : options.capture_layers) {
    if (layer < 0 || layer >= c.num_hidden_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("capture layer ", layer, " outside [0, ", c.num_hidden_layers, ")"));
    }
  }
  return total;
}

}  // namespace

at::Tensor NewRowsMask(const SequenceInput& in, int64_t past, int64_t n) {
  at::Tensor mask = at::full({n, past + n}, -std::numeric_limits<float>::infinity());
  mask.narrow(1, 0, past).zero_();
  auto acc = mask.accessor<float, 2>();
  for (int64_t i = 0; i < n; ++i) {
    if (in.tree_parents.empty()) {
      for (int64_t j = 0; j <= i; ++j) acc[i][past + j] = 0.f;
    } else {
      for (int64_t j = i; j >= 0; j = in.tree_parents[j]) acc[i][past + j] = 0.f;
    }
  }
  return mask;
}

namespace {

// Gathers the batch's tokens, positions and masks into `rows` (whose batch and total are set) and
// reserves each cache's room for its new rows.
void GatherRows(ForwardRows& rows) {
  const std::span<const SequenceInput> batch = rows.batch;
  rows.tokens = at::empty({rows.total}, at::kLong);
  rows.positions = at::empty({rows.total}, at::kLong);
  auto* tok_ptr = rows.tokens.data_ptr<int64_t>();
  auto* pos_ptr = rows.positions.data_ptr<int64_t>();
  rows.masks.resize(batch.size());
  rows.offsets.resize(batch.size());
  int64_t off = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const SequenceInput& in = batch[s];
    const int64_t n = static_cast<int64_t>(in.tokens.size());
    const int64_t past = in.cache->length();
    rows.offsets[s] = off;
    for (int64_t i = 0; i < n; ++i) {
      tok_ptr[off + i] = in.tokens[i];
      pos_ptr[off + i] = in.positions.empty() ? past + i : in.positions[i];
    }
    if (n > 1 || !in.tree_parents.empty()) rows.masks[s] = NewRowsMask(in, past, n);
    in.cache->Reserve(n);
    off += n;
  }
  if (!rows.device.is_cpu()) {
    rows.tokens = rows.tokens.to(rows.device);
    rows.positions = rows.positions.to(rows.device);
    for (at::Tensor& mask : rows.masks) {
      if (mask.defined()) mask = mask.to(rows.device);
    }
  }
}

// Short sequences (decoding and verification rows) attend through the fused kernel, all in one
// call; long ones (prefill) through ATen's matmuls, one sequence at a time. The kernel is the
// CPU's: on a CUDA device every sequence attends through ATen.
void RouteAttention(ForwardRows& rows) {
  const int64_t kernel_max_rows = rows.device.is_cpu() ? KernelMaxRows() : 0;
  const std::span<const SequenceInput> batch = rows.batch;
  for (size_t s = 0; s < batch.size(); ++s) {
    const int64_t n = static_cast<int64_t>(batch[s].tokens.size());
    if (n > kernel_max_rows) {
      rows.aten_index.push_back(s);
      continue;
    }
    rows.kernel_inputs.push_back(
        {batch[s].cache, rows.offsets[s], batch[s].cache->length(), n,
         batch[s].tree_parents.empty() ? nullptr : batch[s].tree_parents.data()});
  }
}

// In the row-independent mode on a CUDA device, the masks of the sequences of at most
// CudaFixedAttentionMaxRows() new rows, over their caches' whole capacity (after GatherRows
// reserved it): their rows then attend as a fixed pass's do, whatever the pass.
void PrepareFixedAttention(ForwardRows& rows, at::ScalarType dtype, int64_t group) {
  if (!rows.device.is_cuda() || !CudaRowIndependent()) return;
  rows.fixed_masks.resize(rows.batch.size());
  for (size_t s = 0; s < rows.batch.size(); ++s) {
    const KvCache& cache = *rows.batch[s].cache;
    const int64_t n = static_cast<int64_t>(rows.batch[s].tokens.size()), past = cache.length();
    if (n > CudaFixedAttentionMaxRows()) continue;
    const at::Tensor slots =
        at::arange(past, past + n, at::TensorOptions().dtype(at::kLong).device(rows.device));
    const at::Tensor& mask = rows.masks[s];  // [n, past + n], or undefined for a single row
    const at::Tensor new_rows = mask.defined() ? mask.narrow(1, past, n) : at::Tensor();
    rows.fixed_masks[s] =
        PrepareRecurringMask(CapacityMask(slots, new_rows, cache.capacity()), dtype, group);
  }
}

// Sequence `s`'s attention of its new rows `q` through CudaFixedAttention, where the
// row-independent mode gave it a mask and the kernel takes it (its keys already written);
// undefined otherwise.
at::Tensor FixedAttentionOf(const ForwardRows& rows, size_t s, int64_t l, const at::Tensor& q) {
  at::Tensor out;
  if (s >= rows.fixed_masks.size() || !rows.fixed_masks[s].defined()) return out;
  const KvCache& cache = *rows.batch[s].cache;
  const double scale = 1.0 / std::sqrt(static_cast<double>(q.size(2)));
  if (!CudaFixedAttention(q, cache.KeyBuffer(l), cache.ValueBuffer(l), rows.fixed_masks[s], scale,
                          &out)) {
    return at::Tensor();
  }
  return out;
}

// Layer `l`'s attention output of every new row, [total, heads * head_dim] with `x`'s options;
// writes the rows' keys and values into their caches first.
at::Tensor LayerAttention(const ForwardRows& rows, int64_t l, const at::Tensor& q,
                          const at::Tensor& k, const at::Tensor& v, int64_t q_width,
                          const at::Tensor& x) {
  const std::span<const SequenceInput> batch = rows.batch;
  if (rows.kernel_inputs.empty() && batch.size() == 1) {
    KvCache* cache = batch[0].cache;
    cache->Write(l, k, v);
    if (at::Tensor out = FixedAttentionOf(rows, 0, l, q); out.defined()) return out;
    const int64_t m = cache->length() + rows.total;
    return Attention(q, cache->Keys(l, m), cache->Values(l, m), rows.masks[0]);
  }
  at::Tensor attn = at::empty({rows.total, q_width}, x.options());
  if (!rows.kernel_inputs.empty()) FusedAttention(q, k, v, l, rows.kernel_inputs, attn);
  for (size_t s : rows.aten_index) {
    const int64_t n = static_cast<int64_t>(batch[s].tokens.size());
    const int64_t offset = rows.offsets[s];
    KvCache* cache = batch[s].cache;
    cache->Write(l, k.narrow(0, offset, n), v.narrow(0, offset, n));
    const at::Tensor q_s = q.narrow(0, offset, n);
    at::Tensor out = FixedAttentionOf(rows, s, l, q_s);
    if (!out.defined()) {
      const int64_t m = cache->length() + n;
      out = Attention(q_s, cache->Keys(l, m), cache->Values(l, m), rows.masks[s]);
    }
    attn.narrow(0, offset, n).copy_(out);
  }
  return attn;
}

// Whether SPECDEC_ROW_LAYERS=0 is absent from the environment (read once).
bool RowLayersOn() {
  static const bool on = [] {
    const char* v = std::getenv("SPECDEC_ROW_LAYERS");
    return v == nullptr || std::string(v) != "0";
  }();
  return on;
}

// A float CPU vector's data, or null for anything else (an undefined tensor included).
const float* FloatData(const at::Tensor& t) {
  if (!t.defined() || !t.device().is_cpu() || t.scalar_type() != at::kFloat || !t.is_contiguous()) {
    return nullptr;
  }
  return t.data_ptr<float>();
}

// `layers` as the row layers read them; empty when one of their tensors does not fit.
std::vector<RowLayerWeights> RowLayersOf(std::span<const DecoderLayerWeights> layers,
                                         const ModelConfig& c) {
  std::vector<RowLayerWeights> out;
  for (const DecoderLayerWeights& layer : layers) {
    RowLayerWeights r;
    r.input_norm = FloatData(layer.input_norm);
    r.post_norm = FloatData(layer.post_norm);
    r.q_norm = c.qk_norm ? FloatData(layer.q_norm) : nullptr;
    r.k_norm = c.qk_norm ? FloatData(layer.k_norm) : nullptr;
    const std::optional<RowMatrix> qkv = RowMatrixOf(layer.qkv), o = RowMatrixOf(layer.o),
                                   gate_up = RowMatrixOf(layer.gate_up),
                                   down = RowMatrixOf(layer.down);
    if (r.input_norm == nullptr || r.post_norm == nullptr ||
        (c.qk_norm && (r.q_norm == nullptr || r.k_norm == nullptr)) || !qkv || !o || !gate_up ||
        !down) {
      return {};
    }
    r.qkv = *qkv;
    r.o = *o;
    r.gate_up = *gate_up;
    r.down = *down;
    out.push_back(r);
  }
  return out;
}

// The decoder layers of a pass whose every row attends through the fused kernel, on the row
// layers: x (float, contiguous) is the residual stream. Returns the captured layers' outputs side
// by side in capture_layers' order (undefined when none is captured), each copied row by row
// into its columns as its layer ends: a decoding step's features without a tensor operation.
// With `read_ahead`, each product's threads read the next matrix ahead, the last layer's
// `lm_head` (may be null).
at::Tensor RunRowLayers(const ForwardRows& rows, const ModelConfig& c,
                        std::span<const RowLayerWeights> layers,
                        const std::vector<int64_t>& capture_layers, bool read_ahead,
                        const RowMatrix* lm_head, at::Tensor& x) {
  const RowLayerShape shape{c.hidden_size,         c.num_attention_heads,
                            c.num_key_value_heads, c.head_dim,
                            c.intermediate_size,   static_cast<float>(c.rms_norm_eps)};
  RowLayerPass pass(shape, rows.total, rows.cos.data_ptr<float>(), rows.sin.data_ptr<float>(),
                    read_ahead);
  auto attend = [&](int64_t l, const float* q, const float* k, const float* v, float* out) {
    FusedAttentionRows(q, k, v, out, KernelDType::kF32, shape.heads, shape.kv_heads, shape.head_dim,
                       l, rows.kernel_inputs);
  };
  x = x.contiguous();
  const int64_t hidden = c.hidden_size;
  const int64_t width = static_cast<int64_t>(capture_layers.size()) * hidden;
  at::Tensor features;
  if (width > 0) features = at::empty({rows.total, width}, x.options());
  for (int64_t l = 0; l < static_cast<int64_t>(layers.size()); ++l) {
    const bool last = l + 1 == static_cast<int64_t>(layers.size());
    pass.Run(layers[l], l, attend, x.data_ptr<float>(), last ? lm_head : &layers[l + 1].qkv);
    for (size_t j = 0; j < capture_layers.size(); ++j) {
      if (capture_layers[j] != l) continue;
      const float* src = x.data_ptr<float>();
      float* dst = features.data_ptr<float>() + static_cast<int64_t>(j) * hidden;
      for (int64_t r = 0; r < rows.total; ++r) {
        std::memcpy(dst + r * width, src + r * hidden, hidden * sizeof(float));
      }
    }
  }
  return features;
}

}  // namespace

void RunDecoderLayer(const DecoderLayerWeights& w, const ModelConfig& c, int64_t l,
                     const at::Tensor& cos, const at::Tensor& sin, const LayerAttend& attend,
                     at::Tensor& x) {
  const int64_t total = x.size(0);
  const int64_t heads = c.num_attention_heads, kv_heads = c.num_key_value_heads, d = c.head_dim;
  const int64_t q_width = heads * d, kv_width = kv_heads * d;
  at::Tensor h = RmsNorm(x, w.input_norm, c.rms_norm_eps);
  at::Tensor qkv = Linear(h, w.qkv);
  at::Tensor q, k;
  NormRopeQk(qkv, c, w.q_norm, w.k_norm, cos, sin, &q, &k);
  at::Tensor v = qkv.narrow(1, q_width + kv_width, kv_width).reshape({total, kv_heads, d});
  at::Tensor attn = attend(l, q, k, v);
  x = AddLinear(x, attn, w.o);
  h = RmsNorm(x, w.post_norm, c.rms_norm_eps);
  at::Tensor gu = Linear(h, w.gate_up);
  x = AddLinear(x, SwiGlu(gu, c.intermediate_size), w.down);
}

at::Tensor CapturedFeatures(const std::vector<at::Tensor>& layer_out,
                            const std::vector<int64_t>& capture_layers) {
  std::vector<at::Tensor> ordered;
  for (int64_t want : capture_layers) ordered.push_back(layer_out[want]);
  at::Tensor features;
  if (!ordered.empty()) features = ordered.size() == 1 ? ordered[0] : at::cat(ordered, 1);
  return features;
}

namespace {

// The rows that want logits, in batch order.
std::vector<int64_t> LogitRows(const ForwardRows& rows) {
  std::vector<int64_t> out;
  for (size_t s = 0; s < rows.batch.size(); ++s) {
    const SequenceInput& in = rows.batch[s];
    const int64_t n = static_cast<int64_t>(in.tokens.size());
    if (in.logits == LogitsMode::kLast) out.push_back(rows.offsets[s] + n - 1);
    if (in.logits == LogitsMode::kAll) {
      for (int64_t i = 0; i < n; ++i) out.push_back(rows.offsets[s] + i);
    }
  }
  return out;
}

// Each sequence's share of the logits (rows in LogitRows order) and features; commits its new
// rows to its cache.
std::vector<SequenceOutput> SplitOutputsAndCommit(const ForwardRows& rows, const at::Tensor& logits,
                                                  const at::Tensor& features) {
  const std::span<const SequenceInput> batch = rows.batch;
  std::vector<SequenceOutput> out(batch.size());
  int64_t row = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    const int64_t n = static_cast<int64_t>(batch[s].tokens.size());
    const int64_t k = batch[s].logits == LogitsMode::kAll    ? n
                      : batch[s].logits == LogitsMode::kLast ? 1
                                                             : 0;
    if (k > 0) out[s].logits = logits.narrow(0, row, k);
    row += k;
    if (features.defined()) out[s].features = features.narrow(0, rows.offsets[s], n);
    batch[s].cache->Commit(n);
  }
  return out;
}

}  // namespace

absl::StatusOr<LoadOptions> LoadOptions::ForDtype(std::string_view dtype) {
  LoadOptions o;
  if (dtype == "f32") {
    o.dtype = at::kFloat;
  } else if (dtype == "bf16") {
    o.dtype = at::kBFloat16;
  } else if (dtype != "auto" && !dtype.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype must be auto, f32 or bf16, got '", std::string(dtype), "'"));
  }
  return o;
}

absl::StatusOr<c10::Device> LoadOptions::ParseDevice(std::string_view device) {
  c10::Device parsed = c10::kCPU;
  try {
    parsed = c10::Device(std::string(device));
  } catch (const std::exception&) {
    return absl::InvalidArgumentError(
        absl::StrCat("device must be cpu, cuda or cuda:N, got '", std::string(device), "'"));
  }
  if (!parsed.is_cpu() && !parsed.is_cuda()) {
    return absl::InvalidArgumentError(
        absl::StrCat("device must be cpu, cuda or cuda:N, got '", std::string(device), "'"));
  }
  if (parsed.is_cuda()) {
    if (!parsed.has_index()) parsed.set_index(0);  // "cuda" is the first device
    if (!at::hasCUDA()) {
      return absl::FailedPreconditionError(
          absl::StrCat("device '", std::string(device),
                       "': this build's libtorch has no CUDA or no GPU is visible"));
    }
    const int64_t count = static_cast<int64_t>(at::getNumGPUs());
    if (parsed.has_index() && parsed.index() >= count) {
      return absl::FailedPreconditionError(
          absl::StrCat("device '", std::string(device), "': only ", count, " CUDA devices"));
    }
  }
  return parsed;
}

Transformer::Transformer(ModelConfig config, LoadOptions options, std::unique_ptr<Weights> weights)
    : config_(std::move(config)),
      options_(options),
      weights_(std::move(weights)),
      id_(next_model_id.fetch_add(1)) {
  if (options_.max_context <= 0) options_.max_context = config_.max_position_embeddings;
  KvCacheShape shape;
  shape.num_layers = config_.num_hidden_layers;
  shape.num_kv_heads = config_.num_key_value_heads;
  shape.head_dim = config_.head_dim;
  shape.dtype = *options_.kv_dtype;
  shape.device = options_.device;
  shape.owner_id = id_;
  const bool fixed = captures_graphs() || options_.uncaptured_fixed_passes;
  cache_pool_ =
      std::make_unique<KvCachePool>(shape, fixed ? kKeptCaches : 0, fixed ? kKeptCacheBytes : 0);
}

Transformer::~Transformer() = default;

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::FromTensors(
    const ModelConfig& config, const std::map<std::string, at::Tensor>& tensors,
    const LoadOptions& options) {
  LoadOptions opts = options;
  if (!opts.dtype) opts.dtype = config.torch_dtype == "bfloat16" ? at::kBFloat16 : at::kFloat;
  if (*opts.dtype != at::kFloat && *opts.dtype != at::kBFloat16) {
    return absl::InvalidArgumentError("compute dtype must be float32 or bfloat16");
  }
  const at::ScalarType dt = *opts.dtype;
  if (!opts.activation_dtype) opts.activation_dtype = DefaultActivationDtype(dt, opts.device);
  if (*opts.activation_dtype != at::kFloat && *opts.activation_dtype != dt) {
    return absl::InvalidArgumentError("activation dtype must be float32 or the weights' dtype");
  }
  const at::ScalarType act = *opts.activation_dtype;
  if (!opts.kv_dtype) opts.kv_dtype = DefaultKvDtype(dt, act);
  if (*opts.kv_dtype != act && *opts.kv_dtype != dt) {
    return absl::InvalidArgumentError("KV cache dtype must be the activations' or the weights'");
  }
  if (const char* env = std::getenv("SPECDEC_CUDA_GRAPHS");
      env != nullptr && std::string(env) == "0") {
    opts.cuda_graphs = false;
  }
  if (opts.device.is_cuda() && !at::hasCUDA()) {
    return absl::FailedPreconditionError("a CUDA device was asked for, but this libtorch has none");
  }
  try {
    RETURN_IF_ERROR(CheckTensors(tensors, TransformerTensorSpecs(config)));
    auto get = [&](const std::string& name) {
      return tensors.at(name).to(opts.device, dt).contiguous();
    };
    auto get_norm = [&](const std::string& name) {
      return tensors.at(name).to(opts.device, act).contiguous();
    };
    auto matrix = [&](const at::Tensor& m) { return opts.pack_weights ? PackLinearWeight(m) : m; };
    auto w = std::make_unique<Weights>();
    // The head's rows padded where only the vocabulary's width keeps it off the linear kernel
    // (LmHead returns the vocabulary's columns); a tied embedding shares the padded matrix.
    const auto head = [&](const at::Tensor& m) {
      return matrix(opts.device.is_cpu() ? PadOutputsForKernel(m) : m);
    };
    w->embed = config.tie_word_embeddings ? head(get("model.embed_tokens.weight"))
                                          : matrix(get("model.embed_tokens.weight"));
    w->lm_head = config.tie_word_embeddings ? w->embed : head(get("lm_head.weight"));
    w->final_norm = get_norm("model.norm.weight");
    w->inv_freq = RopeInvFreq(config).to(opts.device);
    w->rope = RopeTable(w->inv_freq,
                        opts.max_context > 0 ? opts.max_context : config.max_position_embeddings);
    for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
      const std::string p = absl::StrCat("model.layers.", l, ".");
      Weights::Layer layer;
      layer.input_norm = get_norm(p + "input_layernorm.weight");
      layer.post_norm = get_norm(p + "post_attention_layernorm.weight");
      if (config.qk_norm) {
        layer.q_norm = get_norm(p + "self_attn.q_norm.weight");
        layer.k_norm = get_norm(p + "self_attn.k_norm.weight");
      }
      layer.qkv =
          matrix(at::cat({get(p + "self_attn.q_proj.weight"), get(p + "self_attn.k_proj.weight"),
                          get(p + "self_attn.v_proj.weight")},
                         0)
                     .contiguous());
      layer.o = matrix(get(p + "self_attn.o_proj.weight"));
      layer.gate_up =
          matrix(at::cat({get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")}, 0)
                     .contiguous());
      layer.down = matrix(get(p + "mlp.down_proj.weight"));
      w->layers.push_back(std::move(layer));
    }
    if (opts.device.is_cpu()) {
      std::vector<at::Tensor*> all = {&w->embed, &w->lm_head, &w->final_norm, &w->inv_freq};
      for (Weights::Layer& layer : w->layers) {
        all.insert(all.end(), {&layer.input_norm, &layer.post_norm, &layer.q_norm, &layer.k_norm,
                               &layer.qkv, &layer.o, &layer.gate_up, &layer.down});
      }
      MoveIntoHugePages(all);
      if (opts.row_layers && RowLayersOn() && act == at::kFloat) {
        w->row_layers = RowLayersOf(w->layers, config);
        w->row_lm_head = RowMatrixOf(w->lm_head);
      }
    }
    return std::unique_ptr<Transformer>(new Transformer(config, opts, std::move(w)));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("building the model failed: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::Load(const std::string& dir,
                                                               const LoadOptions& options) {
  ASSIGN_OR_RETURN(ModelConfig config, LoadModelConfig(dir));
  ASSIGN_OR_RETURN(auto tensors, LoadTensors(dir, TransformerTensorSpecs(config)));
  LoadOptions opts = options;
  if (!opts.dtype) {
    opts.dtype = tensors.at("model.embed_tokens.weight").scalar_type() == at::kBFloat16
                     ? at::kBFloat16
                     : at::kFloat;
  }
  auto model = FromTensors(config, tensors, opts);
  if (!model.ok()) {
    return absl::Status(model.status().code(), absl::StrCat(dir, ": ", model.status().message()));
  }
  return model;
}

std::map<std::string, at::Tensor> Transformer::RandomWeights(const ModelConfig& config,
                                                             uint64_t seed, double std) {
  return RandomTensors(TransformerTensorSpecs(config), seed, std);
}

std::unique_ptr<KvCache> Transformer::NewCache() const { return cache_pool_->Take(); }

void Transformer::RecycleCache(std::unique_ptr<KvCache> cache) const {
  cache_pool_->Give(std::move(cache));
}

const ModelConfig& Transformer::config() const { return config_; }
at::ScalarType Transformer::dtype() const { return *options_.dtype; }
at::ScalarType Transformer::activation_dtype() const { return *options_.activation_dtype; }
at::ScalarType Transformer::kv_dtype() const { return *options_.kv_dtype; }
bool Transformer::pack_weights() const { return options_.pack_weights; }
bool Transformer::row_layers() const { return !weights_->row_layers.empty(); }
c10::Device Transformer::device() const { return options_.device; }
int64_t Transformer::max_context() const { return options_.max_context; }
int64_t Transformer::kv_bytes_per_token() const {
  return 2 * config_.num_hidden_layers * config_.num_key_value_heads * config_.head_dim *
         static_cast<int64_t>(c10::elementSize(*options_.kv_dtype));
}

at::Tensor Transformer::Embed(const at::Tensor& token_ids) const {
  return EmbeddingRows(weights_->embed, token_ids).to(*options_.activation_dtype);
}

at::Tensor Transformer::FinalNorm(const at::Tensor& hidden) const {
  return RmsNorm(hidden, weights_->final_norm, config_.rms_norm_eps);
}

at::Tensor Transformer::LmHead(const at::Tensor& normed) const {
  return DeviceLogits(normed).to(at::kCPU);
}

at::Tensor Transformer::DeviceLogits(const at::Tensor& normed) const {
  at::Tensor logits = Linear(normed, weights_->lm_head).to(at::kFloat);
  if (logits.size(-1) == config_.vocab_size) return logits;
  return logits.narrow(-1, 0, config_.vocab_size).contiguous();  // a padded head (FromTensors)
}

absl::StatusOr<std::vector<SequenceOutput>> Transformer::Forward(
    std::span<const SequenceInput> batch, const ForwardOptions& options) const {
  const ModelConfig& c = config_;
  if (batch.empty()) return std::vector<SequenceOutput>{};
  ASSIGN_OR_RETURN(const int64_t total,
                   ValidateForward(batch, options, c, id_, options_.max_context));

  try {
    if (batch.size() == 1 && TakesFixedPass(batch[0])) {
      if (auto out = RunFixedPass(batch[0], options)) return *std::move(out);
    }
    ForwardRows rows;
    rows.batch = batch;
    rows.device = options_.device;
    rows.total = total;
    GatherRows(rows);
    weights_->rope.CosSin(rows.positions, &rows.cos, &rows.sin);
    if (!rows.device.is_cpu()) {  // once here, not in every layer's ApplyRope (the same rounding)
      rows.cos = rows.cos.to(*options_.activation_dtype);
      rows.sin = rows.sin.to(*options_.activation_dtype);
    }
    RouteAttention(rows);
    PrepareFixedAttention(rows, *options_.activation_dtype,
                          c.num_attention_heads / c.num_key_value_heads);

    // ---- decoder layers.
    at::Tensor x = EmbeddingRows(weights_->embed, rows.tokens).to(*options_.activation_dtype);
    const LayerAttend attend = [&](int64_t l, const at::Tensor& q, const at::Tensor& k,
                                   const at::Tensor& v) {
      return LayerAttention(rows, l, q, k, v, c.num_attention_heads * c.head_dim, x);
    };
    at::Tensor features;
    if (!weights_->row_layers.empty() && rows.aten_index.empty()) {
      features =
          RunRowLayers(rows, c, weights_->row_layers, options.capture_layers, options_.read_ahead,
                       weights_->row_lm_head ? &*weights_->row_lm_head : nullptr, x);
    } else {
      std::vector<at::Tensor> layer_out(c.num_hidden_layers);
      for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        RunDecoderLayer(weights_->layers[l], c, l, rows.cos, rows.sin, attend, x);
        if (std::find(options.capture_layers.begin(), options.capture_layers.end(), l) !=
            options.capture_layers.end()) {
          layer_out[l] = x;
        }
      }
      features = CapturedFeatures(layer_out, options.capture_layers);
    }

    // ---- logits for the rows that want them, in one head GEMM.
    const std::vector<int64_t> logit_rows = LogitRows(rows);
    at::Tensor logits;
    if (!logit_rows.empty()) {
      at::Tensor sel = static_cast<int64_t>(logit_rows.size()) == total
                           ? x
                           : x.index_select(0, at::tensor(logit_rows, at::kLong).to(x.device()));
      logits = LmHead(FinalNorm(sel));
    }
    return SplitOutputsAndCommit(rows, logits, features);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("forward pass failed: ", e.what()));
  }
}

}  // namespace specdec::model
