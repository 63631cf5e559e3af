#include "common/model/dflash_drafter.h"

#include <ATen/ATen.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "absl/strings/str_cat.h"
#include "common/model/dflash_internal.h"
#include "common/model/huge_pages.h"
#include "common/model/kv_cache_pool.h"
#include "common/model/ops.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace specdec::model {
namespace {

std::atomic<uint64_t> next_drafter_id{1ull << 40};

// The rows of a draft step. Rows: all sequences' context rows first, then all block rows.
struct DraftRows {
  std::span<const DraftInput> batch;
  std::vector<int64_t> ctx_off, blk_off, ctx_n;  // per sequence
  int64_t n_ctx = 0, n_blk = 0;
  at::Tensor ctx_pos, blk_pos, blk_tok;   // int64 [n_ctx], [n_blk], [n_blk]
  std::vector<at::Tensor> feats;          // the sequences' new features, in the model dtype
};

// Checks sequence `s` of a batch; `seen` collects the caches of the sequences before it.
absl::Status ValidateDraftInput(const DraftInput& in, size_t s, uint64_t drafter_id,
                                int64_t feat_width, const Transformer& target,
                                std::unordered_set<const KvCache*>& seen) {
  if (in.cache == nullptr || in.cache->shape().owner_id != drafter_id ||
      !seen.insert(in.cache).second) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", s, ": drafter cache missing, foreign, or used twice in one batch"));
  }
  if (in.block_size < 2 || in.block_size > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", s, ": block size must be in [2, 256], got ", in.block_size));
  }
  if (in.last_token < 0 || in.last_token >= target.config().vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", s, ": token id ", in.last_token, " outside the vocabulary"));
  }
  const int64_t m = in.new_features.defined() ? in.new_features.size(0) : 0;
  if (m > 0 && (in.new_features.dim() != 2 || in.new_features.size(1) != feat_width)) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": target features must be [m, ",
                                                   feat_width, "], got ",
                                                   ShapeString(in.new_features.sizes())));
  }
  if (in.cache->length() + m + in.block_size > target.max_context()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", s, ": context + block exceeds the maximum context of ", target.max_context()));
  }
  return absl::OkStatus();
}

// Lays out `rows.batch`'s rows: offsets, counts, positions, block tokens (row 0 the last token,
// the others the mask token) and features in dtype `dt`; reserves each cache's room.
void GatherDraftRows(DraftRows& rows, int32_t mask_token_id, at::ScalarType dt,
                     c10::Device device) {
  const std::span<const DraftInput> batch = rows.batch;
  rows.ctx_off.resize(batch.size());
  rows.blk_off.resize(batch.size());
  rows.ctx_n.resize(batch.size());
  for (size_t s = 0; s < batch.size(); ++s) {
    rows.ctx_n[s] = batch[s].new_features.defined() ? batch[s].new_features.size(0) : 0;
    rows.ctx_off[s] = rows.n_ctx;
    rows.blk_off[s] = rows.n_blk;
    rows.n_ctx += rows.ctx_n[s];
    rows.n_blk += batch[s].block_size;
  }
  rows.ctx_pos = at::empty({rows.n_ctx}, at::kLong);
  rows.blk_pos = at::empty({rows.n_blk}, at::kLong);
  rows.blk_tok = at::empty({rows.n_blk}, at::kLong);
  for (size_t s = 0; s < batch.size(); ++s) {
    const DraftInput& in = batch[s];
    const int64_t base = in.cache->length();
    for (int64_t i = 0; i < rows.ctx_n[s]; ++i) rows.ctx_pos[rows.ctx_off[s] + i] = base + i;
    const int64_t start = base + rows.ctx_n[s];
    for (int64_t i = 0; i < in.block_size; ++i) {
      rows.blk_pos[rows.blk_off[s] + i] = start + i;
      rows.blk_tok[rows.blk_off[s] + i] = i == 0 ? in.last_token : mask_token_id;
    }
    if (rows.ctx_n[s] > 0) rows.feats.push_back(in.new_features.to(device, dt));
    // Room for the context rows, and for the block's rows as scratch for the fused kernel.
    in.cache->Reserve(rows.ctx_n[s] + in.block_size);
  }
  if (!device.is_cpu()) {
    rows.ctx_pos = rows.ctx_pos.to(device);
    rows.blk_pos = rows.blk_pos.to(device);
    rows.blk_tok = rows.blk_tok.to(device);
  }
}

