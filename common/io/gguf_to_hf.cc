#include "common/io/gguf_to_hf.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/io/gguf.h"
#include "common/io/gguf_bpe_vocab.h"
#include "common/io/gguf_dequantize.h"
#include "common/io/half.h"
#include "common/io/safetensors.h"
#include "common/tokenizer/spm_convert.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace specdec::io {
namespace {

using Json = nlohmann::json;

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for writing"));
  out << text;
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

// GGUF/llama2.c keep each head's rotary pairs interleaved (x0,y0,x1,y1,...); HF keeps halves
// (x0,x1,...,y0,y1,...). Row h*hd + j of the result is row h*hd + 2j (j < hd/2) or
// h*hd + 2(j - hd/2) + 1 of the input.
std::vector<std::byte> UnpermuteRows(const GgufTensor& t, int64_t n_head, size_t elem) {
  const int64_t cols = t.ne[0], rows = t.ne[1];
  const int64_t hd = rows / n_head, half = hd / 2;
  const size_t row_bytes = static_cast<size_t>(cols) * elem;
  std::vector<std::byte> out(t.nbytes);
  for (int64_t h = 0; h < n_head; ++h) {
    for (int64_t j = 0; j < hd; ++j) {
      const int64_t src = h * hd + (j < half ? 2 * j : 2 * (j - half) + 1);
      std::memcpy(out.data() + (h * hd + j) * row_bytes, t.data + src * row_bytes, row_bytes);
    }
  }
  return out;
}

// The HF name of GGUF tensor `g`, or "" if it has none. Sets *layer to N for "blk.N.*" (else -1).
std::string HfName(const std::string& g, int64_t* layer) {
  *layer = -1;
  static const std::map<std::string, std::string> kTop = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"}};
  if (auto it = kTop.find(g); it != kTop.end()) return it->second;
  static const std::map<std::string, std::string> kBlock = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"}};
  if (!absl::StartsWith(g, "blk.")) return "";
  const size_t dot = g.find('.', 4);
  if (dot == std::string::npos) return "";
  const std::string digits = g.substr(4, dot - 4), rest = g.substr(dot + 1);
  if (digits.empty() || digits.size() > 6 ||
      !std::all_of(digits.begin(), digits.end(), [](char ch) { return ch >= '0' && ch <= '9'; })) {
    return "";
  }
  auto it = kBlock.find(rest);
  if (it == kBlock.end()) return "";
  *layer = std::stoll(digits);
  return absl::StrCat("model.layers.", *layer, ".", it->second);
}

// GGUF stores float32 metadata; print it as the shortest decimal that round-trips through float
// (1e-05, not 9.999999747378752e-06) when the value is exactly a float, so config.json reads like
// the original HF file.
double TidyFloat(double x) {
  const float f = static_cast<float>(x);
  if (static_cast<double>(f) != x || !std::isfinite(f)) return x;
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), f);
  if (ec != std::errc()) return x;
  return std::strtod(std::string(buf, end).c_str(), nullptr);
}

std::string TorchDtype(int ggml_type) {
  switch (ggml_type) {
    case kGgmlTypeF16:
      return "float16";
    case kGgmlTypeBF16:
      return "bfloat16";
    default:
      return "float32";
  }
}

// The hyperparameters of a llama or qwen3 GGUF file; the optional ones default to llama's.
struct Hparams {
  std::string arch;  // "llama" or "qwen3"
  int64_t hidden = 0, ffn = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  double eps = 1e-5, theta = 10000.0;
  int64_t ctx = 2048;
};

// The SentencePiece vocabulary of a GGUF file's llama tokenizer and its special token ids.
struct GgufVocab {
  std::vector<std::string> pieces;
  std::vector<double> scores;
  std::vector<int64_t> types;
  int64_t bos = 1, eos = 2, unk = 0;
};

// The tensors to write under their HF names. The embedding fixes the vocabulary size and the
// model dtype.
struct HfTensors {
  bool bf16 = false;  // every tensor written as BF16 (GgufImportOptions::bf16)
  GgufTensor embed;
  std::vector<std::vector<std::byte>> owned;  // permuted Q/K data, alive until written
  std::vector<TensorToWrite> out;
  bool tied = true;
};

