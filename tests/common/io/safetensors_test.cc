// safetensors: round trips, sharded checkpoints, and every malformed-file case giving an error
// that names the file and the problem.
#include "common/io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/util/status_matchers.h"

namespace specdec::io {
namespace {

namespace fs = std::filesystem;

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("specdec_st_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes 8-byte length + header + data bytes.
  std::string WriteRaw(const std::string& name, const std::string& header, const std::string& data,
                       int64_t len_override = -1) {
    const std::string p = (dir_ / name).string();
    std::ofstream out(p, std::ios::binary);
    uint64_t len = len_override >= 0 ? static_cast<uint64_t>(len_override) : header.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out << header << data;
    return p;
  }
  fs::path dir_;
};

template <typename T>
std::span<const std::byte> Bytes(const std::vector<T>& v) {
  return std::span<const std::byte>(reinterpret_cast<const std::byte*>(v.data()),
                                    v.size() * sizeof(T));
}

TEST_F(SafetensorsTest, WriteThenReadRoundTrips) {
  std::vector<float> a = {1.5f, -2.f, 3.25f, 0.f, 7.f, 8.f};
  std::vector<uint16_t> b = {0x3f80, 0x4000, 0xbf80};  // bf16 1, 2, -1
  std::vector<int64_t> c = {42};
  std::vector<int32_t> empty;
  const std::string p = (dir_ / "model.safetensors").string();
  SPECDEC_ASSERT_OK(WriteSafetensors(p,
                                     {{"a", DType::kF32, {2, 3}, Bytes(a)},
                                      {"b", DType::kBF16, {3}, Bytes(b)},
                                      {"scalar", DType::kI64, {}, Bytes(c)},
                                      {"empty", DType::kI32, {0, 4}, Bytes(empty)}},
                                     {{"format", "pt"}}));
  // Header + 8-byte length is 8-byte aligned.
  std::ifstream in(p, std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  EXPECT_EQ((8 + len) % 8, 0u);

  SPECDEC_ASSERT_OK_AND_ASSIGN(auto f, SafetensorsFile::Open(p));
  ASSERT_EQ(f->tensors().size(), 4u);
  const TensorView& ta = f->tensors().at("a");
  EXPECT_EQ(ta.dtype, DType::kF32);
  EXPECT_EQ(ta.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta.numel(), 6);
  std::vector<float> back(6);
  std::memcpy(back.data(), ta.data, 24);
  EXPECT_EQ(back, a);
  EXPECT_EQ(f->tensors().at("b").dtype, DType::kBF16);
  EXPECT_EQ(f->tensors().at("scalar").shape.size(), 0u);
  EXPECT_EQ(f->tensors().at("empty").nbytes, 0u);
  EXPECT_EQ(f->metadata().at("format"), "pt");

  SPECDEC_ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(dir_.string()));
  EXPECT_TRUE(ck->Has("a"));
  EXPECT_EQ(ck->Names(), (std::vector<std::string>{"a", "b", "empty", "scalar"}));
  SPECDEC_EXPECT_STATUS(ck->Get("nope"), absl::StatusCode::kNotFound, "'nope'");
}

TEST_F(SafetensorsTest, WriterRejectsInconsistentTensors) {
  std::vector<float> a = {1.f, 2.f};
  SPECDEC_EXPECT_STATUS(
      WriteSafetensors((dir_ / "x.safetensors").string(), {{"a", DType::kF32, {3}, Bytes(a)}}),
      absl::StatusCode::kInvalidArgument, "do not match");
  SPECDEC_EXPECT_STATUS(
      WriteSafetensors((dir_ / "x.safetensors").string(),
                       {{"a", DType::kF32, {2}, Bytes(a)}, {"a", DType::kF32, {2}, Bytes(a)}}),
      absl::StatusCode::kInvalidArgument, "repeated");
}

TEST_F(SafetensorsTest, ShardedCheckpointWithIndex) {
  std::vector<float> a = {1.f, 2.f}, b = {3.f};
  SPECDEC_ASSERT_OK(WriteSafetensors((dir_ / "model-00001-of-00002.safetensors").string(),
                                     {{"w.a", DType::kF32, {2}, Bytes(a)}}));
  SPECDEC_ASSERT_OK(WriteSafetensors((dir_ / "model-00002-of-00002.safetensors").string(),
                                     {{"w.b", DType::kF32, {1}, Bytes(b)}}));
  std::ofstream(dir_ / "model.safetensors.index.json")
      << R"({"metadata":{"total_size":12},"weight_map":{"w.a":"model-00001-of-00002.safetensors",
            "w.b":"model-00002-of-00002.safetensors"}})";
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(dir_.string()));
  SPECDEC_ASSERT_OK_AND_ASSIGN(TensorView vb, ck->Get("w.b"));
  float x;
  std::memcpy(&x, vb.data, 4);
  EXPECT_EQ(x, 3.f);
  // An index naming a missing shard.
  std::ofstream(dir_ / "model.safetensors.index.json", std::ios::trunc)
      << R"({"weight_map":{"w.a":"model-00001-of-00002.safetensors","w.c":"gone.safetensors"}})";
  SPECDEC_EXPECT_STATUS(Checkpoint::Open(dir_.string()), absl::StatusCode::kNotFound,
                        "shard 'gone.safetensors' is listed but missing");
  // An index mapping a tensor to a shard that lacks it.
  std::ofstream(dir_ / "model.safetensors.index.json", std::ios::trunc)
      << R"({"weight_map":{"w.b":"model-00001-of-00002.safetensors"}})";
  SPECDEC_EXPECT_STATUS(Checkpoint::Open(dir_.string()), absl::StatusCode::kInvalidArgument,
                        "does not contain it");
  std::ofstream(dir_ / "model.safetensors.index.json", std::ios::trunc)
      << R"({"weight_map":{"w.b":"../etc/passwd"}})";
  SPECDEC_EXPECT_STATUS(Checkpoint::Open(dir_.string()), absl::StatusCode::kInvalidArgument,
                        "plain file name");
}

