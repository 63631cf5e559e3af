// GGUF reader: the real stories260K file parses with the expected metadata; a hand-built file with
// every value type and tensor type reads back exactly; each malformed file gives INVALID_ARGUMENT
// naming the file and the problem.
#include "common/io/gguf.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/util/status_matchers.h"
#include "tests/common/io/gguf_builder.h"

namespace specdec::io {
namespace {

namespace fs = std::filesystem;
using testing::GgufBuilder;
using testing::Header;
using testing::Le;
using testing::Str;

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
  // Expects Open of `bytes` (written as `name`) to fail with INVALID_ARGUMENT whose message starts
  // with the file's path and contains `substr`.
  void ExpectBad(const std::string& name, const std::string& bytes, const std::string& substr) {
    const std::string p = Write(name, bytes);
    auto g = GgufFile::Open(p);
    ASSERT_FALSE(g.ok()) << name << " opened";
    EXPECT_EQ(g.status().code(), absl::StatusCode::kInvalidArgument) << g.status();
    EXPECT_EQ(std::string(g.status().message()).rfind(p + ": ", 0), 0u) << g.status();
    EXPECT_NE(std::string(g.status().message()).find(substr), std::string::npos)
        << g.status() << "\n  lacks: " << substr;
  }
  fs::path dir_;
};

TEST_F(GgufTest, ParsesRealStories260K) {
  const fs::path path = kStories / "stories260K.gguf";
  if (!fs::exists(path)) GTEST_SKIP() << path << " is absent (needs ../shared/models)";
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto g, GgufFile::Open(path.string()));
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(*g->GetString("general.architecture"), "llama");
  EXPECT_EQ(*g->GetInt("llama.block_count"), 5);
  EXPECT_EQ(*g->GetInt("llama.embedding_length"), 64);
  EXPECT_EQ(*g->GetInt("llama.attention.head_count"), 8);
  EXPECT_EQ(*g->GetInt("llama.attention.head_count_kv"), 4);
  EXPECT_NEAR(*g->GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto tokens, g->GetStringArray("tokenizer.ggml.tokens"));
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(g->GetFloatArray("tokenizer.ggml.scores")->size(), 512u);
  EXPECT_EQ(g->GetIntArray("tokenizer.ggml.token_type")->at(1), 3);  // control
  EXPECT_EQ(g->tensor_names().size(), 48u);
  EXPECT_EQ(g->tensor_infos().size(), 48u);
  EXPECT_EQ(g->alignment(), 32u);
  EXPECT_EQ(g->data_offset() % 32, 0u);
  SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor t, g->Tensor("token_embd.weight"));
  EXPECT_EQ(t.ggml_type, kGgmlTypeF32);
  EXPECT_EQ(t.ne, (std::vector<int64_t>{64, 512}));
  EXPECT_EQ(t.nbytes, 64u * 512 * 4);
  SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor k, g->Tensor("blk.4.attn_k.weight"));
  EXPECT_EQ(k.ne, (std::vector<int64_t>{64, 32}));
  SPECDEC_EXPECT_STATUS(g->GetInt("general.architecture"), absl::StatusCode::kInvalidArgument,
                        "'general.architecture' is not an integer");
  SPECDEC_EXPECT_STATUS(g->GetInt("nope"), absl::StatusCode::kNotFound, "'nope' is missing");
  SPECDEC_EXPECT_STATUS(g->Tensor("nope.weight"), absl::StatusCode::kNotFound, "'nope.weight'");
}

