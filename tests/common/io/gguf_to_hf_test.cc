// GGUF -> HF conversion: stories260K converts into a checkpoint that matches the independent
// llama2.c checkpoint byte for byte (Q/K after the interleaved -> rotate-half permutation computed
// here from the row formula); hand-made models cover F16, Q8_0, untied heads and the unsupported
// cases.
#include "common/io/gguf_to_hf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "common/io/half.h"
#include "common/io/safetensors.h"
#include "common/util/status_matchers.h"
#include "nlohmann/json.hpp"
#include "tests/common/io/gguf_builder.h"

namespace specdec::io {
namespace {

namespace fs = std::filesystem;
using testing::GgufBuilder;
using testing::Le;

const fs::path kStories = fs::path(SPECDEC_SHARED_DIR) / "models/stories260K";

class GgufToHfTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("specdec_gguf_to_hf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  nlohmann::json ReadJson(const fs::path& p) {
    std::ifstream in(p);
    return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  }
  fs::path dir_;
};

// llama2.c legacy checkpoint: 7 x int32 header, then f32 arrays in a fixed order.
struct Llama2c {
  int32_t dim = 0, hidden = 0, layers = 0, heads = 0, kv_heads = 0, vocab = 0, seq = 0;
  std::vector<float> all;
  size_t off_embed = 0, off_rms_att = 0, off_wq = 0, off_wk = 0, off_wv = 0, off_wo = 0,
         off_rms_ffn = 0, off_w1 = 0, off_w2 = 0, off_w3 = 0, off_rms_final = 0;
};

Llama2c ReadLlama2c(const std::string& path) {
  Llama2c m;
  std::ifstream in(path, std::ios::binary);
  in.read(reinterpret_cast<char*>(&m.dim), 7 * 4);
  const auto rest = fs::file_size(path) - 28;
  m.all.resize(rest / 4);
  in.read(reinterpret_cast<char*>(m.all.data()), static_cast<std::streamsize>(rest));
  const size_t d = m.dim, h = m.hidden, L = m.layers, v = std::abs(m.vocab);
  const size_t kv = d * m.kv_heads / m.heads;
  size_t o = 0;
  auto take = [&o](size_t n) {
    const size_t at = o;
    o += n;
    return at;
  };
  m.off_embed = take(v * d);
  m.off_rms_att = take(L * d);
  m.off_wq = take(L * d * d);
  m.off_wk = take(L * kv * d);
  m.off_wv = take(L * kv * d);
  m.off_wo = take(L * d * d);
  m.off_rms_ffn = take(L * d);
  m.off_w1 = take(L * h * d);
  m.off_w2 = take(L * d * h);
  m.off_w3 = take(L * h * d);
  m.off_rms_final = take(d);
  return m;
}

std::vector<float> Floats(const TensorView& v) {
  std::vector<float> out(v.nbytes / 4);
  std::memcpy(out.data(), v.data, v.nbytes);
  return out;
}

TEST_F(GgufToHfTest, Stories260KMatchesIndependentLlama2cCheckpoint) {
  if (!fs::exists(kStories / "stories260K.gguf") || !fs::exists(kStories / "stories260K.bin")) {
    GTEST_SKIP() << kStories << " lacks stories260K.gguf/.bin (needs ../shared/models)";
  }
  const fs::path out = dir_ / "new" / "hf";  // created by the converter
  SPECDEC_ASSERT_OK(ConvertGgufToHf((kStories / "stories260K.gguf").string(), out.string()));
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json",
                        "tokenizer_config.json", "generation_config.json"}) {
    EXPECT_TRUE(fs::exists(out / f)) << f;
  }
  Llama2c ref = ReadLlama2c((kStories / "stories260K.bin").string());
  ASSERT_EQ(ref.dim, 64);
  ASSERT_EQ(ref.layers, 5);
  ASSERT_EQ(ref.heads, 8);
  ASSERT_EQ(ref.kv_heads, 4);
  ASSERT_EQ(std::abs(ref.vocab), 512);
  ASSERT_GE(ref.all.size(), ref.off_rms_final + 64);

  const nlohmann::json config = ReadJson(out / "config.json");
  ASSERT_TRUE(config.is_object());
  EXPECT_EQ(config["architectures"], nlohmann::json::array({"LlamaForCausalLM"}));
  EXPECT_EQ(config["model_type"], "llama");
  EXPECT_EQ(config["hidden_size"], ref.dim);
  EXPECT_EQ(config["intermediate_size"], ref.hidden);
  EXPECT_EQ(config["num_hidden_layers"], ref.layers);
  EXPECT_EQ(config["num_attention_heads"], ref.heads);
  EXPECT_EQ(config["num_key_value_heads"], ref.kv_heads);
  EXPECT_EQ(config["head_dim"], 8);
  EXPECT_EQ(config["vocab_size"], 512);
  EXPECT_EQ(config["max_position_embeddings"], 2048);
  EXPECT_EQ(config["rms_norm_eps"].get<double>(), 1e-5);  // the f32 value printed tidily
  EXPECT_EQ(config["rope_theta"].get<double>(), 10000.0);
  EXPECT_EQ(config["tie_word_embeddings"], true);
  EXPECT_EQ(config["bos_token_id"], 1);
  EXPECT_EQ(config["eos_token_id"], 2);
  EXPECT_EQ(config["torch_dtype"], "float32");
  EXPECT_EQ(config["attention_bias"], false);
  const nlohmann::json tok_config = ReadJson(out / "tokenizer_config.json");
  EXPECT_EQ(tok_config["bos_token"], "<s>");
  EXPECT_EQ(tok_config["eos_token"], "</s>");
  EXPECT_EQ(tok_config["add_bos_token"], true);
  const nlohmann::json gen = ReadJson(out / "generation_config.json");
  EXPECT_EQ(gen["bos_token_id"], 1);
  EXPECT_EQ(gen["eos_token_id"], 2);
  EXPECT_TRUE(ReadJson(out / "tokenizer.json").is_object());

  SPECDEC_ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(out.string()));
  EXPECT_FALSE(ck->Has("lm_head.weight"));  // output.weight == token_embd.weight
  EXPECT_EQ(ck->Names().size(), 2u + 9u * 5u);
  const size_t d = 64, kvd = 32, hid = 172, hd = 8;
  auto slice = [&](size_t off, size_t n) {
    return std::vector<float>(ref.all.begin() + off, ref.all.begin() + off + n);
  };
  auto get = [&](const std::string& name) -> TensorView {
    auto v = ck->Get(name);
    EXPECT_TRUE(v.ok()) << v.status();
    if (!v.ok()) return TensorView{};
    EXPECT_EQ(v->dtype, DType::kF32) << name;
    return *v;
  };
  EXPECT_EQ(get("model.embed_tokens.weight").shape, (std::vector<int64_t>{512, 64}));
  EXPECT_EQ(Floats(get("model.embed_tokens.weight")), slice(ref.off_embed, 512 * d));
  EXPECT_EQ(Floats(get("model.norm.weight")), slice(ref.off_rms_final, d));
  for (size_t l = 0; l < 5; ++l) {
    SCOPED_TRACE(l);
    const std::string p = "model.layers." + std::to_string(l) + ".";
    EXPECT_EQ(Floats(get(p + "input_layernorm.weight")), slice(ref.off_rms_att + l * d, d));
    EXPECT_EQ(Floats(get(p + "post_attention_layernorm.weight")),
              slice(ref.off_rms_ffn + l * d, d));
    EXPECT_EQ(get(p + "self_attn.v_proj.weight").shape, (std::vector<int64_t>{32, 64}));
    EXPECT_EQ(Floats(get(p + "self_attn.v_proj.weight")), slice(ref.off_wv + l * kvd * d, kvd * d));
    EXPECT_EQ(Floats(get(p + "self_attn.o_proj.weight")), slice(ref.off_wo + l * d * d, d * d));
    EXPECT_EQ(get(p + "mlp.gate_proj.weight").shape, (std::vector<int64_t>{172, 64}));
    EXPECT_EQ(Floats(get(p + "mlp.gate_proj.weight")), slice(ref.off_w1 + l * hid * d, hid * d));
    EXPECT_EQ(get(p + "mlp.down_proj.weight").shape, (std::vector<int64_t>{64, 172}));
    EXPECT_EQ(Floats(get(p + "mlp.down_proj.weight")), slice(ref.off_w2 + l * d * hid, d * hid));
    EXPECT_EQ(Floats(get(p + "mlp.up_proj.weight")), slice(ref.off_w3 + l * hid * d, hid * d));
    // Q/K: HF row h*hd + j comes from llama2.c row h*hd + 2j (j < hd/2) or h*hd + 2(j-hd/2)+1.
    for (auto [name, off, rows] :
         {std::tuple{"self_attn.q_proj.weight", ref.off_wq + l * d * d, d},
          std::tuple{"self_attn.k_proj.weight", ref.off_wk + l * kvd * d, kvd}}) {
      const std::vector<float> hf = Floats(get(p + name));
      ASSERT_EQ(hf.size(), rows * d);
      EXPECT_NE(hf, slice(off, rows * d)) << name << ": permutation is not the identity";
      for (size_t r = 0; r < rows; ++r) {
        const size_t h = r / hd, j = r % hd;
        const size_t src = h * hd + (j < hd / 2 ? 2 * j : 2 * (j - hd / 2) + 1);
        for (size_t c = 0; c < d; ++c) {
          ASSERT_EQ(hf[r * d + c], ref.all[off + src * d + c]) << name << " row " << r;
        }
      }
    }
  }
}

