#include "train/lm_model.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cmath>
#include <optional>
#include <string>

#include "absl/strings/str_cat.h"
#include "common/model/ops.h"

#if __has_include(<ATen/ops/scaled_dot_product_attention.h>)
#define SPECDEC_HAVE_SDPA 1
#endif

namespace specdec::train {
namespace {

using model::ModelConfig;

// Parameter `name` cast to the compute dtype (autograd flows back to the f32 master copy).
at::Tensor W(const TensorMap& p, const std::string& name, at::ScalarType dt) {
  return p.at(name).to(dt);
}

// Applies the runtime's RoPE to x [B, T, heads, d] with per-row tables [B*T, d].
at::Tensor Rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const auto sizes = x.sizes().vec();
  at::Tensor flat = x.reshape({sizes[0] * sizes[1], sizes[2], sizes[3]});
  return model::ApplyRope(flat, cos, sin).view(sizes);
}

// q [B, Tq, heads, d], k/v [B, Tk, kv, d]; `mask` bool [B|1, 1, Tq, Tk] (true = may attend) or
// undefined with `causal`. Returns [B, Tq, heads * d].
at::Tensor BatchedAttention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            const at::Tensor& mask, bool causal) {
  const int64_t b = q.size(0), tq = q.size(1), heads = q.size(2), d = q.size(3);
  const int64_t group = heads / k.size(2);
  at::Tensor qh = q.transpose(1, 2);  // [B, heads, Tq, d]
  at::Tensor kh = k.transpose(1, 2), vh = v.transpose(1, 2);
  if (group > 1) {
    kh = kh.repeat_interleave(group, 1);
    vh = vh.repeat_interleave(group, 1);
  }
  at::Tensor out;
#ifdef SPECDEC_HAVE_SDPA
  std::optional<at::Tensor> attn_mask;
  if (!causal && mask.defined()) attn_mask = mask;
  out = at::scaled_dot_product_attention(qh, kh, vh, attn_mask, 0.0, causal);
#else
  at::Tensor scores = at::matmul(qh, kh.transpose(2, 3)).to(at::kFloat);
  scores.mul_(1.0 / std::sqrt(static_cast<double>(d)));
  at::Tensor allowed = mask;
  if (causal) {
    allowed = at::ones({tq, kh.size(2)}, q.options().dtype(at::kBool)).tril();
  }
  if (allowed.defined()) scores = scores.masked_fill(allowed.logical_not(), -INFINITY);
  out = at::matmul(at::softmax(scores, -1).to(q.scalar_type()), vh);
#endif
  return out.transpose(1, 2).reshape({b, tq, heads * d});
}

void CosSin(const ModelConfig& c, const at::Tensor& positions, at::Tensor* cos, at::Tensor* sin) {
  at::Tensor inv_freq = model::RopeInvFreq(c).to(positions.device());
  model::RopeCosSin(inv_freq, positions.reshape({-1}), cos, sin);
}

at::Tensor Mlp(const TensorMap& p, const std::string& pre, const at::Tensor& h,
               at::ScalarType dt) {
  at::Tensor gate = at::linear(h, W(p, pre + "mlp.gate_proj.weight", dt));
  at::Tensor up = at::linear(h, W(p, pre + "mlp.up_proj.weight", dt));
  return at::linear(at::silu(gate) * up, W(p, pre + "mlp.down_proj.weight", dt));
}

}  // namespace

TensorMap InitParams(const std::vector<model::TensorSpec>& specs, int64_t num_layers,
                     uint64_t seed, double std, const at::Device& device) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  TensorMap out;
  const double out_std = std / std::sqrt(2.0 * static_cast<double>(std::max<int64_t>(1, num_layers)));
  for (const model::TensorSpec& s : specs) {
    at::Tensor t;
    if (s.name.find("norm") != std::string::npos) {
      t = at::ones(s.shape, at::kFloat);
    } else {
      const bool is_out = s.name.find("o_proj") != std::string::npos ||
                          s.name.find("down_proj") != std::string::npos;
      t = at::normal(0.0, is_out ? out_std : std, s.shape, gen);
    }
    out.emplace(s.name, t.to(device).requires_grad_(true));
  }
  return out;
}

