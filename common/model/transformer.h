// Qwen3 / Llama decoder-only transformer for inference, written on ATen (no autograd).
//
// The API is batch-shaped: Forward takes a list of sequences, each with its own KV cache, new
// tokens, absolute positions and either a causal or a tree mask. The linear layers run once over
// all new rows of the batch; attention runs per sequence over its own cache.
#ifndef SPECDEC_COMMON_MODEL_TRANSFORMER_H_
#define SPECDEC_COMMON_MODEL_TRANSFORMER_H_

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/model/kv_cache.h"
#include "common/model/model_config.h"

namespace specdec::model {

class KvCachePool;

enum class LogitsMode { kNone, kLast, kAll };

// One sequence of a batched forward pass.
struct SequenceInput {
  KvCache* cache = nullptr;            // created by this model's NewCache(); gains tokens.size()
  std::span<const int32_t> tokens;     // new tokens, at least one, each in [0, vocab_size)
  std::span<const int32_t> positions;  // absolute RoPE positions; empty = cache->length() + i
  // Tree attention: parent index of each new token among the new tokens (must be < its own
  // index), or -1 for a child of the committed context. Empty = causal. A new token attends to
  // the whole cache and to its ancestors and itself among the new tokens.
  std::span<const int32_t> tree_parents;
  LogitsMode logits = LogitsMode::kLast;
};

struct ForwardOptions {
  // Layers (0-based) whose output residual stream (before the final norm) is returned for every
  // new token, concatenated in this order: the DFlash target features.
  std::vector<int64_t> capture_layers;
};

struct SequenceOutput {
  at::Tensor logits;    // float32 [1 or n, vocab] on the host for kLast / kAll; else undefined
  at::Tensor features;  // [n, capture_layers.size() * hidden], activation dtype, model device
};

struct LoadOptions {
  // The weights' dtype: kFloat or kBFloat16. Unset: bf16 for a bf16 checkpoint, f32 otherwise.
  std::optional<at::ScalarType> dtype;
  // The activations' dtype (the residual stream, norms, attention, KV cache, features). Unset:
  // float32 on the CPU, where bf16 weights meet float activations only in the matrix products
  // (the activations rounded to bf16 on the way in, the sums kept in float, as llama.cpp does);
  // the weights' dtype on a CUDA device. SPECDEC_ACTIVATIONS=bf16 in the environment makes the
  // unset default the weights' dtype on the CPU too (Transformers' bf16 arithmetic, every
  // intermediate rounded).
  std::optional<at::ScalarType> activation_dtype;
  // The KV cache's dtype: the activations' or, under float activations, the weights' bf16 (keys
  // and values rounded as they are stored: only attention's products consume them). Unset: the
  // weights' dtype (SPECDEC_KV_DTYPE=f32 in the environment: the activations').
  std::optional<at::ScalarType> kv_dtype;
  // Longest sequence (cache + new tokens) accepted; 0 = the config's max_position_embeddings.
  int64_t max_context = 0;
  // Where the weights, KV caches and activations live: the CPU, or a CUDA device when this
  // libtorch has one. Logits always come back to the host (float32, see SequenceOutput); features
  // stay on the device for the drafter that reads them.
  c10::Device device = c10::kCPU;
  // Whether bf16 matrices on the CPU are laid out for the linear kernel where it reads that
  // layout faster (PackLinearWeight in ops.h; its DFlash drafter follows the target). The
  // logits are the same either way.
  bool pack_weights = true;
  // Whether CPU passes with float activations, whose every row attends through the fused kernel
  // (decoding steps, verifies, prompts up to SPECDEC_ATTENTION_KERNEL_MAX_ROWS), run the decoder
  // layers on raw buffers (row_layer.h) instead of ATen's operators: the same kernels in the same
  // order, so the same logits, at less cost per layer. SPECDEC_ROW_LAYERS=0 in the environment
  // turns it off.
  bool row_layers = true;
  // Whether the row layers' products, as their threads finish, read the start of the next
  // matrix into cache (parallel_linear.h); the logits are the same either way.
  bool read_ahead = true;
  // Whether single-sequence passes of up to kMaxCapturedRows new rows on a CUDA device (decoding
  // steps, verifies, tree verifies) replay CUDA graphs, captured per KV cache and pass shape on
  // a shape's second use: one launch instead of hundreds, whose host cost bounds a step
  // otherwise (design.md §2.9). Needs a libtorch with CUDA. SPECDEC_CUDA_GRAPHS=0 in the
  // environment turns it off.
  bool cuda_graphs = true;
  // Tests: every such pass, on any device, runs the graphs' body (fixed buffers, slot and
  // positions read from a tensor, attention over the cache's whole capacity) uncaptured.
  bool uncaptured_fixed_passes = false;

  // The options of a service's --dtype flag: "auto" (the checkpoint's), "f32" or "bf16";
  // INVALID_ARGUMENT otherwise.
  static absl::StatusOr<LoadOptions> ForDtype(std::string_view dtype);
  // A service's --device flag: "cpu", "cuda" or "cuda:N". INVALID_ARGUMENT for anything else,
  // FAILED_PRECONDITION when this libtorch or machine has no such CUDA device.
  static absl::StatusOr<c10::Device> ParseDevice(std::string_view device);
};

// An immutable loaded model. Forward is safe to call from several threads at once as long as
// no KV cache is used by two calls concurrently.
class Transformer {
 public:
  // The most new rows of a pass that is captured as a CUDA graph (LoadOptions::cuda_graphs).
  static constexpr int64_t kMaxCapturedRows = 64;