// A tiny llama GGUF: hidden 8, 2 heads (head_dim 4), 1 kv head, ffn 4, 1 layer, 6 tokens. Weight
// element i of every 2-D tensor holds `seed + i` (as F32 or F16 bit pattern), so rows are distinct.
struct TinyOptions {
  std::string arch = "llama";
  std::string tokenizer = "llama";
  uint32_t weight_type = 1;  // F16
  bool output = true;        // write an untied output.weight
  uint32_t rope_dims = 4;
};

std::string Fill(uint32_t type, size_t n, int seed) {
  std::string out;
  for (size_t i = 0; i < n; ++i) {
    if (type == 0) {
      out += Le<float>(static_cast<float>(seed + static_cast<int>(i)));
    } else {
      out += Le<uint16_t>(static_cast<uint16_t>(seed + i));
    }
  }
  return out;
}

std::string TinyLlama(const TinyOptions& o) {
  GgufBuilder b;
  b.String("general.architecture", o.arch)
      .U32(o.arch + ".embedding_length", 8)
      .U32(o.arch + ".feed_forward_length", 4)
      .U32(o.arch + ".block_count", 1)
      .U32(o.arch + ".attention.head_count", 2)
      .U32(o.arch + ".attention.head_count_kv", 1)
      .U32(o.arch + ".context_length", 128)
      .U32(o.arch + ".rope.dimension_count", o.rope_dims)
      .F32(o.arch + ".attention.layer_norm_rms_epsilon", 1e-6f)
      .String("tokenizer.ggml.model", o.tokenizer)
      .StringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "\xe2\x96\x81", "a",
                                             "\xe2\x96\x81"
                                             "a"})
      .F32Array("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -3})
      .I32Array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1})
      .U32("tokenizer.ggml.bos_token_id", 1)
      .U32("tokenizer.ggml.eos_token_id", 2);
  const uint32_t w = o.weight_type;
  b.Tensor("token_embd.weight", {8, 6}, w, Fill(w, 48, 0))
      .Tensor("blk.0.attn_norm.weight", {8}, 0, Fill(0, 8, 1))
      .Tensor("blk.0.attn_q.weight", {8, 8}, w, Fill(w, 64, 100))
      .Tensor("blk.0.attn_k.weight", {8, 4}, w, Fill(w, 32, 200))
      .Tensor("blk.0.attn_v.weight", {8, 4}, w, Fill(w, 32, 300))
      .Tensor("blk.0.attn_output.weight", {8, 8}, w, Fill(w, 64, 400))
      .Tensor("blk.0.ffn_norm.weight", {8}, 0, Fill(0, 8, 2))
      .Tensor("blk.0.ffn_gate.weight", {8, 4}, w, Fill(w, 32, 500))
      .Tensor("blk.0.ffn_up.weight", {8, 4}, w, Fill(w, 32, 600))
      .Tensor("blk.0.ffn_down.weight", {4, 8}, w, Fill(w, 32, 700))
      .Tensor("output_norm.weight", {8}, 0, Fill(0, 8, 3));
  if (o.output) b.Tensor("output.weight", {8, 6}, w, Fill(w, 48, 800));
  return b.Build();
}

