// HF -> GGUF -> HF: the embedded pack's target (Qwen3, BF16, byte-level BPE) and a hand-made
// Llama checkpoint come back byte for byte, tokenize the same, and the GGUF file in between has
// the keys, tensor names, shapes and Q/K layout llama.cpp expects. Refused inputs name the
// problem.
#include "common/io/hf_to_gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/io/gguf.h"
#include "common/io/gguf_to_hf.h"
#include "common/io/half.h"
#include "common/io/safetensors.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/status_matchers.h"
#include "nlohmann/json.hpp"

namespace specdec::io {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

const fs::path kPackTarget = fs::path(SPECDEC_SOURCE_DIR) / "models/specdec-pycode/target";

Json ReadJson(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

class HfToGgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("specdec_hf_to_gguf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Every tensor of `a` is in `b` with the same dtype, shape and bytes, and nothing else is.
  static void ExpectSameTensors(const fs::path& a, const fs::path& b) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(auto ca, Checkpoint::Open(a.string()));
    SPECDEC_ASSERT_OK_AND_ASSIGN(auto cb, Checkpoint::Open(b.string()));
    ASSERT_EQ(ca->Names(), cb->Names());
    for (const std::string& name : ca->Names()) {
      const TensorView ta = *ca->Get(name), tb = *cb->Get(name);
      EXPECT_EQ(ta.dtype, tb.dtype) << name;
      EXPECT_EQ(ta.shape, tb.shape) << name;
      ASSERT_EQ(ta.nbytes, tb.nbytes) << name;
      EXPECT_EQ(std::memcmp(ta.data, tb.data, ta.nbytes), 0) << name;
    }
  }

  // Both directories' tokenizers give the same ids for `texts`, with and without BOS.
  static void ExpectSameTokens(const fs::path& a, const fs::path& b,
                               const std::vector<std::string>& texts) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(auto ta, tokenizer::Tokenizer::FromFile(a / "tokenizer.json"));
    SPECDEC_ASSERT_OK_AND_ASSIGN(auto tb, tokenizer::Tokenizer::FromFile(b / "tokenizer.json"));
    for (const std::string& text : texts) {
      for (bool bos : {false, true}) {
        SPECDEC_ASSERT_OK_AND_ASSIGN(auto ia, ta->Encode(text, bos));
        SPECDEC_ASSERT_OK_AND_ASSIGN(auto ib, tb->Encode(text, bos));
        EXPECT_EQ(ia, ib) << text;
      }
    }
  }

  fs::path dir_;
};

TEST_F(HfToGgufTest, PackTargetRoundTripsByteForByte) {
  const std::string gguf = (dir_ / "target.gguf").string();
  SPECDEC_ASSERT_OK(ConvertHfToGguf(kPackTarget.string(), gguf));

  SPECDEC_ASSERT_OK_AND_ASSIGN(auto g, GgufFile::Open(gguf));
  EXPECT_EQ(*g->GetString("general.architecture"), "qwen3");
  EXPECT_EQ(*g->GetInt("general.file_type"), 32);  // MOSTLY_BF16
  EXPECT_EQ(*g->GetInt("qwen3.block_count"), 8);
  EXPECT_EQ(*g->GetInt("qwen3.embedding_length"), 256);
  EXPECT_EQ(*g->GetInt("qwen3.attention.head_count_kv"), 2);
  EXPECT_EQ(*g->GetInt("qwen3.attention.key_length"), 64);
  EXPECT_EQ(*g->GetFloat("qwen3.rope.freq_base"), 10000.0);
  EXPECT_EQ(*g->GetString("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(*g->GetString("tokenizer.ggml.pre"), "qwen2");
  EXPECT_EQ(g->GetStringArray("tokenizer.ggml.tokens")->size(), 4096u);
  EXPECT_EQ(g->GetIntArray("tokenizer.ggml.token_type")->at(1), 3);  // <|eos|>: control
  EXPECT_EQ(*g->GetInt("tokenizer.ggml.eos_token_id"), 1);
  EXPECT_TRUE(*g->GetBool("tokenizer.ggml.add_bos_token"));
  EXPECT_FALSE(g->HasTensor("output.weight"));  // tied: llama.cpp reads token_embd
  SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor q, g->Tensor("blk.0.attn_q.weight"));
  EXPECT_EQ(q.ggml_type, kGgmlTypeBF16);
  EXPECT_EQ(q.ne, (std::vector<int64_t>{256, 256}));
  SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor qn, g->Tensor("blk.0.attn_q_norm.weight"));
  EXPECT_EQ(qn.ggml_type, kGgmlTypeF32);  // norms in F32, as llama.cpp keeps them
  EXPECT_EQ(qn.ne, (std::vector<int64_t>{64}));

  const fs::path back = dir_ / "back";
  SPECDEC_ASSERT_OK(ConvertGgufToHf(gguf, back.string()));
  ExpectSameTensors(kPackTarget, back);
  const Json a = ReadJson(kPackTarget / "config.json"), b = ReadJson(back / "config.json");
  for (const char* key :
       {"architectures", "model_type", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "head_dim", "rms_norm_eps", "rope_theta",
        "max_position_embeddings", "vocab_size", "tie_word_embeddings", "bos_token_id",
        "eos_token_id", "torch_dtype"}) {
    EXPECT_EQ(a[key], b[key]) << key;
  }
  ExpectSameTokens(kPackTarget, back,
                   {"def list_python_files(path):\n    return [f for f in os.listdir(path)]\n",
                    "x = 12345 + 0.5  # naïve café 日本語 🙂\r\n\t\ttabs",
                    "  leading spaces", "<|bos|>special<|eos|>", ""});
}