// Every metadata value type and the readable tensor types round-trip, in versions 2 and 3, with
// a non-default alignment.
TEST_F(GgufTest, ReadsEveryValueTypeAndTensorType) {
  for (uint32_t version : {2u, 3u}) {
    SCOPED_TRACE(version);
    std::string f32_bytes;
    for (float f : {1.f, -2.f, 3.5f, 4.f, 5.f, 6.25f}) f32_bytes += Le(f);
    const std::string f16_bytes =
        Le<uint16_t>(0x3c00) + Le<uint16_t>(0xc000) + Le<uint16_t>(0x3800) + Le<uint16_t>(0x0000);
    const std::string bf16_bytes = Le<uint16_t>(0x3f80) + Le<uint16_t>(0x4040);
    const std::string nested = Le<uint32_t>(9) + Le<uint64_t>(2) +  // array of 2 arrays
                               Le<uint32_t>(5) + Le<uint64_t>(2) + Le<int32_t>(1) + Le<int32_t>(2) +
                               Le<uint32_t>(5) + Le<uint64_t>(1) + Le<int32_t>(3);
    const std::string bytes = GgufBuilder(version)
                                  .Alignment(64)
                                  .Kv("u8", 0, Le<uint8_t>(255))
                                  .Kv("i8", 1, Le<int8_t>(-5))
                                  .Kv("u16", 2, Le<uint16_t>(65535))
                                  .Kv("i16", 3, Le<int16_t>(-300))
                                  .Kv("u32", 4, Le<uint32_t>(4000000000u))
                                  .Kv("i32", 5, Le<int32_t>(-7))
                                  .Kv("f32", 6, Le<float>(0.5f))
                                  .Kv("bool", 7, Le<uint8_t>(1))
                                  .String("str", "héllo")
                                  .Kv("u64", 10, Le<uint64_t>(1ull << 60))
                                  .Kv("i64", 11, Le<int64_t>(-(1ll << 50)))
                                  .Kv("f64", 12, Le<double>(1e-300))
                                  .StringArray("strs", {"a", "", "ccc"})
                                  .F32Array("floats", {1.5f, -2.f})
                                  .I32Array("ints", {7, -8, 9})
                                  .Kv("nested", 9, nested)
                                  .Tensor("w32", {3, 2}, 0, f32_bytes)
                                  .Tensor("w16", {4}, 1, f16_bytes)
                                  .Tensor("wbf", {1, 1, 1, 2}, 30, bf16_bytes)
                                  .Tensor("q4", {32}, 2, std::string(18, '\x11'))
                                  .Tensor("q", {256}, 10, std::string(84, '\x11'))
                                  .Build();
    SPECDEC_ASSERT_OK_AND_ASSIGN(auto g, GgufFile::Open(Write("all.gguf", bytes)));
    EXPECT_EQ(g->version(), version);
    EXPECT_EQ(*g->GetInt("u8"), 255);
    EXPECT_EQ(*g->GetInt("i8"), -5);
    EXPECT_EQ(*g->GetInt("u16"), 65535);
    EXPECT_EQ(*g->GetInt("i16"), -300);
    EXPECT_EQ(*g->GetInt("u32"), 4000000000ll);
    EXPECT_EQ(*g->GetInt("i32"), -7);
    EXPECT_EQ(*g->GetInt("u64"), 1ll << 60);
    EXPECT_EQ(*g->GetInt("i64"), -(1ll << 50));
    EXPECT_EQ(*g->GetFloat("f32"), 0.5);
    EXPECT_EQ(*g->GetFloat("f64"), 1e-300);
    EXPECT_EQ(*g->GetFloat("i32"), -7.0);  // integers widen to float
    EXPECT_EQ(*g->GetBool("bool"), true);
    EXPECT_EQ(*g->GetString("str"), "héllo");
    EXPECT_EQ(*g->GetStringArray("strs"), (std::vector<std::string>{"a", "", "ccc"}));
    EXPECT_EQ(*g->GetFloatArray("floats"), (std::vector<double>{1.5, -2.0}));
    EXPECT_EQ(*g->GetIntArray("ints"), (std::vector<int64_t>{7, -8, 9}));
    EXPECT_EQ(*g->GetFloatArray("ints"), (std::vector<double>{7, -8, 9}));
    SPECDEC_EXPECT_STATUS(g->GetIntArray("floats"), absl::StatusCode::kInvalidArgument,
                          "'floats' is not an array of integers");
    SPECDEC_EXPECT_STATUS(g->GetStringArray("str"), absl::StatusCode::kInvalidArgument,
                          "'str' is not an array");
    SPECDEC_EXPECT_STATUS(g->GetString("bool"), absl::StatusCode::kInvalidArgument,
                          "'bool' is not a string");
    SPECDEC_ASSERT_OK_AND_ASSIGN(const GgufValue* nv, g->GetValue("nested"));
    const auto& outer = std::get<std::shared_ptr<GgufValue::Array>>(nv->v);
    ASSERT_EQ(outer->items.size(), 2u);
    EXPECT_EQ(outer->element_type, 9u);
    const auto& inner = std::get<std::shared_ptr<GgufValue::Array>>(outer->items[1].v);
    ASSERT_EQ(inner->items.size(), 1u);
    EXPECT_EQ(std::get<int64_t>(inner->items[0].v), 3);
    EXPECT_TRUE(g->Has("nested"));
    EXPECT_FALSE(g->Has("absent"));
    EXPECT_EQ(g->Keys().size(), 17u);

    EXPECT_EQ(g->alignment(), 64u);
    EXPECT_EQ(g->data_offset() % 64, 0u);
    ASSERT_EQ(g->tensor_infos().size(), 5u);
    EXPECT_EQ(g->tensor_names(), (std::vector<std::string>{"w32", "w16", "wbf", "q4", "q"}));
    for (const GgufTensorInfo& info : g->tensor_infos()) EXPECT_EQ(info.offset % 64, 0u);
    EXPECT_EQ(g->tensor_infos()[2].n_dims, 4);
    EXPECT_EQ(g->tensor_infos()[3].ggml_type, 2);
    EXPECT_EQ(g->tensor_infos()[4].ggml_type, 10);
    SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor w32, g->Tensor("w32"));
    EXPECT_EQ(w32.ne, (std::vector<int64_t>{3, 2}));
    ASSERT_EQ(w32.nbytes, 24u);
    EXPECT_EQ(std::memcmp(w32.data, f32_bytes.data(), 24), 0);
    SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor w16, g->Tensor("w16"));
    ASSERT_EQ(w16.nbytes, 8u);
    EXPECT_EQ(std::memcmp(w16.data, f16_bytes.data(), 8), 0);
    SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor wbf, g->Tensor("wbf"));
    EXPECT_EQ(wbf.ggml_type, kGgmlTypeBF16);
    ASSERT_EQ(wbf.nbytes, 4u);
    EXPECT_EQ(std::memcmp(wbf.data, bf16_bytes.data(), 4), 0);
    EXPECT_EQ(w16.data - w32.data, 64);  // each tensor starts on the 64-byte alignment
    SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor q4, g->Tensor("q4"));  // a block type: its blocks
    EXPECT_EQ(q4.ggml_type, 2);
    ASSERT_EQ(q4.nbytes, 18u);
    EXPECT_EQ(std::memcmp(q4.data, std::string(18, '\x11').data(), 18), 0);
    SPECDEC_EXPECT_STATUS(g->Tensor("q"), absl::StatusCode::kUnimplemented,
                          "tensor 'q': ggml type Q2_K (10) is not supported (F32, F16, BF16, Q8_0");
  }
}