// Reads and checks the hyperparameters of a llama or qwen3 file (keys "<arch>.*").
absl::StatusOr<Hparams> ReadHparams(const GgufFile& g, const std::string& gguf_path) {
  Hparams hp;
  ASSIGN_OR_RETURN(hp.arch, g.GetString("general.architecture"));
  if (hp.arch != "llama" && hp.arch != "qwen3") {
    return absl::UnimplementedError(
        absl::StrCat(gguf_path, ": architecture '", hp.arch,
                     "' is not supported by convert (llama and qwen3 GGUF files convert to HF)"));
  }
  const std::string a = hp.arch + ".";
  ASSIGN_OR_RETURN(hp.hidden, g.GetInt(a + "embedding_length"));
  ASSIGN_OR_RETURN(hp.ffn, g.GetInt(a + "feed_forward_length"));
  ASSIGN_OR_RETURN(hp.layers, g.GetInt(a + "block_count"));
  ASSIGN_OR_RETURN(hp.heads, g.GetInt(a + "attention.head_count"));
  hp.kv_heads = hp.heads;
  if (g.Has(a + "attention.head_count_kv")) {
    ASSIGN_OR_RETURN(hp.kv_heads, g.GetInt(a + "attention.head_count_kv"));
  }
  hp.head_dim = hp.heads > 0 ? hp.hidden / hp.heads : 0;
  if (g.Has(a + "attention.key_length")) {
    ASSIGN_OR_RETURN(hp.head_dim, g.GetInt(a + "attention.key_length"));
  }
  const int64_t hidden = hp.hidden, ffn = hp.ffn, layers = hp.layers, heads = hp.heads,
                kv_heads = hp.kv_heads;
  if (hidden <= 0 || ffn <= 0 || layers <= 0 || heads <= 0 || kv_heads <= 0 ||
      heads % kv_heads != 0 || hp.head_dim <= 0 || hp.head_dim % 2 != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        gguf_path, ": inconsistent ", hp.arch, " hyperparameters: embedding_length ", hidden,
        ", feed_forward_length ", ffn, ", block_count ", layers, ", head_count ", heads,
        ", head_count_kv ", kv_heads, ", head_dim ", hp.head_dim,
        " (need positive values, an even head_dim, kv heads dividing heads)"));
  }
  if (g.Has(a + "rope.dimension_count")) {
    ASSIGN_OR_RETURN(int64_t rope_dims, g.GetInt(a + "rope.dimension_count"));
    if (rope_dims != hp.head_dim) {
      return absl::UnimplementedError(absl::StrCat(
          gguf_path, ": ", a, "rope.dimension_count ", rope_dims, " differs from head_dim ",
          hp.head_dim, "; partial rotary embeddings are not supported by convert"));
    }
  }
  if (g.Has(a + "attention.layer_norm_rms_epsilon")) {
    ASSIGN_OR_RETURN(hp.eps, g.GetFloat(a + "attention.layer_norm_rms_epsilon"));
  }
  if (g.Has(a + "rope.freq_base")) {
    ASSIGN_OR_RETURN(hp.theta, g.GetFloat(a + "rope.freq_base"));
  }
  if (g.Has(a + "context_length")) {
    ASSIGN_OR_RETURN(hp.ctx, g.GetInt(a + "context_length"));
  }
  return hp;
}

// Reads and checks the tokenizer vocabulary (a 'llama' tokenizer, i.e. SentencePiece BPE).
absl::StatusOr<GgufVocab> ReadGgufVocab(const GgufFile& g, const std::string& gguf_path) {
  ASSIGN_OR_RETURN(std::string tok_model, g.GetString("tokenizer.ggml.model"));
  if (tok_model != "llama") {
    return absl::UnimplementedError(
        absl::StrCat(gguf_path, ": tokenizer model '", tok_model,
                     "' is not supported by convert ('llama', i.e. SentencePiece, and 'gpt2', "
                     "byte-level BPE, are)"));
  }
  GgufVocab v;
  ASSIGN_OR_RETURN(v.pieces, g.GetStringArray("tokenizer.ggml.tokens"));
  ASSIGN_OR_RETURN(v.scores, g.GetFloatArray("tokenizer.ggml.scores"));
  v.types.assign(v.pieces.size(), 1);
  if (g.Has("tokenizer.ggml.token_type")) {
    ASSIGN_OR_RETURN(v.types, g.GetIntArray("tokenizer.ggml.token_type"));
  }
  if (v.pieces.empty() || v.scores.size() != v.pieces.size() || v.types.size() != v.pieces.size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        gguf_path, ": tokenizer.ggml.tokens (", v.pieces.size(), "), scores (", v.scores.size(),
        ") and token_type (", v.types.size(), ") must be non-empty and of equal length"));
  }
  const int64_t n_tokens = static_cast<int64_t>(v.pieces.size());
  if (g.Has("tokenizer.ggml.bos_token_id")) {
    ASSIGN_OR_RETURN(v.bos, g.GetInt("tokenizer.ggml.bos_token_id"));
  }
  if (g.Has("tokenizer.ggml.eos_token_id")) {
    ASSIGN_OR_RETURN(v.eos, g.GetInt("tokenizer.ggml.eos_token_id"));
  }
  if (g.Has("tokenizer.ggml.unknown_token_id")) {
    ASSIGN_OR_RETURN(v.unk, g.GetInt("tokenizer.ggml.unknown_token_id"));
  }
  for (int64_t id : {v.bos, v.eos, v.unk}) {
    if (id < 0 || id >= n_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(gguf_path, ": special token id ", id,
                                                     " is outside the vocabulary of ", n_tokens));
    }
  }
  return v;
}