// --outtype f32: every tensor in F32, holding exactly the BF16 values.
TEST_F(HfToGgufTest, F32ExportHoldsTheExactValues) {
  const std::string gguf = (dir_ / "target-f32.gguf").string();
  GgufExportOptions o;
  o.f32 = true;
  SPECDEC_ASSERT_OK(ConvertHfToGguf(kPackTarget.string(), gguf, o));
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto g, GgufFile::Open(gguf));
  EXPECT_EQ(*g->GetInt("general.file_type"), 0);  // ALL_F32
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpoint::Open(kPackTarget.string()));
  for (const char* name : {"blk.3.attn_q.weight", "token_embd.weight", "blk.0.ffn_down.weight"}) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor t, g->Tensor(name));
    ASSERT_EQ(t.ggml_type, kGgmlTypeF32) << name;
  }
  SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor t, g->Tensor("blk.0.ffn_down.weight"));
  const TensorView bf16 = *ckpt->Get("model.layers.0.mlp.down_proj.weight");
  ASSERT_EQ(t.nbytes, bf16.nbytes * 2);
  for (size_t i = 0; i < bf16.nbytes / 2; i += 997) {
    uint16_t b;
    float f;
    std::memcpy(&b, bf16.data + 2 * i, 2);
    std::memcpy(&f, t.data + 4 * i, 4);
    ASSERT_EQ(f, Bf16ToFloat(b)) << i;
  }
}

// A small random Llama checkpoint in `dir` (F32, untied head) with the pack's tokenizer.
void WriteLlamaCheckpoint(const fs::path& dir, std::vector<std::vector<float>>& storage) {
  const int64_t hidden = 32, heads = 4, kv_heads = 2, hd = 8, ffn = 48, vocab = 4100;
  const Json config = {{"architectures", {"LlamaForCausalLM"}},
                       {"model_type", "llama"},
                       {"hidden_size", hidden},
                       {"intermediate_size", ffn},
                       {"num_hidden_layers", 1},
                       {"num_attention_heads", heads},
                       {"num_key_value_heads", kv_heads},
                       {"head_dim", hd},
                       {"rms_norm_eps", 1e-5},
                       {"rope_theta", 500000.0},
                       {"max_position_embeddings", 512},
                       {"vocab_size", vocab},
                       {"tie_word_embeddings", false},
                       {"torch_dtype", "float32"}};
  std::ofstream(dir / "config.json") << config.dump(2);
  fs::copy_file(kPackTarget / "tokenizer.json", dir / "tokenizer.json");
  fs::copy_file(kPackTarget / "tokenizer_config.json", dir / "tokenizer_config.json");
  std::mt19937 rng(7);
  std::normal_distribution<float> normal;
  std::vector<TensorToWrite> tensors;
  auto add = [&](const std::string& name, std::vector<int64_t> shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    storage.emplace_back(n);
    for (float& x : storage.back()) x = normal(rng);
    tensors.push_back(
        {name, DType::kF32, shape, std::as_bytes(std::span<const float>(storage.back()))});
  };
  add("model.embed_tokens.weight", {vocab, hidden});
  add("lm_head.weight", {vocab, hidden});
  add("model.norm.weight", {hidden});
  const std::string l = "model.layers.0.";
  add(l + "input_layernorm.weight", {hidden});
  add(l + "post_attention_layernorm.weight", {hidden});
  add(l + "self_attn.q_proj.weight", {heads * hd, hidden});
  add(l + "self_attn.k_proj.weight", {kv_heads * hd, hidden});
  add(l + "self_attn.v_proj.weight", {kv_heads * hd, hidden});
  add(l + "self_attn.o_proj.weight", {hidden, heads * hd});
  add(l + "mlp.gate_proj.weight", {ffn, hidden});
  add(l + "mlp.up_proj.weight", {ffn, hidden});
  add(l + "mlp.down_proj.weight", {hidden, ffn});
  ASSERT_TRUE(WriteSafetensors((dir / "model.safetensors").string(), tensors).ok());
}