LmForwardResult LmForward(const ModelConfig& c, const TensorMap& p, const at::Tensor& tokens,
                          const LmForwardOptions& options) {
  const at::ScalarType dt = options.compute;
  const int64_t b = tokens.size(0), t = tokens.size(1);
  const int64_t heads = c.num_attention_heads, kv = c.num_key_value_heads, d = c.head_dim;
  at::Tensor positions =
      at::arange(t, tokens.options().dtype(at::kLong)).unsqueeze(0).expand({b, t});
  at::Tensor cos, sin;
  CosSin(c, positions, &cos, &sin);
  at::Tensor x = at::embedding(W(p, "model.embed_tokens.weight", dt), tokens);
  LmForwardResult result;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string pre = absl::StrCat("model.layers.", l, ".");
    at::Tensor h = model::RmsNorm(x, W(p, pre + "input_layernorm.weight", dt), c.rms_norm_eps);
    at::Tensor q = at::linear(h, W(p, pre + "self_attn.q_proj.weight", dt)).view({b, t, heads, d});
    at::Tensor k = at::linear(h, W(p, pre + "self_attn.k_proj.weight", dt)).view({b, t, kv, d});
    at::Tensor v = at::linear(h, W(p, pre + "self_attn.v_proj.weight", dt)).view({b, t, kv, d});
    if (c.qk_norm) {
      q = model::RmsNorm(q, W(p, pre + "self_attn.q_norm.weight", dt), c.rms_norm_eps);
      k = model::RmsNorm(k, W(p, pre + "self_attn.k_norm.weight", dt), c.rms_norm_eps);
    }
    q = Rope(q, cos, sin);
    k = Rope(k, cos, sin);
    at::Tensor attn = BatchedAttention(q, k, v, at::Tensor(), /*causal=*/true);
    x = x + at::linear(attn, W(p, pre + "self_attn.o_proj.weight", dt));
    h = model::RmsNorm(x, W(p, pre + "post_attention_layernorm.weight", dt), c.rms_norm_eps);
    x = x + Mlp(p, pre, h, dt);
    for (int64_t want : options.capture_layers) {
      if (want == l) result.captured.push_back(x);
    }
  }
  // Keep captures in the requested order even when it is not ascending.
  if (options.capture_layers.size() > 1) {
    std::vector<at::Tensor> ordered;
    for (int64_t want : options.capture_layers) {
      int64_t rank = 0;
      for (int64_t other : options.capture_layers) rank += other < want ? 1 : 0;
      ordered.push_back(result.captured[rank]);
    }
    result.captured = std::move(ordered);
  }
  result.hidden = model::RmsNorm(x, W(p, "model.norm.weight", dt), c.rms_norm_eps);
  return result;
}

at::Tensor LmLogits(const ModelConfig& c, const TensorMap& p, const at::Tensor& hidden) {
  const std::string head = c.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
  return at::linear(hidden, W(p, head, hidden.scalar_type())).to(at::kFloat);
}

at::Tensor LmLoss(const ModelConfig& c, const TensorMap& p, const at::Tensor& tokens,
                  at::ScalarType compute, int64_t chunk_rows) {
  LmForwardOptions opts;
  opts.compute = compute;
  at::Tensor inputs = tokens.narrow(1, 0, tokens.size(1) - 1);
  at::Tensor labels = tokens.narrow(1, 1, tokens.size(1) - 1).reshape({-1});
  at::Tensor hidden = LmForward(c, p, inputs, opts).hidden.reshape({labels.size(0), -1});
  at::Tensor total = at::zeros({}, hidden.options().dtype(at::kFloat));
  for (int64_t r = 0; r < labels.size(0); r += chunk_rows) {
    const int64_t n = std::min(chunk_rows, labels.size(0) - r);
    at::Tensor logp = at::log_softmax(LmLogits(c, p, hidden.narrow(0, r, n)), -1);
    total = total - logp.gather(1, labels.narrow(0, r, n).unsqueeze(1)).sum();
  }
  return total / static_cast<double>(labels.size(0));
}