// OK when rope_freqs.weight divides no frequency; UNIMPLEMENTED for scaled RoPE (Llama 3.1's
// factors do not determine the HF rope_parameters that produced them).
absl::Status CheckPlainRopeFactors(const GgufFile& g, const std::string& gguf_path) {
  ASSIGN_OR_RETURN(GgufTensor t, g.Tensor("rope_freqs.weight"));
  for (size_t i = 0; t.ggml_type == kGgmlTypeF32 && i < t.nbytes / 4; ++i) {
    float f;
    std::memcpy(&f, t.data + i * 4, 4);
    if (f != 1.0f) {
      return absl::UnimplementedError(absl::StrCat(
          gguf_path, ": rope_freqs.weight scales RoPE (factor ", f, " at pair ", i,
          "); such GGUF files (Llama 3.1 style) do not convert back to HF"));
    }
  }
  if (t.ggml_type != kGgmlTypeF32) {
    return absl::UnimplementedError(absl::StrCat(gguf_path, ": rope_freqs.weight is not F32"));
  }
  return absl::OkStatus();
}

// The F32 tensor `t` as F16 or BF16 (`ggml_type`) when every value converts exactly, else nullopt.
std::optional<std::vector<std::byte>> NarrowExactly(const GgufTensor& t, int ggml_type) {
  const size_t n = t.nbytes / 4;
  std::vector<std::byte> out(n * 2);
  for (size_t i = 0; i < n; ++i) {
    float f;
    std::memcpy(&f, t.data + i * 4, 4);
    const std::optional<uint16_t> h = ggml_type == kGgmlTypeF16 ? ExactHalf(f) : ExactBf16(f);
    if (!h) return std::nullopt;
    std::memcpy(out.data() + i * 2, &*h, 2);
  }
  return out;
}

// `values` rounded to BF16 (nearest even).
std::vector<std::byte> RoundedToBf16(std::span<const float> values) {
  std::vector<std::byte> out(values.size() * 2);
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t b = RoundBf16(values[i]);
    std::memcpy(out.data() + i * 2, &b, 2);
  }
  return out;
}

// An F32 or F16 tensor's data (of `dt`) rounded to BF16.
std::vector<std::byte> DataAsBf16(std::span<const std::byte> data, DType dt) {
  const size_t n = data.size() / DTypeSize(dt);
  std::vector<float> values(n);
  for (size_t i = 0; i < n; ++i) {
    if (dt == DType::kF32) {
      std::memcpy(&values[i], data.data() + i * 4, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, data.data() + i * 2, 2);
      values[i] = HalfToFloat(h);
    }
  }
  return RoundedToBf16(values);
}

// `t` as float32 values (exact: gguf_dequantize.h), or with `bf16` those values rounded to BF16,
// in a buffer added to `owned`, where it is of a block type; else `t` itself.
absl::StatusOr<GgufTensor> DequantizedIfBlocks(GgufTensor t, bool bf16,
                                               std::vector<std::vector<std::byte>>& owned) {
  if (!IsDequantizable(t.ggml_type)) return t;
  int64_t n = 1;
  for (int64_t e : t.ne) n *= e;
  std::vector<float> values(static_cast<size_t>(n));
  RETURN_IF_ERROR(Dequantize(t.ggml_type, std::span<const std::byte>(t.data, t.nbytes), values));
  if (bf16) {
    owned.push_back(RoundedToBf16(values));
  } else {
    owned.emplace_back(reinterpret_cast<const std::byte*>(values.data()),
                       reinterpret_cast<const std::byte*>(values.data() + values.size()));
  }
  t.ggml_type = bf16 ? kGgmlTypeBF16 : kGgmlTypeF32;
  t.data = owned.back().data();
  t.nbytes = owned.back().size();
  return t;
}