TEST_F(SafetensorsTest, MissingFilesAreNotFound) {
  SPECDEC_EXPECT_STATUS(Checkpoint::Open(dir_.string()), absl::StatusCode::kNotFound,
                        "no model.safetensors");
  SPECDEC_EXPECT_STATUS(SafetensorsFile::Open((dir_ / "none.safetensors").string()),
                        absl::StatusCode::kNotFound, "none.safetensors");
}

TEST_F(SafetensorsTest, MalformedFilesGiveClearErrors) {
  const auto bad = absl::StatusCode::kInvalidArgument;
  {
    const std::string p = (dir_ / "short.safetensors").string();
    std::ofstream(p) << "abc";
    SPECDEC_EXPECT_STATUS(SafetensorsFile::Open(p), bad, "short.safetensors: file is 3 bytes");
  }
  SPECDEC_EXPECT_STATUS(SafetensorsFile::Open(WriteRaw("huge.st", "{}", "", 1ll << 40)), bad,
                        "header too large");
  SPECDEC_EXPECT_STATUS(SafetensorsFile::Open(WriteRaw("trunc.st", "{}", "", 5000)), bad,
                        "exceeds the file size");
  SPECDEC_EXPECT_STATUS(SafetensorsFile::Open(WriteRaw("json.st", "{not json", "")), bad,
                        "json.st: header is not a valid JSON object");
  SPECDEC_EXPECT_STATUS(SafetensorsFile::Open(WriteRaw("arr.st", "[1,2]", "")), bad,
                        "not a valid JSON object");
  SPECDEC_EXPECT_STATUS(
      SafetensorsFile::Open(WriteRaw("nodtype.st", R"({"w":{"shape":[1],"data_offsets":[0,4]}})",
                                     std::string(4, '\0'))),
      bad, "tensor 'w': entry needs dtype, shape and data_offsets");
  SPECDEC_EXPECT_STATUS(SafetensorsFile::Open(WriteRaw(
                            "dtype.st", R"({"w":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}})",
                            std::string(4, '\0'))),
                        bad, "unknown dtype 'F12'");
  SPECDEC_EXPECT_STATUS(SafetensorsFile::Open(WriteRaw(
                            "neg.st", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})",
                            std::string(4, '\0'))),
                        bad, "negative dimension or overflows");
  SPECDEC_EXPECT_STATUS(
      SafetensorsFile::Open(
          WriteRaw("overflow.st",
                   R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})",
                   std::string(4, '\0'))),
      bad, "overflows");
  SPECDEC_EXPECT_STATUS(SafetensorsFile::Open(WriteRaw(
                            "order.st", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})",
                            std::string(4, '\0'))),
                        bad, "begin 4 > end 0");
  SPECDEC_EXPECT_STATUS(
      SafetensorsFile::Open(
          WriteRaw("beyond.st", R"({"w":{"dtype":"F32","shape":[250],"data_offsets":[0,1000]}})",
                   std::string(16, '\0'))),
      bad, "beyond.st: tensor 'w': data_offsets end 1000 exceeds data section size 16");
  SPECDEC_EXPECT_STATUS(SafetensorsFile::Open(WriteRaw(
                            "size.st", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})",
                            std::string(8, '\0'))),
                        bad, "holds 8 bytes but shape and dtype F32 need 12");
  SPECDEC_EXPECT_STATUS(
      SafetensorsFile::Open(WriteRaw("overlap.st",
                                     R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
              "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                                     std::string(12, '\0'))),
      bad, "overlap");
  SPECDEC_EXPECT_STATUS(SafetensorsFile::Open(WriteRaw(
                            "offsets.st", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})",
                            std::string(4, '\0'))),
                        bad, "data_offsets must be [begin, end]");
}

}  // namespace
}  // namespace specdec::io
