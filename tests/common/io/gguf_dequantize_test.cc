// Dequantize against ggml's own code: tests/data/ggml_quants holds a few float rows, the blocks
// ggml_quantize_chunk made of them for each block type, and the floats ggml's to_float made of
// those blocks (llama.cpp v0.4.0; make_fixtures.sh there). Every value must match bit for bit, read
// directly and through a GGUF file; bad arguments are refused.
#include "common/io/gguf_dequantize.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "common/io/gguf.h"
#include "common/io/safetensors.h"
#include "common/util/status_matchers.h"
#include "tests/common/io/gguf_builder.h"

namespace specdec::io {
namespace {

namespace fs = std::filesystem;

const fs::path kFixture =
    fs::path(SPECDEC_SOURCE_DIR) / "tests/data/ggml_quants/quants.safetensors";

struct BlockType {
  const char* name;
  int ggml_type;
};
constexpr BlockType kTypes[] = {{"Q4_0", kGgmlTypeQ4_0}, {"Q4_1", kGgmlTypeQ4_1},
                                {"Q5_0", kGgmlTypeQ5_0}, {"Q5_1", kGgmlTypeQ5_1},
                                {"Q8_0", kGgmlTypeQ8_0}, {"Q4_K", kGgmlTypeQ4_K},
                                {"Q5_K", kGgmlTypeQ5_K}, {"Q6_K", kGgmlTypeQ6_K}};

std::vector<float> FloatsOf(const TensorView& v) {
  std::vector<float> out(v.nbytes / sizeof(float));
  std::memcpy(out.data(), v.data, v.nbytes);
  return out;
}

void ExpectBitsEqual(const std::vector<float>& got, const std::vector<float>& want,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
        << what << " value " << i << ": " << got[i] << " against ggml's " << want[i];
  }
}

TEST(GgufDequantizeTest, EqualsGgmlForEveryBlockType) {
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto file, SafetensorsFile::Open(kFixture.string()));
  const auto& t = file->tensors();
  const std::vector<float> source = FloatsOf(t.at("source"));
  ASSERT_EQ(source.size(), 1024u);
  for (const BlockType& type : kTypes) {
    const TensorView& blocks = t.at(std::string(type.name) + ".blocks");
    const std::vector<float> want = FloatsOf(t.at(std::string(type.name) + ".values"));
    std::vector<float> got(want.size());
    SPECDEC_ASSERT_OK(Dequantize(type.ggml_type, {blocks.data, blocks.nbytes}, got));
    ExpectBitsEqual(got, want, type.name);
    // The values quantize the source: each within an eighth of its block's largest magnitude
    // (the coarsest step, Q4_0's), and the zero block stays zero.
    for (size_t block = 0; block < source.size() / 32; ++block) {
      float amax = 0;
      for (size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(source[block * 32 + j]));
      for (size_t j = 0; j < 32; ++j) {
        const size_t i = block * 32 + j;
        EXPECT_LE(std::fabs(got[i] - source[i]), amax / 8 + 1e-6f) << type.name << " value " << i;
      }
    }
  }
}

TEST(GgufDequantizeTest, ReadsBlockTensorsFromAGgufFile) {
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto file, SafetensorsFile::Open(kFixture.string()));
  testing::GgufBuilder b;
  for (const BlockType& type : kTypes) {
    const TensorView& blocks = file->tensors().at(std::string(type.name) + ".blocks");
    b.Tensor(type.name, {256, 4}, static_cast<uint32_t>(type.ggml_type),
             std::string(reinterpret_cast<const char*>(blocks.data), blocks.nbytes));
  }
  const fs::path path =
      fs::temp_directory_path() / ("specdec_dequantize_" + std::to_string(::getpid()) + ".gguf");
  std::ofstream(path, std::ios::binary) << b.Build();
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto g, GgufFile::Open(path.string()));
  for (const BlockType& type : kTypes) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor t, g->Tensor(type.name));
    EXPECT_EQ(t.ggml_type, type.ggml_type);
    std::vector<float> got(1024);
    SPECDEC_ASSERT_OK(Dequantize(t.ggml_type, {t.data, t.nbytes}, got));
    ExpectBitsEqual(got, FloatsOf(file->tensors().at(std::string(type.name) + ".values")),
                    type.name);
  }
  fs::remove(path);
}

TEST(GgufDequantizeTest, RefusesOtherTypesAndPartialBlocks) {
  std::vector<std::byte> blocks(34);
  std::vector<float> out(32);
  EXPECT_TRUE(IsDequantizable(kGgmlTypeQ8_0));
  EXPECT_TRUE(IsDequantizable(kGgmlTypeQ6_K));
  EXPECT_FALSE(IsDequantizable(10));  // Q2_K
  EXPECT_FALSE(IsDequantizable(0));   // F32 needs no dequantization
  SPECDEC_EXPECT_STATUS(Dequantize(10, blocks, out), absl::StatusCode::kInvalidArgument,
                        "not a block type");
  std::vector<float> partial(31);
  SPECDEC_EXPECT_STATUS(Dequantize(kGgmlTypeQ8_0, blocks, partial),
                        absl::StatusCode::kInvalidArgument, "not whole blocks");
  SPECDEC_EXPECT_STATUS(Dequantize(kGgmlTypeQ4_0, blocks, out), absl::StatusCode::kInvalidArgument,
                        "of 18 bytes");
  SPECDEC_EXPECT_OK(Dequantize(kGgmlTypeQ8_0, blocks, out));
}

}  // namespace
}  // namespace specdec::io
