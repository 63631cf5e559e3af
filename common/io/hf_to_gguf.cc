#include "common/io/hf_to_gguf.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/io/gguf.h"
#include "common/io/gguf_bpe_vocab.h"
#include "common/io/gguf_writer.h"
#include "common/io/half.h"
#include "common/io/safetensors.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace specdec::io {
namespace {

using Json = nlohmann::json;

struct Hparams {
  std::string arch;  // "llama" or "qwen3"
  int64_t hidden = 0, ffn = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0, ctx = 2048;
  double eps = 1e-6, theta = 10000.0;
  bool tied = false;
  std::vector<float> rope_factors;  // Llama 3.1 rope scaling: rope_freqs.weight; empty: none
};

// Llama 3.1's rope scaling as llama.cpp applies it: per rotary pair, the factor its frequency is
// divided by (1 for short wavelengths, `factor` for long ones, a smooth blend between).
std::vector<float> Llama3RopeFactors(const Json& rope, double theta, int64_t head_dim) {
  const float factor = rope.value("factor", 8.0f), low = rope.value("low_freq_factor", 1.0f),
              high = rope.value("high_freq_factor", 4.0f);
  const float old_len = rope.value("original_max_position_embeddings", 8192.0f);
  const float low_wavelen = old_len / low, high_wavelen = old_len / high;
  std::vector<float> factors;
  for (int64_t i = 0; i < head_dim; i += 2) {
    const float freq = 1.0f / std::pow(static_cast<float>(theta),
                                        static_cast<float>(i) / static_cast<float>(head_dim));
    const float wavelen = 2.0f * static_cast<float>(M_PI) / freq;
    if (wavelen < high_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      factors.push_back(factor);
    } else {
      const float smooth = (old_len / wavelen - low) / (high - low);
      factors.push_back(1.0f / ((1.0f - smooth) / factor + smooth));
    }
  }
  return factors;
}

absl::StatusOr<Hparams> ReadHparams(const std::string& dir) {
  const std::string path = dir + "/config.json";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": not found"));
  std::stringstream ss;
  ss << in.rdbuf();
  const Json c = Json::parse(ss.str(), nullptr, false);
  if (c.is_discarded() || !c.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a JSON object"));
  }
  try {
    Hparams hp;
    const std::string type = c.value("model_type", "");
    if (type != "llama" && type != "qwen3") {
      return absl::UnimplementedError(absl::StrCat(
          path, ": model_type '", type, "' does not convert to GGUF (llama and qwen3 do)"));
    }
    if (c.value("attention_bias", false) || c.value("mlp_bias", false)) {
      return absl::UnimplementedError(absl::StrCat(path, ": attention or MLP biases"));
    }
    // Transformers 5 keeps RoPE settings in rope_parameters, earlier versions in rope_scaling.
    Json rope = c.contains("rope_parameters") ? c["rope_parameters"] : Json();
    if (c.contains("rope_scaling") && c["rope_scaling"].is_object()) rope = c["rope_scaling"];
    const std::string rope_type =
        rope.is_object() ? rope.value("rope_type", rope.value("type", "default")) : "default";
    if (rope_type != "default" && rope_type != "llama3") {
      return absl::UnimplementedError(absl::StrCat(path, ": rope scaling '", rope_type,
                                                   "' does not convert (default and llama3 do)"));
    }
    hp.arch = type;
    hp.hidden = c.at("hidden_size").get<int64_t>();
    hp.ffn = c.at("intermediate_size").get<int64_t>();
    hp.layers = c.at("num_hidden_layers").get<int64_t>();
    hp.heads = c.at("num_attention_heads").get<int64_t>();
    hp.kv_heads = c.value("num_key_value_heads", hp.heads);
    hp.head_dim = c.contains("head_dim") && !c["head_dim"].is_null()
                      ? c["head_dim"].get<int64_t>()
                      : (hp.heads > 0 ? hp.hidden / hp.heads : 0);
    hp.ctx = c.value("max_position_embeddings", hp.ctx);
    hp.eps = c.value("rms_norm_eps", hp.eps);
    hp.theta = c.value("rope_theta", hp.theta);  // Transformers 4; 5 moved it into rope_parameters
    if (c.contains("rope_parameters") && c["rope_parameters"].is_object()) {
      hp.theta = c["rope_parameters"].value("rope_theta", hp.theta);
    }
    hp.tied = c.value("tie_word_embeddings", false);
    if (hp.hidden <= 0 || hp.heads <= 0 || hp.kv_heads <= 0 || hp.head_dim <= 0 || hp.layers <= 0 ||
        hp.ffn <= 0 || hp.heads % hp.kv_heads != 0 || hp.head_dim % 2 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": inconsistent sizes"));
    }
    if (rope_type == "llama3") hp.rope_factors = Llama3RopeFactors(rope, hp.theta, hp.head_dim);
    return hp;
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", e.what()));
  }
}