std::vector<uint16_t> Halves(const TensorView& v) {
  std::vector<uint16_t> out(v.nbytes / 2);
  std::memcpy(out.data(), v.data, v.nbytes);
  return out;
}

TEST_F(GgufToHfTest, F16ModelWithUntiedHeadKeepsF16AndPermutesQK) {
  const std::string gguf = Write("tiny.gguf", TinyLlama({}));
  const fs::path out = dir_ / "hf";
  SPECDEC_ASSERT_OK(ConvertGgufToHf(gguf, out.string()));
  const nlohmann::json config = ReadJson(out / "config.json");
  EXPECT_EQ(config["tie_word_embeddings"], false);
  EXPECT_EQ(config["torch_dtype"], "float16");
  EXPECT_EQ(config["head_dim"], 4);
  EXPECT_EQ(config["num_key_value_heads"], 1);
  EXPECT_EQ(config["vocab_size"], 6);
  EXPECT_EQ(config["max_position_embeddings"], 128);
  EXPECT_EQ(config["rms_norm_eps"].get<double>(), 1e-6);
  EXPECT_EQ(config["rope_theta"].get<double>(), 10000.0);  // default when absent
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(out.string()));
  SPECDEC_ASSERT_OK_AND_ASSIGN(TensorView head, ck->Get("lm_head.weight"));
  EXPECT_EQ(head.dtype, DType::kF16);
  EXPECT_EQ(head.shape, (std::vector<int64_t>{6, 8}));
  EXPECT_EQ(Halves(head)[0], 800);
  // The F32 norm takes the model's F16 back: every value converts exactly.
  SPECDEC_ASSERT_OK_AND_ASSIGN(TensorView norm, ck->Get("model.layers.0.input_layernorm.weight"));
  EXPECT_EQ(norm.dtype, DType::kF16);
  EXPECT_EQ(HalfToFloat(Halves(norm)[2]), 3.0f);
  SPECDEC_ASSERT_OK_AND_ASSIGN(TensorView down, ck->Get("model.layers.0.mlp.down_proj.weight"));
  EXPECT_EQ(down.shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(Halves(down)[5], 705);  // unchanged row-major data
  // q: 2 heads of head_dim 4, rows [0,1,2,3 | 4,5,6,7] -> [0,2,1,3 | 4,6,5,7]; k: one head.
  for (auto [name, seed, rows] : {std::tuple{"q_proj", 100, 8}, std::tuple{"k_proj", 200, 4}}) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(
        TensorView t, ck->Get(std::string("model.layers.0.self_attn.") + name + ".weight"));
    EXPECT_EQ(t.dtype, DType::kF16);
    EXPECT_EQ(t.shape, (std::vector<int64_t>{rows, 8}));
    const std::vector<uint16_t> h = Halves(t);
    const int kSrc[] = {0, 2, 1, 3, 4, 6, 5, 7};
    for (int r = 0; r < rows; ++r) {
      for (int c = 0; c < 8; ++c) {
        ASSERT_EQ(h[r * 8 + c], seed + kSrc[r] * 8 + c) << name << " row " << r;
      }
    }
  }
}