TEST_F(HfToGgufTest, LlamaPermutesQAndKRowsAndRoundTrips) {
  const fs::path hf = dir_ / "llama";
  fs::create_directories(hf);
  std::vector<std::vector<float>> storage;
  WriteLlamaCheckpoint(hf, storage);
  const std::string gguf = (dir_ / "llama.gguf").string();
  SPECDEC_ASSERT_OK(ConvertHfToGguf(hf.string(), gguf));

  SPECDEC_ASSERT_OK_AND_ASSIGN(auto g, GgufFile::Open(gguf));
  EXPECT_EQ(*g->GetString("general.architecture"), "llama");
  EXPECT_EQ(*g->GetFloat("llama.rope.freq_base"), 500000.0);
  EXPECT_TRUE(g->HasTensor("output.weight"));
  // 4100 rows, 4096 tokens: the rest are unused padding tokens.
  EXPECT_EQ(g->GetStringArray("tokenizer.ggml.tokens")->back(), "[PAD4099]");
  // GGUF row h*hd + 2j + i holds HF row h*hd + i*hd/2 + j (interleaved RoPE pairs).
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto ckpt, Checkpoint::Open(hf.string()));
  for (const char* proj : {"q", "k"}) {
    const TensorView hf_t =
        *ckpt->Get(std::string("model.layers.0.self_attn.") + proj + "_proj.weight");
    SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor t,
                                 g->Tensor(std::string("blk.0.attn_") + proj + ".weight"));
    const int64_t hd = 8, half = 4, row = 32 * 4, n_head = hf_t.shape[0] / hd;
    for (int64_t h = 0; h < n_head; ++h) {
      for (int64_t j = 0; j < half; ++j) {
        for (int64_t i = 0; i < 2; ++i) {
          EXPECT_EQ(std::memcmp(t.data + (h * hd + 2 * j + i) * row,
                                hf_t.data + (h * hd + i * half + j) * row, row),
                    0)
              << proj << " head " << h << " pair " << j << " half " << i;
        }
      }
    }
  }
  const fs::path back = dir_ / "back";
  SPECDEC_ASSERT_OK(ConvertGgufToHf(gguf, back.string()));
  ExpectSameTensors(hf, back);
  EXPECT_EQ(ReadJson(back / "config.json")["vocab_size"], 4100);
  ExpectSameTokens(hf, back, {"print(1 + 23)\n", "for i in range(10):"});
}