// Every block row attends to its sequence's context and its whole block (bidirectional). The
// block's keys and values go to scratch slots past the context, which BlockLogitsAndCommit never
// commits: on the CPU one fused call for all sequences, elsewhere ATen's matmuls per sequence.
void BlockAttention(const DraftRows& rows, int64_t l, const at::Tensor& q, const at::Tensor& k_b,
                    const at::Tensor& v_b, at::Tensor& attn) {
  const std::span<const DraftInput> batch = rows.batch;
  if (!q.device().is_cpu()) {
    for (size_t s = 0; s < batch.size(); ++s) {
      KvCache* cache = batch[s].cache;
      const int64_t past = cache->length() + rows.ctx_n[s], b = batch[s].block_size;
      cache->WriteAt(l, past, k_b.narrow(0, rows.blk_off[s], b), v_b.narrow(0, rows.blk_off[s], b));
      attn.narrow(0, rows.blk_off[s], b)
          .copy_(Attention(q.narrow(0, rows.blk_off[s], b), cache->Keys(l, past + b),
                           cache->Values(l, past + b), at::Tensor()));
    }
    return;
  }
  std::vector<FusedAttentionInput> inputs(batch.size());
  for (size_t s = 0; s < batch.size(); ++s) {
    inputs[s] = {batch[s].cache,      rows.blk_off[s], batch[s].cache->length() + rows.ctx_n[s],
                 batch[s].block_size, nullptr,         /*bidirectional=*/true};
  }
  FusedAttention(q, k_b, v_b, l, inputs, attn);
}

// Drafter layer `l` over the block rows: `x` ([n_blk, hidden]) becomes the layer's output.
// `ctx` holds the fused context rows ([n_ctx, hidden]; undefined when none), which contribute
// keys and values only: no input norm, no query, no MLP.
void RunDraftLayer(const DraftLayerWeights& w, const ModelConfig& c, int64_t l,
                   const at::Tensor& ctx, const at::Tensor (&rope)[4], const DraftAttend& attend,
                   at::Tensor& x) {
  const int64_t heads = c.num_attention_heads, kv_heads = c.num_key_value_heads, d = c.head_dim,
                inter = c.intermediate_size;
  const int64_t kv_width = kv_heads * d;
  const int64_t n_blk = x.size(0);
  const at::Tensor &cos_c = rope[0], &sin_c = rope[1], &cos_b = rope[2], &sin_b = rope[3];
  at::Tensor hn = RmsNorm(x, w.input_norm, c.rms_norm_eps);
  at::Tensor q = RmsNorm(Linear(hn, w.q).reshape({n_blk, heads, d}), w.q_norm, c.rms_norm_eps);
  q = ApplyRope(q, cos_b, sin_b);
  at::Tensor kv_b = Linear(hn, w.kv);
  at::Tensor k_b = ApplyRope(
      RmsNorm(kv_b.narrow(1, 0, kv_width).reshape({n_blk, kv_heads, d}), w.k_norm, c.rms_norm_eps),
      cos_b, sin_b);
  at::Tensor v_b = kv_b.narrow(1, kv_width, kv_width).reshape({n_blk, kv_heads, d});
  at::Tensor k_c, v_c;
  if (ctx.defined()) {
    const int64_t n_ctx = ctx.size(0);
    at::Tensor kv_c = Linear(ctx, w.kv);
    k_c = ApplyRope(RmsNorm(kv_c.narrow(1, 0, kv_width).reshape({n_ctx, kv_heads, d}), w.k_norm,
                            c.rms_norm_eps),
                    cos_c, sin_c);
    v_c = kv_c.narrow(1, kv_width, kv_width).reshape({n_ctx, kv_heads, d});
  }
  x = AddLinear(x, attend(l, q, k_b, v_b, k_c, v_c), w.o);
  at::Tensor gu = Linear(RmsNorm(x, w.post_norm, c.rms_norm_eps), w.gate_up);
  x = AddLinear(x, SwiGlu(gu, inter), w.down);
}