// The GGUF name of HF tensor `hf`, or "" if it has none.
std::string GgufName(const std::string& hf) {
  static const std::map<std::string, std::string> kTop = {
      {"model.embed_tokens.weight", "token_embd.weight"},
      {"model.norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"}};
  if (auto it = kTop.find(hf); it != kTop.end()) return it->second;
  static const std::map<std::string, std::string> kBlock = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "ffn_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"}};
  const std::string prefix = "model.layers.";
  if (!absl::StartsWith(hf, prefix)) return "";
  const size_t dot = hf.find('.', prefix.size());
  if (dot == std::string::npos || dot == prefix.size()) return "";
  const std::string digits = hf.substr(prefix.size(), dot - prefix.size());
  if (digits.size() > 6 || digits.find_first_not_of("0123456789") != std::string::npos) return "";
  auto it = kBlock.find(hf.substr(dot + 1));
  return it == kBlock.end() ? "" : absl::StrCat("blk.", std::stoll(digits), ".", it->second);
}

int GgmlType(DType d) {
  return d == DType::kF32 ? kGgmlTypeF32 : d == DType::kF16 ? kGgmlTypeF16 : kGgmlTypeBF16;
}

// HF's rotate-half rows to GGUF's interleaved pairs, per head: GGUF row h*hd + 2j + i is HF row
// h*hd + i*hd/2 + j (the inverse of gguf_to_hf.cc's UnpermuteRows).
std::vector<std::byte> PermuteRows(const TensorView& t, int64_t n_head) {
  const int64_t rows = t.shape[0], hd = rows / n_head, half = hd / 2;
  const size_t row_bytes = t.nbytes / static_cast<size_t>(rows);
  std::vector<std::byte> out(t.nbytes);
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t j = 0; j < half; ++j) {
      for (int64_t i = 0; i < 2; ++i) {
        std::memcpy(out.data() + (h * hd + 2 * j + i) * row_bytes,
                    t.data + (h * hd + i * half + j) * row_bytes, row_bytes);
      }
    }
  }
  return out;
}

// A 1-D tensor as F32 (llama.cpp keeps norms in F32).
std::vector<std::byte> ToF32(const TensorView& t) {
  const int64_t n = t.numel();
  std::vector<std::byte> out(static_cast<size_t>(n) * 4);
  for (int64_t i = 0; i < n; ++i) {
    float f;
    if (t.dtype == DType::kF32) {
      std::memcpy(&f, t.data + i * 4, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, t.data + i * 2, 2);
      f = t.dtype == DType::kBF16 ? Bf16ToFloat(h) : HalfToFloat(h);
    }
    std::memcpy(out.data() + i * 4, &f, 4);
  }
  return out;
}

struct GgufTensors {
  std::vector<std::vector<std::byte>> owned;  // converted data, alive until written
  int embed_type = kGgmlTypeF32;
  int64_t embed_rows = 0;
};

absl::Status AddTensors(const Checkpoint& ckpt, const Hparams& hp, bool all_f32, GgufWriter& w,
                        GgufTensors& t) {
  t.owned.reserve(2 * ckpt.Names().size());  // converted, then permuted: no reallocation
  for (const std::string& hf : ckpt.Names()) {
    const std::string name = GgufName(hf);
    if (name.empty()) {
      return absl::UnimplementedError(
          absl::StrCat(ckpt.dir(), ": tensor '", hf, "' has no GGUF name"));
    }
    ASSIGN_OR_RETURN(const TensorView v, ckpt.Get(hf));
    if (v.dtype != DType::kF32 && v.dtype != DType::kF16 && v.dtype != DType::kBF16) {
      return absl::UnimplementedError(absl::StrCat(ckpt.dir(), ": tensor '", hf, "' is ",
                                                   std::string(DTypeName(v.dtype)),
                                                   " (F32, F16, BF16 convert)"));
    }
    if (v.shape.empty() || v.shape.size() > 2) {
      return absl::InvalidArgumentError(
          absl::StrCat(ckpt.dir(), ": tensor '", hf, "' has ", v.shape.size(), " dimensions"));
    }
    if (hp.tied && name == "output.weight") continue;  // llama.cpp reads token_embd for it
    std::vector<int64_t> ne(v.shape.rbegin(), v.shape.rend());
    TensorView src = v;  // what is written: F32 where asked or 1-D, then llama's Q/K permuted
    int type = GgmlType(v.dtype);
    if ((v.shape.size() == 1 || all_f32) && v.dtype != DType::kF32) {
      t.owned.push_back(ToF32(v));
      src.data = t.owned.back().data();
      src.nbytes = t.owned.back().size();
      src.dtype = DType::kF32;
      type = kGgmlTypeF32;
    }
    const bool q = absl::EndsWith(name, ".attn_q.weight"), k = absl::EndsWith(name, ".attn_k.weight");
    if (hp.arch == "llama" && (q || k)) {
      const int64_t n = q ? hp.heads : hp.kv_heads;
      if (v.shape.size() != 2 || v.shape[0] != n * hp.head_dim) {
        return absl::InvalidArgumentError(
            absl::StrCat(ckpt.dir(), ": tensor '", hf, "' must have ", n * hp.head_dim, " rows"));
      }
      t.owned.push_back(PermuteRows(src, n));
      src.data = t.owned.back().data();
    }
    const std::span<const std::byte> data(src.data, src.nbytes);
    if (name == "token_embd.weight") {
      if (v.shape.size() != 2 || v.shape[1] != hp.hidden) {
        return absl::InvalidArgumentError(
            absl::StrCat(ckpt.dir(), ": ", hf, " must be [vocab, ", hp.hidden, "]"));
      }
      t.embed_type = type;
      t.embed_rows = v.shape[0];
    }
    w.AddTensor(name, std::move(ne), type, data);
  }
  if (t.embed_rows == 0) {
    return absl::NotFoundError(absl::StrCat(ckpt.dir(), ": model.embed_tokens.weight is missing"));
  }
  return absl::OkStatus();
}