  // Loads `<dir>/config.json` and the safetensors weights (single or sharded). Every expected
  // tensor must exist with the exact shape; errors name the file, tensor and shapes.
  static absl::StatusOr<std::unique_ptr<Transformer>> Load(const std::string& dir,
                                                           const LoadOptions& options = {});
  // Builds a model from HF-named tensors (any float dtype), e.g. from RandomWeights.
  static absl::StatusOr<std::unique_ptr<Transformer>> FromTensors(
      const ModelConfig& config, const std::map<std::string, at::Tensor>& weights,
      const LoadOptions& options = {});
  // HF-named f32 weights drawn from N(0, std^2) (norm weights around 1) with a fixed seed.
  static std::map<std::string, at::Tensor> RandomWeights(const ModelConfig& config, uint64_t seed,
                                                         double std = 0.05);

  ~Transformer();

  absl::StatusOr<std::vector<SequenceOutput>> Forward(std::span<const SequenceInput> batch,
                                                      const ForwardOptions& options = {}) const;

  // A cache for a new sequence: where passes are fixed (captured as CUDA graphs, or uncaptured for
  // tests), one that an earlier sequence gave back with RecycleCache, emptied, whose fixed passes
  // stay valid (design.md §2.9); else a new one.
  std::unique_ptr<KvCache> NewCache() const;
  // Gives back the cache of a finished sequence. Where passes are fixed, up to kKeptCaches
  // holding up to kKeptCacheBytes of buffers together are kept, with their passes, for later
  // NewCache calls; others are freed.
  void RecycleCache(std::unique_ptr<KvCache> cache) const;
  static constexpr size_t kKeptCaches = 8;
  static constexpr int64_t kKeptCacheBytes = int64_t{1} << 30;

  const ModelConfig& config() const;
  // The weights' dtype (of the matrices; norm weights are kept in the activations' dtype).
  at::ScalarType dtype() const;
  // The activations' dtype: of the residual stream, KV caches, features and Embed's rows.
  at::ScalarType activation_dtype() const;
  // The KV caches' dtype (NewCache, kv_bytes_per_token).
  at::ScalarType kv_dtype() const;
  // LoadOptions::pack_weights as loaded.
  bool pack_weights() const;
  // Whether CPU passes can take the row layers (LoadOptions::row_layers, and every tensor of the
  // layers in a form they read).
  bool row_layers() const;
  c10::Device device() const;
  int64_t max_context() const;
  // Bytes of one token's K and V over all layers.
  int64_t kv_bytes_per_token() const;
  // CUDA graphs captured so far, over all caches (LoadOptions::cuda_graphs).
  int64_t captured_graphs() const { return captured_graphs_.load(); }
  // Whether single-sequence passes of this model, and of the drafters bound to it, replay CUDA
  // graphs (LoadOptions::cuda_graphs on a CUDA device, with a libtorch that has CUDA).
  bool captures_graphs() const;
  // LoadOptions::uncaptured_fixed_passes as loaded.
  bool uncaptured_fixed_passes() const { return options_.uncaptured_fixed_passes; }

  // Building blocks shared with drafters that reuse the target's embedding and head.
  // int64 [n] (any device) -> [n, hidden], activation dtype, model device.
  at::Tensor Embed(const at::Tensor& token_ids) const;
  at::Tensor FinalNorm(const at::Tensor& hidden) const;
  // [n, hidden] -> float32 [n, vocab] on the host: the one place logits leave the device, for
  // the accept decision and sampling.
  at::Tensor LmHead(const at::Tensor& normed) const;
  // The same logits left on the model's device (float32 [n, vocab]), for a pass a graph captures.
  at::Tensor DeviceLogits(const at::Tensor& normed) const;

 private:
  struct Weights;
  Transformer(ModelConfig config, LoadOptions options, std::unique_ptr<Weights> weights);

  struct FixedPass;  // captured_pass.cc

  // Whether `in` (validated, alone in its batch) runs as a fixed pass (captured_pass.cc).
  bool TakesFixedPass(const SequenceInput& in) const;
  // `in` through its cache's fixed pass of this shape, replayed when captured; nullopt when the
  // shape runs through the general path this time (its first use, a failed capture).
  std::optional<std::vector<SequenceOutput>> RunFixedPass(const SequenceInput& in,
                                                          const ForwardOptions& options) const;
  // The pass itself, from `pass`'s input tensors to its output tensors: what a graph captures.
  void RunFixedPassBody(FixedPass& pass, const KvCache& cache) const;

  ModelConfig config_;
  LoadOptions options_;
  std::unique_ptr<Weights> weights_;
  uint64_t id_;
  mutable std::atomic<int64_t> captured_graphs_{0};
  std::unique_ptr<KvCachePool> cache_pool_;  // declared last: its caches go before the weights
};

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_TRANSFORMER_H_