// The general path's attention: each sequence's context rows go into its cache, then every
// block row attends to its sequence's context and block.
at::Tensor AttendPerSequence(const DraftRows& rows, int64_t l, const at::Tensor& q,
                             const at::Tensor& k_b, const at::Tensor& v_b, const at::Tensor& k_c,
                             const at::Tensor& v_c) {
  const std::span<const DraftInput> batch = rows.batch;
  for (size_t s = 0; s < batch.size(); ++s) {
    if (rows.ctx_n[s] > 0) {
      batch[s].cache->Write(l, k_c.narrow(0, rows.ctx_off[s], rows.ctx_n[s]),
                            v_c.narrow(0, rows.ctx_off[s], rows.ctx_n[s]));
    }
  }
  at::Tensor attn = at::empty({q.size(0), q.size(1) * q.size(2)}, q.options());
  BlockAttention(rows, l, q, k_b, v_b, attn);
  return attn;
}

// The draft logits of each block's rows 1..b-1 from the normed block rows, in one head GEMM;
// commits each sequence's context rows to its cache.
std::vector<at::Tensor> BlockLogitsAndCommit(const DraftRows& rows, const at::Tensor& normed,
                                             const Transformer& target) {
  const std::span<const DraftInput> batch = rows.batch;
  std::vector<at::Tensor> out(batch.size());
  std::vector<at::Tensor> block_rows;
  for (size_t s = 0; s < batch.size(); ++s) {
    block_rows.push_back(normed.narrow(0, rows.blk_off[s] + 1, batch[s].block_size - 1));
  }
  at::Tensor logits =
      target.LmHead(block_rows.size() == 1 ? block_rows[0] : at::cat(block_rows, 0));
  int64_t off = 0;
  for (size_t s = 0; s < batch.size(); ++s) {
    out[s] = logits.narrow(0, off, batch[s].block_size - 1);
    off += batch[s].block_size - 1;
    batch[s].cache->Commit(rows.ctx_n[s]);
  }
  return out;
}

}  // namespace

at::Tensor RunDraftPass(const DFlashDrafter::Weights& w, const ModelConfig& c,
                        const Transformer& target, const DraftPassRows& rows,
                        const DraftAttend& attend) {
  at::Tensor ctx;
  at::Tensor rope[4];  // cos and sin of the context rows, then of the block rows
  if (rows.features.defined() && rows.features.size(0) > 0) {
    ctx = RmsNorm(Linear(rows.features, w.fc), w.hidden_norm, c.rms_norm_eps);
    w.rope.CosSin(rows.ctx_pos, &rope[0], &rope[1]);
  }
  w.rope.CosSin(rows.blk_pos, &rope[2], &rope[3]);
  at::Tensor x = target.Embed(rows.blk_tok);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    RunDraftLayer(w.layers[l], c, l, ctx, rope, attend, x);
  }
  return RmsNorm(x, w.norm, c.rms_norm_eps);
}

std::vector<int64_t> DefaultTargetLayerIds(int64_t num_target_layers, int64_t num_draft_layers) {
  if (num_draft_layers <= 1) return {num_target_layers / 2};
  const double start = 1, end = static_cast<double>(num_target_layers - 3);
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < num_draft_layers; ++i) {
    ids.push_back(static_cast<int64_t>(
        std::llround(start + i * (end - start) / static_cast<double>(num_draft_layers - 1))));
  }
  return ids;
}

absl::StatusOr<DFlashConfig> ParseDFlashConfig(std::string_view json, const std::string& origin,
                                               int64_t num_target_layers) {
  DFlashConfig c;
  ASSIGN_OR_RETURN(c.layers, ParseModelConfig(json, origin));
  auto j = nlohmann::json::parse(json.begin(), json.end(), nullptr, false);
  nlohmann::json dc = j.value("dflash_config", nlohmann::json::object());
  try {
    c.block_size = dc.value("block_size", j.value("block_size", 16));
    if (!dc.contains("mask_token_id") && !j.contains("mask_token_id")) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ": dflash_config.mask_token_id is required"));
    }
    c.mask_token_id = dc.value("mask_token_id", j.value("mask_token_id", 0));
    if (dc.contains("target_layer_ids")) {
      c.target_layer_ids = dc["target_layer_ids"].get<std::vector<int64_t>>();
    } else {
      c.target_layer_ids = DefaultTargetLayerIds(num_target_layers, c.layers.num_hidden_layers);
    }
  } catch (const nlohmann::json::exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": dflash fields have the wrong type: ", e.what()));
  }
  if (c.block_size < 2 || c.block_size > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat(origin, ": block_size must be in [2, 256], got ", c.block_size));
  }
  if (c.target_layer_ids.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(origin, ": target_layer_ids is empty"));
  }
  for (int64_t id : c.target_layer_ids) {
    if (id < 0 || id >= num_target_layers) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ": target layer id ", id,
                                                     " outside the target's ", num_target_layers,
                                                     " layers"));
    }
  }
  return c;
}

