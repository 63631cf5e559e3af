// GGUF: the real stories260K file parses with the expected metadata; malformed files give clear
// errors; conversion to HF matches the independent llama2.c checkpoint byte for byte.
#include "common/io/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/io/gguf_to_hf.h"
#include "common/io/safetensors.h"
#include "common/util/status_matchers.h"
#include "nlohmann/json.hpp"

namespace specdec::io {
namespace {

namespace fs = std::filesystem;
const fs::path kStories = fs::path(SPECDEC_SHARED_DIR) / "models/stories260K";

class GgufTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("specdec_gguf_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string p = (dir_ / name).string();
    std::ofstream(p, std::ios::binary) << bytes;
    return p;
  }
  fs::path dir_;
};

// Little-endian byte builders for hand-made GGUF files.
template <typename T>
std::string Le(T v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
}
std::string Str(const std::string& s) { return Le<uint64_t>(s.size()) + s; }
std::string Header(uint64_t tensors, uint64_t kv) {
  return std::string("GGUF") + Le<uint32_t>(3) + Le<uint64_t>(tensors) + Le<uint64_t>(kv);
}

TEST_F(GgufTest, ParsesRealStories260K) {
  if (!fs::exists(kStories / "stories260K.gguf")) GTEST_SKIP() << "../shared is absent";
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto g, GgufFile::Open((kStories / "stories260K.gguf").string()));
  EXPECT_EQ(*g->GetString("general.architecture"), "llama");
  EXPECT_EQ(*g->GetInt("llama.block_count"), 5);
  EXPECT_EQ(*g->GetInt("llama.embedding_length"), 64);
  EXPECT_EQ(*g->GetInt("llama.attention.head_count"), 8);
  EXPECT_EQ(*g->GetInt("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(g->GetStringArray("tokenizer.ggml.tokens")->size(), 512u);
  EXPECT_EQ(g->tensor_names().size(), 48u);
  SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor t, g->Tensor("token_embd.weight"));
  EXPECT_EQ(t.ggml_type, 0);
  EXPECT_EQ(t.ne, (std::vector<int64_t>{64, 512}));
  SPECDEC_EXPECT_STATUS(g->GetInt("general.architecture"), absl::StatusCode::kInvalidArgument,
                        "not an integer");
  SPECDEC_EXPECT_STATUS(g->GetInt("nope"), absl::StatusCode::kNotFound, "'nope' is missing");
}

TEST_F(GgufTest, MalformedFilesGiveClearErrors) {
  const auto bad = absl::StatusCode::kInvalidArgument;
  SPECDEC_EXPECT_STATUS(GgufFile::Open(Write("magic.gguf", "GGML" + Le<uint32_t>(3))), bad,
                        "magic.gguf: not a GGUF file (bad magic)");
  SPECDEC_EXPECT_STATUS(GgufFile::Open(Write("trunc.gguf", "GGUF" + Le<uint32_t>(3))), bad,
                        "truncated file");
  SPECDEC_EXPECT_STATUS(GgufFile::Open(Write("ver.gguf", "GGUF" + Le<uint32_t>(9) + Header(0, 0))),
                        bad, "version 9");
  SPECDEC_EXPECT_STATUS(GgufFile::Open(Write("counts.gguf", Header(1ull << 40, 1ull << 40))), bad,
                        "cannot fit");
  SPECDEC_EXPECT_STATUS(GgufFile::Open(Write("str.gguf", Header(0, 1) + Le<uint64_t>(1000) + "abc" +
                                                             std::string(20, 'x'))),
                        bad, "string length 1000 runs past the end");
  SPECDEC_EXPECT_STATUS(
      GgufFile::Open(Write("type.gguf", Header(0, 1) + Str("k") + Le<uint32_t>(99))), bad,
      "unknown metadata value type 99");
  SPECDEC_EXPECT_STATUS(
      GgufFile::Open(Write("array.gguf", Header(0, 1) + Str("k") + Le<uint32_t>(9) +
                                             Le<uint32_t>(6) + Le<uint64_t>(1ull << 50))),
      bad, "array of");
  // A tensor whose data lies past the end of the file.
  std::string t = Header(1, 0) + Str("w") + Le<uint32_t>(2) + Le<uint64_t>(4) + Le<uint64_t>(4) +
                  Le<uint32_t>(0) + Le<uint64_t>(0);
  t.resize((t.size() + 31) / 32 * 32, '\0');
  t += std::string(8, '\0');  // 8 of the 64 bytes needed
  SPECDEC_EXPECT_STATUS(GgufFile::Open(Write("past.gguf", t)), bad,
                        "tensor 'w' (64 bytes at data offset 0) runs past the end");
  std::string dims = Header(1, 0) + Str("w") + Le<uint32_t>(7);
  SPECDEC_EXPECT_STATUS(GgufFile::Open(Write("dims.gguf", dims + std::string(64, '\0'))), bad,
                        "7 dimensions");
  // A quantized tensor is listed but not readable.
  std::string q = Header(1, 0) + Str("w") + Le<uint32_t>(1) + Le<uint64_t>(32) + Le<uint32_t>(2) +
                  Le<uint64_t>(0);
  q.resize(64, '\0');
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto g, GgufFile::Open(Write("q.gguf", q)));
  SPECDEC_EXPECT_STATUS(g->Tensor("w"), absl::StatusCode::kUnimplemented, "Q4_0");
  SPECDEC_EXPECT_STATUS(ConvertGgufToHf((dir_ / "q.gguf").string(), (dir_ / "out").string()),
                        absl::StatusCode::kNotFound, "general.architecture");
}