TEST_F(GgufToHfTest, MissingOutputTiesEmbeddings) {
  TinyOptions o;
  o.output = false;
  o.weight_type = 0;
  const fs::path out = dir_ / "hf";
  SPECDEC_ASSERT_OK(ConvertGgufToHf(Write("tied.gguf", TinyLlama(o)), out.string()));
  EXPECT_EQ(ReadJson(out / "config.json")["tie_word_embeddings"], true);
  EXPECT_EQ(ReadJson(out / "config.json")["torch_dtype"], "float32");
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(out.string()));
  EXPECT_FALSE(ck->Has("lm_head.weight"));
  EXPECT_TRUE(ck->Has("model.embed_tokens.weight"));
}

// `blocks` Q8_0 blocks: scale 0.5 (f16 0x3800), code j of block b = int8(seed + 3b + j).
std::string Q8Blocks(int blocks, int seed) {
  std::string out;
  for (int b = 0; b < blocks; ++b) {
    out += Le<uint16_t>(0x3800);
    for (int j = 0; j < 32; ++j) out += static_cast<char>(static_cast<uint8_t>(seed + 3 * b + j));
  }
  return out;
}

float Q8Value(int64_t i, int seed) {  // element i of Q8Blocks(_, seed)
  const auto code = static_cast<int8_t>(static_cast<uint8_t>(seed + 3 * (i / 32) + i % 32));
  return static_cast<float>(code) * 0.5f;
}