at::Tensor LmGenerate(const ModelConfig& c, const TensorMap& p, const at::Tensor& prompt,
                      int64_t new_tokens, at::ScalarType dt, int64_t greedy_rows) {
  at::NoGradGuard no_grad;
  const int64_t b = prompt.size(0), plen = prompt.size(1), total = plen + new_tokens;
  const int64_t heads = c.num_attention_heads, kv = c.num_key_value_heads, d = c.head_dim;
  const auto fopts = prompt.options().dtype(dt);
  std::vector<at::Tensor> keys(c.num_hidden_layers), values(c.num_hidden_layers);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    keys[l] = at::empty({b, total, kv, d}, fopts);
    values[l] = at::empty({b, total, kv, d}, fopts);
  }
  TensorMap w;  // weights cast once
  for (const auto& [name, t] : p) w.emplace(name, t.detach().to(dt));
  at::Tensor out = at::empty({b, total}, prompt.options().dtype(at::kLong));
  out.narrow(1, 0, plen).copy_(prompt);
  int64_t pos = 0;
  at::Tensor step_tokens = prompt;
  while (pos < total - 1) {
    const int64_t t = step_tokens.size(1);
    at::Tensor positions = at::arange(pos, pos + t, out.options()).unsqueeze(0).expand({b, t});
    at::Tensor cos, sin;
    CosSin(c, positions, &cos, &sin);
    at::Tensor x = at::embedding(w.at("model.embed_tokens.weight"), step_tokens);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const std::string pre = absl::StrCat("model.layers.", l, ".");
      at::Tensor h = model::RmsNorm(x, w.at(pre + "input_layernorm.weight"), c.rms_norm_eps);
      at::Tensor q = at::linear(h, w.at(pre + "self_attn.q_proj.weight")).view({b, t, heads, d});
      at::Tensor k = at::linear(h, w.at(pre + "self_attn.k_proj.weight")).view({b, t, kv, d});
      at::Tensor v = at::linear(h, w.at(pre + "self_attn.v_proj.weight")).view({b, t, kv, d});
      if (c.qk_norm) {
        q = model::RmsNorm(q, w.at(pre + "self_attn.q_norm.weight"), c.rms_norm_eps);
        k = model::RmsNorm(k, w.at(pre + "self_attn.k_norm.weight"), c.rms_norm_eps);
      }
      q = Rope(q, cos, sin);
      keys[l].narrow(1, pos, t).copy_(Rope(k, cos, sin));
      values[l].narrow(1, pos, t).copy_(v);
      at::Tensor attn = BatchedAttention(q, keys[l].narrow(1, 0, pos + t),
                                         values[l].narrow(1, 0, pos + t), at::Tensor(), t > 1);
      x = x + at::linear(attn, w.at(pre + "self_attn.o_proj.weight"));
      h = model::RmsNorm(x, w.at(pre + "post_attention_layernorm.weight"), c.rms_norm_eps);
      x = x + Mlp(w, pre, h, dt);
    }
    at::Tensor last = model::RmsNorm(x.select(1, t - 1), w.at("model.norm.weight"), c.rms_norm_eps);
    at::Tensor logits = LmLogits(c, w, last);  // [b, V] f32
    at::Tensor next = logits.argmax(-1);
    if (greedy_rows < b) {
      at::Tensor probs = at::softmax(logits.narrow(0, greedy_rows, b - greedy_rows), -1);
      next.narrow(0, greedy_rows, b - greedy_rows).copy_(at::multinomial(probs, 1).squeeze(1));
    }
    pos += t;
    out.select(1, pos).copy_(next);
    step_tokens = next.unsqueeze(1);
  }
  return out;
}

