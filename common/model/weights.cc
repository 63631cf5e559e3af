#include "common/model/weights.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/io/safetensors.h"
#include "common/util/status_macros.h"

namespace specdec::model {

std::string ShapeString(at::IntArrayRef shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<std::map<std::string, at::Tensor>> LoadTensors(const std::string& dir,
                                                              const std::vector<TensorSpec>& specs,
                                                              const std::string& prefix_fallback) {
  ASSIGN_OR_RETURN(std::unique_ptr<io::Checkpoint> ckpt, io::Checkpoint::Open(dir));
  std::map<std::string, at::Tensor> out;
  try {
    for (const TensorSpec& spec : specs) {
      auto view = ckpt->Get(spec.name);
      if (!view.ok() && !prefix_fallback.empty()) view = ckpt->Get(prefix_fallback + spec.name);
      if (!view.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(dir, ": checkpoint lacks tensor '",
                                                       spec.name, "' required by config.json"));
      }
      at::ScalarType st;
      switch (view->dtype) {
        case io::DType::kF32:
          st = at::kFloat;
          break;
        case io::DType::kF16:
          st = at::kHalf;
          break;
        case io::DType::kBF16:
          st = at::kBFloat16;
          break;
        default:
          return absl::InvalidArgumentError(
              absl::StrCat(dir, ": tensor '", spec.name, "' has dtype ",
                           std::string(io::DTypeName(view->dtype)), "; expected F32, F16 or BF16"));
      }
      if (view->shape != spec.shape) {
        return absl::InvalidArgumentError(
            absl::StrCat(dir, ": tensor '", spec.name, "' has shape ", ShapeString(view->shape),
                         " but config.json implies ", ShapeString(spec.shape)));
      }
      // Copy out of the mapping (whose data may be unaligned) into an owned tensor.
      at::Tensor t = at::empty(view->shape, at::TensorOptions().dtype(st));
      if (view->nbytes != static_cast<size_t>(t.nbytes())) {
        return absl::InvalidArgumentError(absl::StrCat(dir, ": tensor '", spec.name, "' holds ",
                                                       view->nbytes, " bytes, its shape needs ",
                                                       t.nbytes()));
      }
      if (view->nbytes > 0) std::memcpy(t.data_ptr(), view->data, view->nbytes);
      out.emplace(spec.name, std::move(t));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(dir, ": loading weights failed: ", e.what()));
  }
  return out;
}

absl::Status CheckTensors(const std::map<std::string, at::Tensor>& tensors,
                          const std::vector<TensorSpec>& specs) {
  for (const TensorSpec& spec : specs) {
    auto it = tensors.find(spec.name);
    if (it == tensors.end()) {
      return absl::InvalidArgumentError(absl::StrCat("missing tensor '", spec.name, "'"));
    }
    if (it->second.sizes() != at::IntArrayRef(spec.shape)) {
      return absl::InvalidArgumentError(absl::StrCat("tensor '", spec.name, "' has shape ",
                                                     ShapeString(it->second.sizes()),
                                                     ", config implies ", ShapeString(spec.shape)));
    }
    if (!at::isFloatingType(it->second.scalar_type())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor '", spec.name, "' is not a floating-point tensor"));
    }
  }
  return absl::OkStatus();
}

std::vector<TensorSpec> TransformerTensorSpecs(const ModelConfig& c) {
  std::vector<TensorSpec> out;
  const int64_t h = c.hidden_size;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, h}});
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    AppendDecoderLayerSpecs(c, absl::StrCat("model.layers.", l, "."), c.qk_norm, &out);
  }
  out.push_back({"model.norm.weight", {h}});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}});
  return out;
}

void AppendDecoderLayerSpecs(const ModelConfig& c, const std::string& p, bool qk_norm,
                             std::vector<TensorSpec>* out) {
  const int64_t h = c.hidden_size, q = c.num_attention_heads * c.head_dim,
                kv = c.num_key_value_heads * c.head_dim, i = c.intermediate_size;
  out->push_back({p + "input_layernorm.weight", {h}});
  out->push_back({p + "self_attn.q_proj.weight", {q, h}});
  out->push_back({p + "self_attn.k_proj.weight", {kv, h}});
  out->push_back({p + "self_attn.v_proj.weight", {kv, h}});
  out->push_back({p + "self_attn.o_proj.weight", {h, q}});
  if (qk_norm) {
    out->push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
    out->push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
  }
  out->push_back({p + "post_attention_layernorm.weight", {h}});
  out->push_back({p + "mlp.gate_proj.weight", {i, h}});
  out->push_back({p + "mlp.up_proj.weight", {i, h}});
  out->push_back({p + "mlp.down_proj.weight", {h, i}});
}

std::map<std::string, at::Tensor> RandomTensors(const std::vector<TensorSpec>& specs, uint64_t seed,
                                                double std) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::map<std::string, at::Tensor> out;
  for (const TensorSpec& s : specs) {
    at::Tensor t = at::normal(0.0, std, s.shape, gen);
    if (s.name.find("norm") != std::string::npos) t = t + 1.0;
    out.emplace(s.name, t);
  }
  return out;
}

}  // namespace specdec::model