// A llama GGUF whose 2-D weights are Q8_0 (hidden 32, 2 heads of 16, 1 kv head, ffn 32, 6 tokens)
// and whose output head repeats the embedding's blocks.
std::string TinyQ8Llama() {
  GgufBuilder b;
  b.String("general.architecture", "llama")
      .U32("llama.embedding_length", 32)
      .U32("llama.feed_forward_length", 32)
      .U32("llama.block_count", 1)
      .U32("llama.attention.head_count", 2)
      .U32("llama.attention.head_count_kv", 1)
      .String("tokenizer.ggml.model", "llama")
      .StringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a", "b", "c"})
      .F32Array("tokenizer.ggml.scores", {0, 0, 0, -1, -2, -3})
      .I32Array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1, 1})
      .U32("tokenizer.ggml.bos_token_id", 1)
      .U32("tokenizer.ggml.eos_token_id", 2);
  b.Tensor("token_embd.weight", {32, 6}, 8, Q8Blocks(6, 0))
      .Tensor("blk.0.attn_norm.weight", {32}, 0, Fill(0, 32, 1))
      .Tensor("blk.0.attn_q.weight", {32, 32}, 8, Q8Blocks(32, 10))
      .Tensor("blk.0.attn_k.weight", {32, 16}, 8, Q8Blocks(16, 20))
      .Tensor("blk.0.attn_v.weight", {32, 16}, 8, Q8Blocks(16, 30))
      .Tensor("blk.0.attn_output.weight", {32, 32}, 8, Q8Blocks(32, 40))
      .Tensor("blk.0.ffn_norm.weight", {32}, 0, Fill(0, 32, 2))
      .Tensor("blk.0.ffn_gate.weight", {32, 32}, 8, Q8Blocks(32, 50))
      .Tensor("blk.0.ffn_up.weight", {32, 32}, 8, Q8Blocks(32, 60))
      .Tensor("blk.0.ffn_down.weight", {32, 32}, 8, Q8Blocks(32, 70))
      .Tensor("output_norm.weight", {32}, 0, Fill(0, 32, 3))
      .Tensor("output.weight", {32, 6}, 8, Q8Blocks(6, 0));
  return b.Build();
}