TEST_F(GgufTest, EmptyMetadataAndNoTensorsIsValid) {
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto g, GgufFile::Open(Write("empty.gguf", Header(0, 0))));
  EXPECT_TRUE(g->tensor_names().empty());
  EXPECT_TRUE(g->Keys().empty());
}

TEST_F(GgufTest, MissingFileIsNotFound) {
  SPECDEC_EXPECT_STATUS(GgufFile::Open((dir_ / "none.gguf").string()), absl::StatusCode::kNotFound,
                        "none.gguf");
}

TEST_F(GgufTest, MalformedFilesGiveClearErrors) {
  ExpectBad("magic.gguf", "GGML" + Le<uint32_t>(3) + std::string(16, '\0'),
            "not a GGUF file (bad magic");
  ExpectBad("tiny.gguf", "GG", "bad magic");
  ExpectBad("trunc.gguf", "GGUF" + Le<uint32_t>(3), "truncated file: cannot read tensor count");
  ExpectBad("ver.gguf", Header(0, 0, 9), "GGUF version 9 is not supported");
  ExpectBad("ver1.gguf", Header(0, 0, 1), "GGUF version 1 is not supported");
  ExpectBad("bigendian.gguf", Header(0, 0, 0x03000000u), "big-endian GGUF");
  ExpectBad("counts.gguf", Header(1ull << 40, 1ull << 40), "cannot fit in a file of");
  ExpectBad("kvcount.gguf", Header(0, 1000) + std::string(100, '\0'), "metadata count 1000");
  ExpectBad("str.gguf", Header(0, 1) + Le<uint64_t>(1000) + "abc" + std::string(20, 'x'),
            "metadata key at offset 24: string length 1000 runs past the end of the file");
  ExpectBad("strval.gguf",
            Header(0, 1) + Str("k") + Le<uint32_t>(8) + Le<uint64_t>(1ull << 62) + "xy",
            "string length 4611686018427387904 runs past the end");
  ExpectBad("type.gguf", Header(0, 1) + Str("k") + Le<uint32_t>(99) + std::string(16, '\0'),
            "unknown metadata value type 99");
  ExpectBad("array.gguf",
            Header(0, 1) + Str("k") + Le<uint32_t>(9) + Le<uint32_t>(6) + Le<uint64_t>(1ull << 50),
            "array of 1125899906842624 elements");
  ExpectBad("elemtype.gguf",
            Header(0, 1) + Str("k") + Le<uint32_t>(9) + Le<uint32_t>(77) + Le<uint64_t>(0),
            "unknown array element type 77");
  std::string deep = Header(0, 1) + Str("k") + Le<uint32_t>(9);
  for (int i = 0; i < 6; ++i) deep += Le<uint32_t>(9) + Le<uint64_t>(1);
  ExpectBad("deep.gguf", deep + std::string(64, '\0'), "arrays nest deeper than 4");
  ExpectBad("u64.gguf", Header(0, 1) + Str("k") + Le<uint32_t>(10) + Le<uint64_t>(~0ull),
            "does not fit in int64");
  ExpectBad("bool.gguf", Header(0, 1) + Str("k") + Le<uint32_t>(7) + Le<uint8_t>(2),
            "bool value 2");
  ExpectBad("dupkey.gguf", GgufBuilder().U32("k", 1).U32("k", 2).Build(),
            "metadata key 'k' at offset");
  ExpectBad("align.gguf", GgufBuilder().U32("general.alignment", 48).Build(),
            "general.alignment must be an integer power of two");
  ExpectBad("alignstr.gguf", GgufBuilder().String("general.alignment", "32").Build(),
            "general.alignment must be an integer");

  // Tensor infos.
  ExpectBad("past.gguf",
            GgufBuilder().Tensor("w", {4, 4}, 0, std::string(8, '\0')).Build().substr(0, 104),
            "tensor 'w': 64 bytes at data offset 0 run past the end of the file");
  ExpectBad("dims.gguf", Header(1, 0) + Str("w") + Le<uint32_t>(7) + std::string(64, '\0'),
            "tensor 'w': 7 dimensions (1..4 allowed)");
  ExpectBad("dims0.gguf", Header(1, 0) + Str("w") + Le<uint32_t>(0) + std::string(64, '\0'),
            "tensor 'w': 0 dimensions");
  ExpectBad(
      "absurd_dim.gguf",
      Header(1, 0) + Str("w") + Le<uint32_t>(1) + Le<uint64_t>(1ull << 50) + std::string(64, '\0'),
      "dimension 1125899906842624 is absurd");
  ExpectBad(
      "overflow.gguf",
      GgufBuilder().Tensor("w", {1ull << 40, 1ull << 40, 1ull << 40, 1ull << 40}, 0, "").Build(),
      "tensor 'w': element count overflows");
  ExpectBad("duptensor.gguf",
            GgufBuilder().Tensor("w", {1}, 0, Le(1.f)).Tensor("w", {1}, 0, Le(2.f)).Build(),
            "tensor 'w': name is repeated");
  {
    std::string t = Header(1, 0) + Str("w") + Le<uint32_t>(1) + Le<uint64_t>(1) + Le<uint32_t>(0) +
                    Le<uint64_t>(4);  // offset 4 is not a multiple of 32
    t.resize(128, '\0');
    ExpectBad("misaligned.gguf", t, "data offset 4 is not a multiple of the alignment 32");
  }
  {
    std::string t = Header(1, 0) + Str("w") + Le<uint32_t>(1) + Le<uint64_t>(1) + Le<uint32_t>(0) +
                    Le<uint64_t>(1ull << 40);
    t.resize(128, '\0');
    ExpectBad("offset.gguf", t, "data offset 1099511627776 is past the end of the data section");
  }
  ExpectBad("qblock.gguf", GgufBuilder().Tensor("q", {33}, 2, std::string(40, '\0')).Build(),
            "ne[0] = 33 is not a multiple of the Q4_0 block size 32");
  ExpectBad("qpast.gguf", GgufBuilder().Tensor("q", {32, 4}, 8, std::string(34, '\0')).Build(),
            "tensor 'q': 136 bytes at data offset 0 run past the end");
}

TEST(GgmlTypeNameTest, NamesKnownTypes) {
  EXPECT_EQ(GgmlTypeName(0), "F32");
  EXPECT_EQ(GgmlTypeName(1), "F16");
  EXPECT_EQ(GgmlTypeName(2), "Q4_0");
  EXPECT_EQ(GgmlTypeName(14), "Q6_K");
  EXPECT_EQ(GgmlTypeName(30), "BF16");
  EXPECT_EQ(GgmlTypeName(999), "type 999");
}

}  // namespace
}  // namespace specdec::io