at::Tensor DFlashForward(const model::DFlashConfig& config, const TensorMap& dp,
                         const ModelConfig& tc, const TensorMap& tp, const DFlashBatch& batch,
                         int32_t block_size, at::ScalarType dt) {
  const ModelConfig& c = config.layers;
  const int64_t bsz = batch.tokens.size(0), t = batch.tokens.size(1);
  const int64_t a = batch.anchors.size(1), bs = block_size, n = a * bs;
  const int64_t heads = c.num_attention_heads, kv = c.num_key_value_heads, d = c.head_dim;
  const auto long_opts = batch.tokens.options().dtype(at::kLong);
  // Block rows: tokens, positions, the anchor each row belongs to, and its block index.
  at::Tensor offsets = at::arange(bs, long_opts);
  at::Tensor blk_pos = (batch.anchors.unsqueeze(2) + offsets).reshape({bsz, n});
  at::Tensor first = batch.tokens.gather(1, batch.anchors);  // [B, A]
  at::Tensor blk_tok = at::full({bsz, a, bs}, config.mask_token_id, long_opts);
  blk_tok.select(2, 0).copy_(first);
  blk_tok = blk_tok.reshape({bsz, n});
  at::Tensor row_anchor = batch.anchors.unsqueeze(2).expand({bsz, a, bs}).reshape({bsz, n});
  at::Tensor block_id = at::arange(a, long_opts).repeat_interleave(bs);  // [N]
  at::Tensor ctx_visible =
      at::arange(t, long_opts).view({1, 1, t}) < row_anchor.unsqueeze(2);            // [B, N, T]
  at::Tensor blk_visible = (block_id.unsqueeze(1) == block_id.unsqueeze(0)).unsqueeze(0);  // [1,N,N]
  at::Tensor mask = at::cat({ctx_visible, blk_visible.expand({bsz, n, n})}, 2).unsqueeze(1);

  at::Tensor ctx_pos = at::arange(t, long_opts).unsqueeze(0).expand({bsz, t});
  at::Tensor cos_c, sin_c, cos_b, sin_b;
  CosSin(c, ctx_pos, &cos_c, &sin_c);
  CosSin(c, blk_pos, &cos_b, &sin_b);

  at::Tensor ctx = model::RmsNorm(at::linear(batch.features.to(dt), W(dp, "fc.weight", dt)),
                                  W(dp, "hidden_norm.weight", dt), c.rms_norm_eps);
  at::Tensor x = at::embedding(tp.at("model.embed_tokens.weight").detach().to(dt), blk_tok);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string pre = absl::StrCat("layers.", l, ".");
    at::Tensor hn = model::RmsNorm(x, W(dp, pre + "input_layernorm.weight", dt), c.rms_norm_eps);
    at::Tensor wq = W(dp, pre + "self_attn.q_proj.weight", dt);
    at::Tensor wk = W(dp, pre + "self_attn.k_proj.weight", dt);
    at::Tensor wv = W(dp, pre + "self_attn.v_proj.weight", dt);
    at::Tensor qn = W(dp, pre + "self_attn.q_norm.weight", dt);
    at::Tensor kn = W(dp, pre + "self_attn.k_norm.weight", dt);
    at::Tensor q = Rope(model::RmsNorm(at::linear(hn, wq).view({bsz, n, heads, d}), qn,
                                       c.rms_norm_eps),
                        cos_b, sin_b);
    at::Tensor kb = Rope(model::RmsNorm(at::linear(hn, wk).view({bsz, n, kv, d}), kn,
                                        c.rms_norm_eps),
                         cos_b, sin_b);
    at::Tensor vb = at::linear(hn, wv).view({bsz, n, kv, d});
    // Context rows contribute keys/values only: no input norm, no query, no MLP.
    at::Tensor kc = Rope(model::RmsNorm(at::linear(ctx, wk).view({bsz, t, kv, d}), kn,
                                        c.rms_norm_eps),
                         cos_c, sin_c);
    at::Tensor vc = at::linear(ctx, wv).view({bsz, t, kv, d});
    at::Tensor attn = BatchedAttention(q, at::cat({kc, kb}, 1), at::cat({vc, vb}, 1), mask,
                                       /*causal=*/false);
    x = x + at::linear(attn, W(dp, pre + "self_attn.o_proj.weight", dt));
    at::Tensor h =
        model::RmsNorm(x, W(dp, pre + "post_attention_layernorm.weight", dt), c.rms_norm_eps);
    x = x + Mlp(dp, pre, h, dt);
  }
  at::Tensor normed = model::RmsNorm(x, W(dp, "norm.weight", dt), c.rms_norm_eps);
  return normed.view({bsz, a, bs, -1}).narrow(2, 1, bs - 1);
}

}  // namespace specdec::train