// Maps every tensor of `g` to its HF name and layout into `w` (llama's Q and K rows unpermuted;
// F32 norms narrowed back to the embedding's dtype where exact; block-type tensors dequantized to
// F32; a tied output head stored twice is dropped). The embedding needs a row per token of
// `n_tokens`.
absl::Status CollectHfTensors(const GgufFile& g, const std::string& gguf_path, const Hparams& hp,
                              int64_t n_tokens, HfTensors& w) {
  const int64_t hidden = hp.hidden, layers = hp.layers, head_dim = hp.head_dim;
  ASSIGN_OR_RETURN(w.embed, g.Tensor("token_embd.weight"));
  ASSIGN_OR_RETURN(w.embed, DequantizedIfBlocks(w.embed, w.bf16, w.owned));
  const GgufTensor& embed = w.embed;
  if (embed.ne.size() != 2 || embed.ne[0] != hidden || embed.ne[1] < n_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(gguf_path, ": token_embd.weight must be ne=[",
                                                   hidden, ", >= ", n_tokens,
                                                   "] (embedding_length, tokens)"));
  }
  w.owned.reserve(g.tensor_names().size());
  for (const std::string& name : g.tensor_names()) {
    int64_t layer = -1;
    const std::string hf = HfName(name, &layer);
    if (hf.empty()) {
      if (name == "rope_freqs.weight") {  // all 1: plain RoPE, recomputed from rope_theta
        RETURN_IF_ERROR(CheckPlainRopeFactors(g, gguf_path));
        continue;
      }
      return absl::UnimplementedError(
          absl::StrCat(gguf_path, ": tensor '", name, "' has no Hugging Face llama equivalent"));
    }
    if (layer >= layers) {
      return absl::InvalidArgumentError(absl::StrCat(
          gguf_path, ": tensor '", name, "' names a layer beyond block_count ", layers));
    }
    GgufTensor t = embed;
    if (name != "token_embd.weight") {
      ASSIGN_OR_RETURN(t, g.Tensor(name));
      ASSIGN_OR_RETURN(t, DequantizedIfBlocks(std::move(t), w.bf16, w.owned));
    }
    DType dt = t.ggml_type == kGgmlTypeF32   ? DType::kF32
               : t.ggml_type == kGgmlTypeF16 ? DType::kF16
                                             : DType::kBF16;
    std::vector<int64_t> shape(t.ne.rbegin(), t.ne.rend());
    std::span<const std::byte> data(t.data, t.nbytes);
    const bool is_q = absl::EndsWith(name, ".attn_q.weight");
    const bool is_k = absl::EndsWith(name, ".attn_k.weight");
    if (is_q || is_k) {
      const int64_t n = is_q ? hp.heads : hp.kv_heads;
      if (t.ne.size() != 2 || t.ne[0] != hidden || t.ne[1] != n * head_dim) {
        return absl::InvalidArgumentError(absl::StrCat(
            gguf_path, ": tensor '", name, "' must be ne=[", hidden, ", ", n * head_dim, "]"));
      }
      if (hp.arch == "llama") {  // qwen3 keeps HF's order (NeoX RoPE in llama.cpp)
        w.owned.push_back(UnpermuteRows(t, n, DTypeSize(dt)));
        data = std::span<const std::byte>(w.owned.back());
      }
    }
    if (t.ne.size() == 1 && t.ggml_type == kGgmlTypeF32 && embed.ggml_type != kGgmlTypeF32) {
      // Norms are kept in F32 in GGUF; give them back the model's dtype where that is exact.
      if (auto narrowed = NarrowExactly(t, embed.ggml_type)) {
        w.owned.push_back(std::move(*narrowed));
        data = std::span<const std::byte>(w.owned.back());
        shape = {t.ne[0]};
        dt = embed.ggml_type == kGgmlTypeF16 ? DType::kF16 : DType::kBF16;
      }
    }
    if (name == "output.weight") {
      if (t.ggml_type == embed.ggml_type && t.nbytes == embed.nbytes &&
          std::memcmp(embed.data, t.data, t.nbytes) == 0) {
        continue;  // a tied head stored twice
      }
      w.tied = false;
    }
    if (w.bf16 && dt != DType::kBF16) {
      w.owned.push_back(DataAsBf16(data, dt));
      data = std::span<const std::byte>(w.owned.back());
      dt = DType::kBF16;
    }
    w.out.push_back({hf, dt, std::move(shape), data});
  }
  return absl::OkStatus();
}