// Llama 3.1 rope scaling becomes llama.cpp's rope_freqs.weight: factor 1 for the fastest pairs,
// `factor` for the slowest, a blend rising between. Importing it back is refused, not dropped.
TEST_F(HfToGgufTest, Llama3RopeScalingBecomesRopeFreqs) {
  const fs::path hf = dir_ / "llama3";
  fs::create_directories(hf);
  std::vector<std::vector<float>> storage;
  WriteLlamaCheckpoint(hf, storage);
  Json config = ReadJson(hf / "config.json");
  config["rope_parameters"] = {{"rope_type", "llama3"},          {"rope_theta", 500000.0},
                               {"factor", 8.0},                  {"low_freq_factor", 1.0},
                               {"high_freq_factor", 4.0},        {"original_max_position_embeddings", 512}};
  std::ofstream(hf / "config.json") << config.dump();
  const std::string gguf = (dir_ / "llama3.gguf").string();
  SPECDEC_ASSERT_OK(ConvertHfToGguf(hf.string(), gguf));
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto g, GgufFile::Open(gguf));
  SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor t, g->Tensor("rope_freqs.weight"));
  ASSERT_EQ(t.ne, (std::vector<int64_t>{4}));  // head_dim 8: 4 rotary pairs
  std::vector<float> f(4);
  std::memcpy(f.data(), t.data, 16);
  // Wavelengths 2*pi*500000^(i/8) for i = 0, 2, 4, 6: 6.3, 167, 4443, 118000 against the band
  // [512/4, 512/1] = [128, 512]: pair 0 keeps its frequency, pairs 2 and 3 are divided by 8, and
  // pair 1 blends: smooth = (512/167.08 - 1) / 3 = 0.688, 1 / ((1 - 0.688) / 8 + 0.688) = 1.375.
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_NEAR(f[1], 1.3753, 1e-3);
  EXPECT_EQ(f[2], 8.0f);
  EXPECT_EQ(f[3], 8.0f);
  SPECDEC_EXPECT_STATUS(ConvertGgufToHf(gguf, (dir_ / "back").string()),
                        absl::StatusCode::kUnimplemented, "rope_freqs.weight scales RoPE");

  // Transformers 4 spelled the same as a top-level rope_theta and rope_scaling: same file.
  Json old_style = config;
  old_style.erase("rope_parameters");
  old_style["rope_theta"] = 500000.0;
  old_style["rope_scaling"] = {{"rope_type", "llama3"},
                               {"factor", 8.0},
                               {"low_freq_factor", 1.0},
                               {"high_freq_factor", 4.0},
                               {"original_max_position_embeddings", 512}};
  std::ofstream(hf / "config.json") << old_style.dump();
  const std::string gguf4 = (dir_ / "llama3-v4.gguf").string();
  SPECDEC_ASSERT_OK(ConvertHfToGguf(hf.string(), gguf4));
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto g4, GgufFile::Open(gguf4));
  EXPECT_EQ(*g4->GetFloat("llama.rope.freq_base"), 500000.0);
  SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor t4, g4->Tensor("rope_freqs.weight"));
  ASSERT_EQ(t4.nbytes, 16u);
  EXPECT_EQ(std::memcmp(t4.data, t.data, 16), 0);
}

TEST_F(HfToGgufTest, UnsupportedInputsSayWhat) {
  const fs::path hf = dir_ / "m";
  fs::create_directories(hf);
  SPECDEC_EXPECT_STATUS(ConvertHfToGguf(hf.string(), (dir_ / "x.gguf").string()),
                        absl::StatusCode::kNotFound, "config.json");
  std::vector<std::vector<float>> storage;
  WriteLlamaCheckpoint(hf, storage);
  const std::string out = (dir_ / "x.gguf").string();

  Json config = ReadJson(hf / "config.json");
  Json bad = config;
  bad["model_type"] = "gpt_neox";
  std::ofstream(hf / "config.json") << bad.dump();
  SPECDEC_EXPECT_STATUS(ConvertHfToGguf(hf.string(), out), absl::StatusCode::kUnimplemented,
                        "model_type 'gpt_neox'");
  bad = config;
  bad["rope_parameters"] = {{"rope_type", "yarn"}, {"rope_theta", 500000.0}, {"factor", 4.0}};
  std::ofstream(hf / "config.json") << bad.dump();
  SPECDEC_EXPECT_STATUS(ConvertHfToGguf(hf.string(), out), absl::StatusCode::kUnimplemented,
                        "rope scaling 'yarn'");
  std::ofstream(hf / "config.json") << config.dump();

  Json tok = ReadJson(hf / "tokenizer.json");
  Json odd = tok;
  odd["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\s+|\\w+";
  std::ofstream(hf / "tokenizer.json") << odd.dump();
  SPECDEC_EXPECT_STATUS(ConvertHfToGguf(hf.string(), out), absl::StatusCode::kUnimplemented,
                        "has no llama.cpp pre-tokenizer name");
  odd = tok;
  odd["model"]["vocab"]["Ġnegative"] = -3;
  std::ofstream(hf / "tokenizer.json") << odd.dump();
  SPECDEC_EXPECT_STATUS(ConvertHfToGguf(hf.string(), out), absl::StatusCode::kInvalidArgument,
                        "has id -3");
  odd = tok;
  odd["normalizer"] = {{"type", "NFC"}};
  std::ofstream(hf / "tokenizer.json") << odd.dump();
  SPECDEC_EXPECT_STATUS(ConvertHfToGguf(hf.string(), out), absl::StatusCode::kUnimplemented,
                        "normalizer");
  std::ofstream(hf / "tokenizer.json") << tok.dump();
  EXPECT_FALSE(fs::exists(out));
  SPECDEC_EXPECT_OK(ConvertHfToGguf(hf.string(), out));  // restored: converts
}

}  // namespace
}  // namespace specdec::io