// llama2.c legacy checkpoint: 7 x int32 header then f32 arrays.
struct Llama2c {
  int32_t dim, hidden, layers, heads, kv_heads, vocab, seq;
  std::vector<float> all;
  size_t off_embed, off_wq, off_wk, off_wv, off_wo, off_w1, off_w2, off_w3;
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
  m.off_embed = o;
  o += v * d;
  o += L * d;  // rms_att
  m.off_wq = o;
  o += L * d * d;
  m.off_wk = o;
  o += L * kv * d;
  m.off_wv = o;
  o += L * kv * d;
  m.off_wo = o;
  o += L * d * d;
  o += L * d;  // rms_ffn
  m.off_w1 = o;
  o += L * h * d;
  m.off_w2 = o;
  o += L * d * h;
  m.off_w3 = o;
  o += L * h * d;
  return m;
}

std::vector<float> Floats(const TensorView& v) {
  std::vector<float> out(v.nbytes / 4);
  std::memcpy(out.data(), v.data, v.nbytes);
  return out;
}

TEST_F(GgufTest, ConvertMatchesIndependentLlama2cCheckpoint) {
  if (!fs::exists(kStories / "stories260K.gguf")) GTEST_SKIP() << "../shared is absent";
  const std::string out = (dir_ / "hf").string();
  SPECDEC_ASSERT_OK(ConvertGgufToHf((kStories / "stories260K.gguf").string(), out));
  for (const char* f : {"config.json", "model.safetensors", "tokenizer.json",
                        "tokenizer_config.json", "generation_config.json"}) {
    EXPECT_TRUE(fs::exists(fs::path(out) / f)) << f;
  }
  std::ifstream cin(fs::path(out) / "config.json");
  auto config = nlohmann::json::parse(cin);
  EXPECT_EQ(config["num_hidden_layers"], 5);
  EXPECT_EQ(config["num_key_value_heads"], 4);
  EXPECT_EQ(config["intermediate_size"], 172);
  EXPECT_EQ(config["vocab_size"], 512);
  EXPECT_EQ(config["tie_word_embeddings"], true);

  Llama2c ref = ReadLlama2c((kStories / "stories260K.bin").string());
  ASSERT_EQ(ref.dim, 64);
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(out));
  EXPECT_FALSE(ck->Has("lm_head.weight"));
  const size_t d = 64, kvd = 32, hid = 172, hd = 8;
  auto slice = [&](size_t off, size_t n) {
    return std::vector<float>(ref.all.begin() + off, ref.all.begin() + off + n);
  };
  EXPECT_EQ(Floats(*ck->Get("model.embed_tokens.weight")), slice(ref.off_embed, 512 * d));
  for (int l = 0; l < 5; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    EXPECT_EQ(Floats(*ck->Get(p + "self_attn.v_proj.weight")),
              slice(ref.off_wv + l * kvd * d, kvd * d));
    EXPECT_EQ(Floats(*ck->Get(p + "self_attn.o_proj.weight")),
              slice(ref.off_wo + l * d * d, d * d));
    EXPECT_EQ(Floats(*ck->Get(p + "mlp.gate_proj.weight")),
              slice(ref.off_w1 + l * hid * d, hid * d));
    EXPECT_EQ(Floats(*ck->Get(p + "mlp.down_proj.weight")),
              slice(ref.off_w2 + l * d * hid, d * hid));
    EXPECT_EQ(Floats(*ck->Get(p + "mlp.up_proj.weight")), slice(ref.off_w3 + l * hid * d, hid * d));
    // Q/K: HF row h*hd + j comes from llama2.c row h*hd + 2j (j < hd/2) or h*hd + 2(j-hd/2)+1.
    for (auto [name, off, rows] :
         {std::tuple{"self_attn.q_proj.weight", ref.off_wq + l * d * d, d},
          std::tuple{"self_attn.k_proj.weight", ref.off_wk + l * kvd * d, kvd}}) {
      std::vector<float> hf = Floats(*ck->Get(p + name));
      ASSERT_EQ(hf.size(), rows * d);
      for (size_t r = 0; r < rows; ++r) {
        const size_t h = r / hd, j = r % hd;
        const size_t src = h * hd + (j < hd / 2 ? 2 * j : 2 * (j - hd / 2) + 1);
        for (size_t c = 0; c < d; ++c) {
          ASSERT_EQ(hf[r * d + c], ref.all[off + src * d + c]) << name << " layer " << l;
        }
      }
    }
  }
}

}  // namespace
}  // namespace specdec::io
