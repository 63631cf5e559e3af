// GgufWriter: what it writes reads back through GgufFile (every value type, tensor shapes, types,
// bytes and aligned offsets), and bad input is refused before anything is written.
#include "common/io/gguf_writer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "common/io/gguf.h"
#include "common/util/status_matchers.h"

namespace specdec::io {
namespace {

namespace fs = std::filesystem;

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() /
          ("specdec_gguf_writer_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(GgufWriterTest, WhatIsWrittenReadsBack) {
  const std::vector<float> a = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, 8.0f};  // ne [3, 2]
  const std::vector<uint16_t> b = {0x3f80, 0x4000, 0xc040};             // BF16 1, 2, -3
  GgufWriter w;
  w.SetString("general.architecture", "qwen3");
  w.SetU32("qwen3.block_count", 8);
  w.SetI32("x.negative", -5);
  w.SetF32("qwen3.rope.freq_base", 10000.0f);
  w.SetBool("tokenizer.ggml.add_bos_token", true);
  w.SetStringArray("tokenizer.ggml.tokens", {"a", "Ġb", "<|eos|>"});
  w.SetF32Array("x.floats", {0.5f, -1.0f});
  w.SetI32Array("tokenizer.ggml.token_type", {1, 1, 3});
  w.AddTensor("t.a", {3, 2}, kGgmlTypeF32,
              std::as_bytes(std::span<const float>(a.data(), a.size())));
  w.AddTensor("t.b", {3}, kGgmlTypeBF16,
              std::as_bytes(std::span<const uint16_t>(b.data(), b.size())));
  const std::string path = TempPath("reads_back.gguf");
  SPECDEC_ASSERT_OK(w.Write(path));

  SPECDEC_ASSERT_OK_AND_ASSIGN(auto g, GgufFile::Open(path));
  EXPECT_EQ(g->version(), 3u);
  EXPECT_EQ(*g->GetString("general.architecture"), "qwen3");
  EXPECT_EQ(*g->GetInt("qwen3.block_count"), 8);
  EXPECT_EQ(*g->GetInt("x.negative"), -5);
  EXPECT_EQ(*g->GetFloat("qwen3.rope.freq_base"), 10000.0);
  EXPECT_TRUE(*g->GetBool("tokenizer.ggml.add_bos_token"));
  EXPECT_EQ(*g->GetStringArray("tokenizer.ggml.tokens"),
            (std::vector<std::string>{"a", "Ġb", "<|eos|>"}));
  EXPECT_EQ(*g->GetFloatArray("x.floats"), (std::vector<double>{0.5, -1.0}));
  EXPECT_EQ(*g->GetIntArray("tokenizer.ggml.token_type"), (std::vector<int64_t>{1, 1, 3}));
  ASSERT_EQ(g->tensor_names(), (std::vector<std::string>{"t.a", "t.b"}));
  SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor ta, g->Tensor("t.a"));
  EXPECT_EQ(ta.ne, (std::vector<int64_t>{3, 2}));
  ASSERT_EQ(ta.nbytes, a.size() * 4);
  EXPECT_EQ(std::memcmp(ta.data, a.data(), ta.nbytes), 0);
  SPECDEC_ASSERT_OK_AND_ASSIGN(GgufTensor tb, g->Tensor("t.b"));
  EXPECT_EQ(tb.ggml_type, kGgmlTypeBF16);
  ASSERT_EQ(tb.nbytes, 6u);
  EXPECT_EQ(std::memcmp(tb.data, b.data(), 6), 0);
  EXPECT_EQ(g->tensor_infos()[1].offset % 32, 0u);  // each tensor starts aligned
  fs::remove(path);
}

TEST(GgufWriterTest, BadInputIsRefusedAndNothingIsWritten) {
  const std::vector<float> a = {1.0f, 2.0f};
  const auto bytes = std::as_bytes(std::span<const float>(a.data(), a.size()));
  const std::string path = TempPath("refused.gguf");
  {
    GgufWriter w;
    w.SetU32("k", 1);
    w.SetU32("k", 2);
    SPECDEC_EXPECT_STATUS(w.Write(path), absl::StatusCode::kInvalidArgument, "'k' set twice");
  }
  {
    GgufWriter w;
    w.AddTensor("t", {3}, kGgmlTypeF32, bytes);  // 2 floats for 3 elements
    SPECDEC_EXPECT_STATUS(w.Write(path), absl::StatusCode::kInvalidArgument,
                          "tensor 't' has 8 bytes for 3 elements of F32");
  }
  {
    GgufWriter w;
    w.AddTensor("t", {2}, kGgmlTypeF32, bytes);
    w.AddTensor("t", {2}, kGgmlTypeF32, bytes);
    SPECDEC_EXPECT_STATUS(w.Write(path), absl::StatusCode::kInvalidArgument, "'t' added twice");
  }
  {
    GgufWriter w;
    w.AddTensor("q", {8}, 2 /* Q4_0 */, bytes);
    SPECDEC_EXPECT_STATUS(w.Write(path), absl::StatusCode::kInvalidArgument, "Q4_0");
  }
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace specdec::io