std::string DFlashConfigToJson(const DFlashConfig& c) {
  auto j = nlohmann::json::parse(ModelConfigToJson(c.layers));
  j["architectures"] = {"DFlashDraftModel"};
  j["block_size"] = c.block_size;
  j["dflash_config"] = {{"mask_token_id", c.mask_token_id},
                        {"target_layer_ids", c.target_layer_ids},
                        {"block_size", c.block_size}};
  return j.dump(2);
}

std::vector<TensorSpec> DFlashDrafter::WeightShapes(const DFlashConfig& config,
                                                    int64_t target_hidden) {
  const ModelConfig& c = config.layers;
  const int64_t h = c.hidden_size;
  std::vector<TensorSpec> out;
  out.push_back(
      {"fc.weight", {h, static_cast<int64_t>(config.target_layer_ids.size()) * target_hidden}});
  out.push_back({"hidden_norm.weight", {h}});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    AppendDecoderLayerSpecs(c, absl::StrCat("layers.", l, "."), /*qk_norm=*/true, &out);
  }
  out.push_back({"norm.weight", {h}});
  return out;
}

std::map<std::string, at::Tensor> DFlashDrafter::RandomWeights(const DFlashConfig& config,
                                                               int64_t target_hidden, uint64_t seed,
                                                               double std) {
  return RandomTensors(WeightShapes(config, target_hidden), seed, std);
}

DFlashDrafter::DFlashDrafter(DFlashConfig config, const Transformer& target,
                             std::unique_ptr<Weights> w)
    : config_(std::move(config)),
      target_(target),
      weights_(std::move(w)),
      id_(next_drafter_id.fetch_add(1)) {
  KvCacheShape shape;
  shape.num_layers = config_.layers.num_hidden_layers;
  shape.num_kv_heads = config_.layers.num_key_value_heads;
  shape.head_dim = config_.layers.head_dim;
  shape.dtype = target_.kv_dtype();
  shape.device = target_.device();
  shape.owner_id = id_;
  const bool fixed = target_.captures_graphs() || target_.uncaptured_fixed_passes();
  cache_pool_ = std::make_unique<KvCachePool>(shape, fixed ? Transformer::kKeptCaches : 0,
                                              fixed ? Transformer::kKeptCacheBytes : 0);
}

DFlashDrafter::~DFlashDrafter() = default;

absl::StatusOr<std::unique_ptr<DFlashDrafter>> DFlashDrafter::FromTensors(
    const DFlashConfig& config, const std::map<std::string, at::Tensor>& tensors,
    const Transformer& target) {
  const ModelConfig& c = config.layers;
  const ModelConfig& tc = target.config();
  if (c.hidden_size != tc.hidden_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("drafter hidden_size ", c.hidden_size, " differs from the target's ",
                     tc.hidden_size, "; the drafter shares the target's embedding and LM head"));
  }
  if (config.mask_token_id < 0 || config.mask_token_id >= tc.vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat("mask_token_id ", config.mask_token_id,
                                                   " is outside the target vocabulary of ",
                                                   tc.vocab_size));
  }
  for (int64_t id : config.target_layer_ids) {
    if (id < 0 || id >= tc.num_hidden_layers) {
      return absl::InvalidArgumentError(
          absl::StrCat("target layer id ", id, " outside [0, ", tc.num_hidden_layers, ")"));
    }
  }
  RETURN_IF_ERROR(CheckTensors(tensors, WeightShapes(config, tc.hidden_size)));
  try {
    // The target's dtypes: matrices in its weights' dtype, norm weights in its activations'.
    const at::ScalarType dt = target.dtype(), act = target.activation_dtype();
    const c10::Device device = target.device();
    auto get = [&](const std::string& n) { return tensors.at(n).to(device, dt).contiguous(); };
    auto matrix = [&](const at::Tensor& m) {
      return target.pack_weights() ? PackLinearWeight(m) : m;
    };
    auto get_norm = [&](const std::string& n) {
      return tensors.at(n).to(device, act).contiguous();
    };
    auto w = std::make_unique<Weights>();
    w->fc = matrix(get("fc.weight"));
    w->hidden_norm = get_norm("hidden_norm.weight");
    w->norm = get_norm("norm.weight");
    w->inv_freq = RopeInvFreq(c).to(device);
    w->rope = RopeTable(w->inv_freq, target.max_context());
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string p = absl::StrCat("layers.", l, ".");
      Weights::Layer layer;
      layer.input_norm = get_norm(p + "input_layernorm.weight");
      layer.post_norm = get_norm(p + "post_attention_layernorm.weight");
      layer.q_norm = get_norm(p + "self_attn.q_norm.weight");
      layer.k_norm = get_norm(p + "self_attn.k_norm.weight");
      layer.q = matrix(get(p + "self_attn.q_proj.weight"));
      layer.kv = matrix(
          at::cat({get(p + "self_attn.k_proj.weight"), get(p + "self_attn.v_proj.weight")}, 0)
              .contiguous());
      layer.o = matrix(get(p + "self_attn.o_proj.weight"));
      layer.gate_up =
          matrix(at::cat({get(p + "mlp.gate_proj.weight"), get(p + "mlp.up_proj.weight")}, 0)
                     .contiguous());
      layer.down = matrix(get(p + "mlp.down_proj.weight"));
      w->layers.push_back(std::move(layer));
    }
    if (device.is_cpu()) {
      std::vector<at::Tensor*> all = {&w->fc, &w->hidden_norm, &w->norm, &w->inv_freq};
      for (Weights::Layer& layer : w->layers) {
        all.insert(all.end(), {&layer.input_norm, &layer.post_norm, &layer.q_norm, &layer.k_norm,
                               &layer.q, &layer.kv, &layer.o, &layer.gate_up, &layer.down});
      }
      MoveIntoHugePages(all);
    }
    return std::unique_ptr<DFlashDrafter>(new DFlashDrafter(config, target, std::move(w)));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("building the DFlash drafter failed: ", e.what()));
  }
}