// tokenizer.json of the vocabulary.
absl::StatusOr<std::string> TokenizerJson(const GgufVocab& v) {
  std::vector<tokenizer::SpmVocabEntry> vocab;
  vocab.reserve(v.pieces.size());
  for (size_t i = 0; i < v.pieces.size(); ++i) {
    vocab.push_back(
        {v.pieces[i], static_cast<float>(v.scores[i]), static_cast<int32_t>(v.types[i])});
  }
  return tokenizer::SentencePieceVocabToTokenizerJson(
      vocab, static_cast<int32_t>(v.bos), static_cast<int32_t>(v.eos), static_cast<int32_t>(v.unk));
}

// A converted tokenizer: tokenizer.json, tokenizer_config.json and the special ids.
struct HfTokenizer {
  int64_t n_tokens = 0;
  std::string json;
  Json config;
  int64_t bos = -1, eos = -1;
};

// A 'llama' (SentencePiece) tokenizer.
absl::StatusOr<HfTokenizer> SpmTokenizer(const GgufFile& g, const std::string& gguf_path,
                                         int64_t ctx) {
  ASSIGN_OR_RETURN(const GgufVocab vocab, ReadGgufVocab(g, gguf_path));
  HfTokenizer t;
  t.n_tokens = static_cast<int64_t>(vocab.pieces.size());
  ASSIGN_OR_RETURN(t.json, TokenizerJson(vocab));
  t.config = {{"tokenizer_class", "LlamaTokenizerFast"},
              {"bos_token", vocab.pieces[vocab.bos]},
              {"eos_token", vocab.pieces[vocab.eos]},
              {"unk_token", vocab.pieces[vocab.unk]},
              {"add_bos_token", true},
              {"add_eos_token", false},
              {"model_max_length", ctx}};
  t.bos = vocab.bos;
  t.eos = vocab.eos;
  return t;
}

// A 'gpt2' (byte-level BPE) tokenizer with one of the pre-tokenizers gguf_bpe_vocab.h names.
absl::StatusOr<HfTokenizer> BpeTokenizer(const GgufFile& g, const std::string& gguf_path,
                                         int64_t ctx) {
  GgufBpeVocab v;
  ASSIGN_OR_RETURN(v.tokens, g.GetStringArray("tokenizer.ggml.tokens"));
  ASSIGN_OR_RETURN(v.merges, g.GetStringArray("tokenizer.ggml.merges"));
  if (!g.Has("tokenizer.ggml.pre")) {
    return absl::UnimplementedError(absl::StrCat(gguf_path, ": no tokenizer.ggml.pre"));
  }
  ASSIGN_OR_RETURN(v.pre, g.GetString("tokenizer.ggml.pre"));
  auto regex = PreTokenizerRegex(v.pre);
  if (!regex.ok())
    return absl::UnimplementedError(absl::StrCat(gguf_path, ": ", regex.status().message()));
  const int64_t n = static_cast<int64_t>(v.tokens.size());
  v.types.assign(n, kTokenNormal);
  if (g.Has("tokenizer.ggml.token_type")) {
    ASSIGN_OR_RETURN(std::vector<int64_t> types, g.GetIntArray("tokenizer.ggml.token_type"));
    if (static_cast<int64_t>(types.size()) != n) {
      return absl::InvalidArgumentError(
          absl::StrCat(gguf_path, ": ", types.size(), " token types for ", n, " tokens"));
    }
    v.types.assign(types.begin(), types.end());
  }
  HfTokenizer t;
  t.n_tokens = n;
  t.json = BpeVocabToTokenizerJson(v, *regex);
  t.config = {{"tokenizer_class", "PreTrainedTokenizerFast"}, {"model_max_length", ctx}};
  for (const auto& [key, name] :
       {std::pair{"bos", "bos_token"}, {"eos", "eos_token"}, {"padding", "pad_token"}}) {
    const std::string k = absl::StrCat("tokenizer.ggml.", key, "_token_id");
    if (!g.Has(k)) continue;
    ASSIGN_OR_RETURN(const int64_t id, g.GetInt(k));
    if (id < 0 || id >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat(gguf_path, ": ", k, " ", id, " is outside the vocabulary of ", n));
    }
    t.config[name] = v.tokens[id];
    if (std::string(key) == "bos") t.bos = id;
    if (std::string(key) == "eos") t.eos = id;
  }
  bool add_bos = false;
  if (g.Has("tokenizer.ggml.add_bos_token")) {
    ASSIGN_OR_RETURN(add_bos, g.GetBool("tokenizer.ggml.add_bos_token"));
  }
  t.config["add_bos_token"] = add_bos;
  t.config["add_eos_token"] = false;
  if (g.Has("tokenizer.chat_template")) {
    ASSIGN_OR_RETURN(std::string chat, g.GetString("tokenizer.chat_template"));
    t.config["chat_template"] = chat;
  }
  return t;
}