TEST_F(GgufToHfTest, Q8ModelBecomesF32WithTheDequantizedValues) {
  const fs::path out = dir_ / "hf";
  SPECDEC_ASSERT_OK(ConvertGgufToHf(Write("q8.gguf", TinyQ8Llama()), out.string()));
  const nlohmann::json config = ReadJson(out / "config.json");
  EXPECT_EQ(config["torch_dtype"], "float32");
  EXPECT_EQ(config["tie_word_embeddings"], true);  // the head's blocks repeat the embedding's
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(out.string()));
  EXPECT_FALSE(ck->Has("lm_head.weight"));
  for (auto [name, seed] : {std::pair{"model.embed_tokens.weight", 0},
                            std::pair{"model.layers.0.self_attn.v_proj.weight", 30},
                            std::pair{"model.layers.0.mlp.down_proj.weight", 70}}) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(TensorView t, ck->Get(name));
    ASSERT_EQ(t.dtype, DType::kF32) << name;
    const std::vector<float> f = Floats(t);
    for (size_t i = 0; i < f.size(); ++i) {
      ASSERT_EQ(f[i], Q8Value(static_cast<int64_t>(i), seed)) << name << " element " << i;
    }
  }
  // q: 2 heads of 16 rows; HF row j < 8 of a head is its GGUF row 2j, row j >= 8 is 2(j - 8) + 1.
  SPECDEC_ASSERT_OK_AND_ASSIGN(TensorView q, ck->Get("model.layers.0.self_attn.q_proj.weight"));
  ASSERT_EQ(q.shape, (std::vector<int64_t>{32, 32}));
  const std::vector<float> f = Floats(q);
  for (int r = 0; r < 32; ++r) {
    const int head = r / 16, j = r % 16;
    const int src = head * 16 + (j < 8 ? 2 * j : 2 * (j - 8) + 1);
    for (int c = 0; c < 32; ++c) {
      ASSERT_EQ(f[r * 32 + c], Q8Value(src * 32 + c, 10)) << "row " << r;
    }
  }
  // The F32 norms stay F32: the model's dtype is F32.
  SPECDEC_ASSERT_OK_AND_ASSIGN(TensorView norm, ck->Get("model.norm.weight"));
  EXPECT_EQ(norm.dtype, DType::kF32);
}