void SetHparams(const Hparams& hp, const std::string& name, int embed_type, GgufWriter& w) {
  const std::string& a = hp.arch;
  w.SetString("general.architecture", a);
  w.SetString("general.name", name);
  // llama_ftype: ALL_F32 0, MOSTLY_F16 1, MOSTLY_BF16 32.
  w.SetU32("general.file_type", embed_type == kGgmlTypeF32   ? 0
                                : embed_type == kGgmlTypeF16 ? 1
                                                             : 32);
  w.SetU32(a + ".context_length", static_cast<uint32_t>(hp.ctx));
  w.SetU32(a + ".embedding_length", static_cast<uint32_t>(hp.hidden));
  w.SetU32(a + ".block_count", static_cast<uint32_t>(hp.layers));
  w.SetU32(a + ".feed_forward_length", static_cast<uint32_t>(hp.ffn));
  w.SetU32(a + ".attention.head_count", static_cast<uint32_t>(hp.heads));
  w.SetU32(a + ".attention.head_count_kv", static_cast<uint32_t>(hp.kv_heads));
  w.SetU32(a + ".attention.key_length", static_cast<uint32_t>(hp.head_dim));
  w.SetU32(a + ".attention.value_length", static_cast<uint32_t>(hp.head_dim));
  w.SetU32(a + ".rope.dimension_count", static_cast<uint32_t>(hp.head_dim));
  w.SetF32(a + ".attention.layer_norm_rms_epsilon", static_cast<float>(hp.eps));
  w.SetF32(a + ".rope.freq_base", static_cast<float>(hp.theta));
}

void SetTokenizer(GgufBpeVocab v, int64_t embed_rows, GgufWriter& w) {
  for (int64_t i = static_cast<int64_t>(v.tokens.size()); i < embed_rows; ++i) {
    v.tokens.push_back(absl::StrCat("[PAD", i, "]"));
    v.types.push_back(kTokenUnused);
  }
  w.SetString("tokenizer.ggml.model", "gpt2");
  w.SetString("tokenizer.ggml.pre", v.pre);
  w.SetStringArray("tokenizer.ggml.tokens", v.tokens);
  w.SetI32Array("tokenizer.ggml.token_type", v.types);
  w.SetStringArray("tokenizer.ggml.merges", v.merges);
  if (v.bos >= 0) w.SetU32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(v.bos));
  if (v.eos >= 0) w.SetU32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(v.eos));
  if (v.pad >= 0) w.SetU32("tokenizer.ggml.padding_token_id", static_cast<uint32_t>(v.pad));
  w.SetBool("tokenizer.ggml.add_bos_token", v.add_bos);
  if (!v.chat_template.empty()) w.SetString("tokenizer.chat_template", v.chat_template);
}

}  // namespace

absl::Status ConvertHfToGguf(const std::string& hf_dir, const std::string& gguf_path,
                             const GgufExportOptions& options) {
  ASSIGN_OR_RETURN(const Hparams hp, ReadHparams(hf_dir));
  ASSIGN_OR_RETURN(GgufBpeVocab vocab, ReadHfBpeTokenizer(hf_dir));
  ASSIGN_OR_RETURN(auto ckpt, Checkpoint::Open(hf_dir));
  GgufWriter w;
  GgufTensors tensors;
  RETURN_IF_ERROR(AddTensors(*ckpt, hp, options.f32, w, tensors));
  if (!hp.rope_factors.empty()) {
    w.AddTensor("rope_freqs.weight", {static_cast<int64_t>(hp.rope_factors.size())}, kGgmlTypeF32,
                std::as_bytes(std::span<const float>(hp.rope_factors)));
  }
  if (static_cast<int64_t>(vocab.tokens.size()) > tensors.embed_rows) {
    return absl::InvalidArgumentError(absl::StrCat(hf_dir, ": the tokenizer has ",
                                                   vocab.tokens.size(), " tokens, the embedding ",
                                                   tensors.embed_rows, " rows"));
  }
  const std::string name = std::filesystem::path(hf_dir).lexically_normal().filename().string();
  SetHparams(hp, name.empty() ? "model" : name, tensors.embed_type, w);
  SetTokenizer(std::move(vocab), tensors.embed_rows, w);
  return w.Write(gguf_path);
}

}  // namespace specdec::io