// config.json of the converted model.
Json ConfigJson(const Hparams& hp, const HfTokenizer& tok, const HfTensors& w) {
  const bool qwen3 = hp.arch == "qwen3";
  return {{"architectures", {qwen3 ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
          {"model_type", hp.arch},
          {"hidden_size", hp.hidden},
          {"intermediate_size", hp.ffn},
          {"num_hidden_layers", hp.layers},
          {"num_attention_heads", hp.heads},
          {"num_key_value_heads", hp.kv_heads},
          {"head_dim", hp.head_dim},
          {"rms_norm_eps", TidyFloat(hp.eps)},
          {"rope_theta", TidyFloat(hp.theta)},
          {"max_position_embeddings", hp.ctx},
          {"vocab_size", w.embed.ne[1]},
          {"tie_word_embeddings", w.tied},
          {"bos_token_id", tok.bos >= 0 ? Json(tok.bos) : Json()},
          {"eos_token_id", tok.eos >= 0 ? Json(tok.eos) : Json()},
          {"hidden_act", "silu"},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"torch_dtype", TorchDtype(w.bf16 ? kGgmlTypeBF16 : w.embed.ggml_type)}};
}

// Writes the HF model directory: weights, config, tokenizer and generation config.
absl::Status WriteHfDirectory(const std::string& out_dir, const std::vector<TensorToWrite>& out,
                              const Json& config, const std::string& tok_json,
                              const Json& tok_config, const Json& gen_config) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) {
    return absl::PermissionDeniedError(
        absl::StrCat(out_dir, ": cannot create the output directory: ", ec.message()));
  }
  RETURN_IF_ERROR(WriteSafetensors(out_dir + "/model.safetensors", out,
                                   {{"format", "pt"}, {"source", "gguf"}}));
  RETURN_IF_ERROR(WriteText(out_dir + "/config.json", config.dump(2) + "\n"));
  RETURN_IF_ERROR(WriteText(out_dir + "/tokenizer.json", tok_json));
  RETURN_IF_ERROR(WriteText(out_dir + "/tokenizer_config.json", tok_config.dump(2) + "\n"));
  RETURN_IF_ERROR(WriteText(out_dir + "/generation_config.json", gen_config.dump(2) + "\n"));
  return absl::OkStatus();
}

}  // namespace

absl::Status ConvertGgufToHf(const std::string& gguf_path, const std::string& out_dir,
                             const GgufImportOptions& options) {
  ASSIGN_OR_RETURN(auto g, GgufFile::Open(gguf_path));
  ASSIGN_OR_RETURN(const Hparams hp, ReadHparams(*g, gguf_path));
  // The tokenizer first: the embedding must have a row per token.
  ASSIGN_OR_RETURN(const std::string tok_model, g->GetString("tokenizer.ggml.model"));
  HfTokenizer tok;
  if (tok_model == "gpt2") {
    ASSIGN_OR_RETURN(tok, BpeTokenizer(*g, gguf_path, hp.ctx));
  } else {
    ASSIGN_OR_RETURN(tok, SpmTokenizer(*g, gguf_path, hp.ctx));
  }
  // Weights. The embedding fixes the vocabulary size and the model dtype.
  HfTensors weights;
  weights.bf16 = options.bf16;
  RETURN_IF_ERROR(CollectHfTensors(*g, gguf_path, hp, tok.n_tokens, weights));
  const Json config = ConfigJson(hp, tok, weights);
  Json gen_config = Json::object();
  if (tok.bos >= 0) gen_config["bos_token_id"] = tok.bos;
  if (tok.eos >= 0) gen_config["eos_token_id"] = tok.eos;
  return WriteHfDirectory(out_dir, weights.out, config, tok.json, tok.config, gen_config);
}

}  // namespace specdec::io