// --outtype bf16: every tensor BF16, each value rounded to nearest even from the F32, F16 or
// dequantized one (the F16 patterns seed + i need 10 significant bits: they round); Q and K are
// permuted as ever, and a head whose blocks repeat the embedding's is still tied.
TEST_F(GgufToHfTest, Bf16OutputRoundsEveryTensor) {
  GgufImportOptions bf16;
  bf16.bf16 = true;
  for (const uint32_t type : {0u, 1u}) {  // F32, F16 weights
    TinyOptions o;
    o.weight_type = type;
    const fs::path out = dir_ / ("hf" + std::to_string(type));
    SPECDEC_ASSERT_OK(ConvertGgufToHf(Write("tiny.gguf", TinyLlama(o)), out.string(), bf16));
    EXPECT_EQ(ReadJson(out / "config.json")["torch_dtype"], "bfloat16");
    SPECDEC_ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(out.string()));
    auto source = [type](int pattern) {
      return type == 0 ? static_cast<float>(pattern) : HalfToFloat(static_cast<uint16_t>(pattern));
    };
    int rounded = 0;
    for (auto [name, seed] :
         {std::pair{"model.embed_tokens.weight", 0}, std::pair{"lm_head.weight", 800},
          std::pair{"model.layers.0.mlp.down_proj.weight", 700}}) {
      SPECDEC_ASSERT_OK_AND_ASSIGN(TensorView t, ck->Get(name));
      ASSERT_EQ(t.dtype, DType::kBF16) << name;
      const std::vector<uint16_t> h = Halves(t);
      for (size_t i = 0; i < h.size(); ++i) {
        const float want = source(seed + static_cast<int>(i));
        ASSERT_EQ(h[i], RoundBf16(want)) << name << " element " << i;
        rounded += Bf16ToFloat(h[i]) != want;
      }
    }
    EXPECT_GT(rounded, 0);  // the check saw values that do round
    SPECDEC_ASSERT_OK_AND_ASSIGN(TensorView k, ck->Get("model.layers.0.self_attn.k_proj.weight"));
    ASSERT_EQ(k.dtype, DType::kBF16);
    const int kSrc[] = {0, 2, 1, 3};
    for (int r = 0; r < 4; ++r) {
      for (int c = 0; c < 8; ++c) {
        ASSERT_EQ(Halves(k)[r * 8 + c], RoundBf16(source(200 + kSrc[r] * 8 + c))) << "row " << r;
      }
    }
    SPECDEC_ASSERT_OK_AND_ASSIGN(TensorView norm, ck->Get("model.norm.weight"));
    EXPECT_EQ(norm.dtype, DType::kBF16);
    EXPECT_EQ(Bf16ToFloat(Halves(norm)[4]), 7.0f);
  }
  const fs::path q8 = dir_ / "q8";
  SPECDEC_ASSERT_OK(ConvertGgufToHf(Write("q8.gguf", TinyQ8Llama()), q8.string(), bf16));
  EXPECT_EQ(ReadJson(q8 / "config.json")["tie_word_embeddings"], true);
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(q8.string()));
  SPECDEC_ASSERT_OK_AND_ASSIGN(TensorView v, ck->Get("model.layers.0.self_attn.v_proj.weight"));
  ASSERT_EQ(v.dtype, DType::kBF16);
  const std::vector<uint16_t> h = Halves(v);
  for (size_t i = 0; i < h.size(); ++i) {
    ASSERT_EQ(h[i], RoundBf16(Q8Value(static_cast<int64_t>(i), 30))) << "element " << i;
  }
}

TEST_F(GgufToHfTest, UnsupportedInputsAreUnimplemented) {
  const std::string out = (dir_ / "hf").string();
  TinyOptions arch;
  arch.arch = "qwen2";
  SPECDEC_EXPECT_STATUS(ConvertGgufToHf(Write("arch.gguf", TinyLlama(arch)), out),
                        absl::StatusCode::kUnimplemented, "architecture 'qwen2' is not supported");
  TinyOptions tok;
  tok.tokenizer = "bert";
  SPECDEC_EXPECT_STATUS(ConvertGgufToHf(Write("tok.gguf", TinyLlama(tok)), out),
                        absl::StatusCode::kUnimplemented, "tokenizer model 'bert'");
  TinyOptions rope;
  rope.rope_dims = 2;
  SPECDEC_EXPECT_STATUS(ConvertGgufToHf(Write("rope.gguf", TinyLlama(rope)), out),
                        absl::StatusCode::kUnimplemented, "partial rotary");
  // A weight of a quantized type the reader does not dequantize.
  const std::string q = GgufBuilder()
                            .String("general.architecture", "llama")
                            .U32("llama.embedding_length", 32)
                            .U32("llama.feed_forward_length", 32)
                            .U32("llama.block_count", 1)
                            .U32("llama.attention.head_count", 1)
                            .String("tokenizer.ggml.model", "llama")
                            .StringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>"})
                            .F32Array("tokenizer.ggml.scores", {0, 0, 0})
                            .Tensor("token_embd.weight", {256, 3}, 10, std::string(252, '\0'))
                            .Build();
  SPECDEC_EXPECT_STATUS(ConvertGgufToHf(Write("q.gguf", q), out), absl::StatusCode::kUnimplemented,
                        "ggml type Q2_K (10) is not supported");
  EXPECT_FALSE(fs::exists(fs::path(out) / "model.safetensors"));
  SPECDEC_EXPECT_STATUS(ConvertGgufToHf((dir_ / "none.gguf").string(), out),
                        absl::StatusCode::kNotFound, "none.gguf");
}

}  // namespace
}  // namespace specdec::io