absl::StatusOr<std::unique_ptr<DFlashDrafter>> DFlashDrafter::Load(const std::string& dir,
                                                                   const Transformer& target) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open drafter config"));
  std::stringstream ss;
  ss << in.rdbuf();
  ASSIGN_OR_RETURN(DFlashConfig config,
                   ParseDFlashConfig(ss.str(), path, target.config().num_hidden_layers));
  ASSIGN_OR_RETURN(auto tensors,
                   LoadTensors(dir, WeightShapes(config, target.config().hidden_size), "model."));
  auto d = FromTensors(config, tensors, target);
  if (!d.ok())
    return absl::Status(d.status().code(), absl::StrCat(dir, ": ", d.status().message()));
  return d;
}

std::unique_ptr<KvCache> DFlashDrafter::NewCache() const { return cache_pool_->Take(); }

void DFlashDrafter::RecycleCache(std::unique_ptr<KvCache> cache) const {
  cache_pool_->Give(std::move(cache));
}

absl::StatusOr<std::vector<at::Tensor>> DFlashDrafter::Draft(
    std::span<const DraftInput> batch) const {
  const ModelConfig& c = config_.layers;
  const int64_t feat_width =
      static_cast<int64_t>(config_.target_layer_ids.size()) * target_.config().hidden_size;
  std::unordered_set<const KvCache*> seen;
  for (size_t s = 0; s < batch.size(); ++s) {
    RETURN_IF_ERROR(ValidateDraftInput(batch[s], s, id_, feat_width, target_, seen));
  }
  if (batch.empty()) return std::vector<at::Tensor>{};
  try {
    if (batch.size() == 1 && TakesFixedPass(batch[0])) {
      auto fixed = RunFixedPass(batch[0]);
      if (fixed.has_value()) return *std::move(fixed);
    }
    DraftRows rows;
    rows.batch = batch;
    GatherDraftRows(rows, config_.mask_token_id, target_.activation_dtype(), target_.device());
    DraftPassRows pass{at::Tensor(), rows.ctx_pos, rows.blk_tok, rows.blk_pos};
    if (rows.n_ctx > 0)
      pass.features = rows.feats.size() == 1 ? rows.feats[0] : at::cat(rows.feats, 0);
    const DraftAttend attend = [&](int64_t l, const at::Tensor& q, const at::Tensor& k_b,
                                   const at::Tensor& v_b, const at::Tensor& k_c,
                                   const at::Tensor& v_c) {
      return AttendPerSequence(rows, l, q, k_b, v_b, k_c, v_c);
    };
    const at::Tensor normed = RunDraftPass(*weights_, c, target_, pass, attend);
    return BlockLogitsAndCommit(rows, normed, target_);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("DFlash draft step failed: ", e.what()));
  }
}

}  // namespace specdec::model
