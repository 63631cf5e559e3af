// safetensors: round trips, sharded checkpoints, and every malformed-file case giving an error
// that names the file and the problem.
#include "common/io/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <tuple>

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
  std::vector<uint16_t> h = {0x3c00, 0xc000};  // f16 1, -2
  std::vector<double> dbl = {1e-300, -2.5};
  std::vector<uint8_t> flags = {1, 0, 1};
  std::vector<int8_t> small = {-128, 127};
  std::vector<int16_t> mid = {-32768, 1, 32767};
  const std::string p = (dir_ / "model.safetensors").string();
  SPECDEC_ASSERT_OK(WriteSafetensors(p,
                                     {{"a", DType::kF32, {2, 3}, Bytes(a)},
                                      {"b", DType::kBF16, {3}, Bytes(b)},
                                      {"scalar", DType::kI64, {}, Bytes(c)},
                                      {"empty", DType::kI32, {0, 4}, Bytes(empty)},
                                      {"h", DType::kF16, {1, 2}, Bytes(h)},
                                      {"d", DType::kF64, {2}, Bytes(dbl)},
                                      {"flags", DType::kBool, {3}, Bytes(flags)},
                                      {"u", DType::kU8, {3, 1}, Bytes(flags)},
                                      {"i8", DType::kI8, {2}, Bytes(small)},
                                      {"i16", DType::kI16, {3}, Bytes(mid)}},
                                     {{"format", "pt"}, {"note", "x y"}}));
  EXPECT_FALSE(fs::exists(p + ".tmp"));
  // Header + 8-byte length is 8-byte aligned.
  std::ifstream in(p, std::ios::binary);
  uint64_t len = 0;
  in.read(reinterpret_cast<char*>(&len), 8);
  EXPECT_EQ((8 + len) % 8, 0u);

  SPECDEC_ASSERT_OK_AND_ASSIGN(auto f, SafetensorsFile::Open(p));
  ASSERT_EQ(f->tensors().size(), 10u);
  const TensorView& ta = f->tensors().at("a");
  EXPECT_EQ(ta.dtype, DType::kF32);
  EXPECT_EQ(ta.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ta.numel(), 6);
  std::vector<float> back(6);
  std::memcpy(back.data(), ta.data, 24);
  EXPECT_EQ(back, a);
  EXPECT_EQ(f->tensors().at("b").dtype, DType::kBF16);
  EXPECT_EQ(f->tensors().at("scalar").shape.size(), 0u);
  EXPECT_EQ(f->tensors().at("scalar").numel(), 1);
  EXPECT_EQ(std::memcmp(f->tensors().at("scalar").data, c.data(), 8), 0);
  EXPECT_EQ(f->tensors().at("empty").nbytes, 0u);
  EXPECT_EQ(f->tensors().at("empty").numel(), 0);
  EXPECT_EQ(f->tensors().at("empty").shape, (std::vector<int64_t>{0, 4}));
  // Every other tensor reads back with its dtype, shape and exact bytes.
  const std::vector<
      std::tuple<std::string, DType, std::vector<int64_t>, std::span<const std::byte>>>
      want = {{"b", DType::kBF16, {3}, Bytes(b)},      {"h", DType::kF16, {1, 2}, Bytes(h)},
              {"d", DType::kF64, {2}, Bytes(dbl)},     {"flags", DType::kBool, {3}, Bytes(flags)},
              {"u", DType::kU8, {3, 1}, Bytes(flags)}, {"i8", DType::kI8, {2}, Bytes(small)},
              {"i16", DType::kI16, {3}, Bytes(mid)}};
  for (const auto& [name, dtype, shape, bytes] : want) {
    const TensorView& v = f->tensors().at(name);
    EXPECT_EQ(v.name, name);
    EXPECT_EQ(v.dtype, dtype) << name;
    EXPECT_EQ(v.shape, shape) << name;
    ASSERT_EQ(v.nbytes, bytes.size()) << name;
    EXPECT_EQ(std::memcmp(v.data, bytes.data(), bytes.size()), 0) << name;
  }
  EXPECT_EQ(f->metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "x y"}}));

  SPECDEC_ASSERT_OK_AND_ASSIGN(auto ck, Checkpoint::Open(dir_.string()));
  EXPECT_TRUE(ck->Has("a"));
  EXPECT_TRUE(ck->Has("flags"));
  EXPECT_FALSE(ck->Has("nope"));
  const std::vector<std::string> names = ck->Names();
  EXPECT_EQ(names.size(), 10u);
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  EXPECT_EQ(ck->dir(), dir_.string());
  SPECDEC_EXPECT_STATUS(ck->Get("nope"), absl::StatusCode::kNotFound,
                        dir_.string() + ": checkpoint has no tensor 'nope'");

  // Rewriting the same path replaces the file atomically.
  SPECDEC_ASSERT_OK(WriteSafetensors(p, {{"only", DType::kI64, {1}, Bytes(c)}}));
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto f2, SafetensorsFile::Open(p));
  EXPECT_EQ(f2->tensors().size(), 1u);
  EXPECT_TRUE(f2->metadata().empty());
}

TEST_F(SafetensorsTest, WriterRejectsInconsistentTensors) {
  std::vector<float> a = {1.f, 2.f};
  SPECDEC_EXPECT_STATUS(
      WriteSafetensors((dir_ / "x.safetensors").string(), {{"a", DType::kF32, {3}, Bytes(a)}}),
      absl::StatusCode::kInvalidArgument,
      "tensor 'a': 8 bytes do not match its shape and dtype F32");
  SPECDEC_EXPECT_STATUS(
      WriteSafetensors((dir_ / "x.safetensors").string(), {{"a", DType::kF32, {-2}, Bytes(a)}}),
      absl::StatusCode::kInvalidArgument, "do not match");
  SPECDEC_EXPECT_STATUS(WriteSafetensors((dir_ / "x.safetensors").string(),
                                         {{"__metadata__", DType::kF32, {2}, Bytes(a)}}),
                        absl::StatusCode::kInvalidArgument, "reserved");
  EXPECT_FALSE(fs::exists(dir_ / "x.safetensors"));
  EXPECT_FALSE(fs::exists(dir_ / "x.safetensors.tmp"));
  SPECDEC_EXPECT_STATUS(WriteSafetensors((dir_ / "no/such/dir/x.safetensors").string(), {}),
                        absl::StatusCode::kPermissionDenied, "cannot open for writing");
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
  EXPECT_EQ(ck->Names(), (std::vector<std::string>{"w.a", "w.b"}));
  SPECDEC_ASSERT_OK_AND_ASSIGN(TensorView va, ck->Get("w.a"));
  EXPECT_EQ(va.shape, (std::vector<int64_t>{2}));
  SPECDEC_ASSERT_OK_AND_ASSIGN(TensorView vb, ck->Get("w.b"));
  float x;
  std::memcpy(&x, vb.data, 4);
  EXPECT_EQ(x, 3.f);
  // An index naming a missing shard.
  std::ofstream(dir_ / "model.safetensors.index.json", std::ios::trunc)
      << R"({"weight_map":{"w.a":"model-00001-of-00002.safetensors","w.c":"gone.safetensors"}})";
  SPECDEC_EXPECT_STATUS(Checkpoint::Open(dir_.string()), absl::StatusCode::kNotFound,
                        (dir_ / "model.safetensors.index.json").string() +
                            ": shard 'gone.safetensors' is listed but missing");
  // An index mapping a tensor to a shard that lacks it.
  std::ofstream(dir_ / "model.safetensors.index.json", std::ios::trunc)
      << R"({"weight_map":{"w.b":"model-00001-of-00002.safetensors"}})";
  SPECDEC_EXPECT_STATUS(Checkpoint::Open(dir_.string()), absl::StatusCode::kInvalidArgument,
                        "does not contain it");
  std::ofstream(dir_ / "model.safetensors.index.json", std::ios::trunc)
      << R"({"weight_map":{"w.b":"../etc/passwd"}})";
  SPECDEC_EXPECT_STATUS(Checkpoint::Open(dir_.string()), absl::StatusCode::kInvalidArgument,
                        "plain file name");
  std::ofstream(dir_ / "model.safetensors.index.json", std::ios::trunc) << R"({"weight_map":[]})";
  SPECDEC_EXPECT_STATUS(Checkpoint::Open(dir_.string()), absl::StatusCode::kInvalidArgument,
                        "\"weight_map\" object");
  std::ofstream(dir_ / "model.safetensors.index.json", std::ios::trunc) << "{oops";
  SPECDEC_EXPECT_STATUS(Checkpoint::Open(dir_.string()), absl::StatusCode::kInvalidArgument,
                        "model.safetensors.index.json: index is not valid JSON");
}

TEST_F(SafetensorsTest, MissingFilesAreNotFound) {
  SPECDEC_EXPECT_STATUS(Checkpoint::Open(dir_.string()), absl::StatusCode::kNotFound,
                        "no model.safetensors");
  SPECDEC_EXPECT_STATUS(SafetensorsFile::Open((dir_ / "none.safetensors").string()),
                        absl::StatusCode::kNotFound, "none.safetensors");
}

TEST_F(SafetensorsTest, MalformedFilesGiveClearErrors) {
  // Each case: file name, header, data section, header-length override, expected message part.
  struct Case {
    const char* file;
    std::string header;
    std::string data;
    int64_t len;
    const char* want;
  };
  const std::string f4(4, '\0');
  const std::vector<Case> cases = {
      {"huge.st", "{}", "", 1ll << 40, "header too large: 1099511627776 bytes"},
      {"huge2.st", "{}", "", (100ll << 20) + 1, "header too large"},
      {"trunc.st", "{}", "", 5000, "header length 5000 exceeds the file size 10"},
      {"json.st", "{not json", "", -1, "header is not valid JSON"},
      {"arr.st", "[1,2]", "", -1, "header is not a JSON object"},
      {"entry.st", R"({"w":[1]})", "", -1, "tensor 'w': entry is not a JSON object"},
      {"nodtype.st", R"({"w":{"shape":[1],"data_offsets":[0,4]}})", f4, -1,
       "tensor 'w': entry lacks 'dtype'"},
      {"noshape.st", R"({"w":{"dtype":"F32","data_offsets":[0,4]}})", f4, -1,
       "tensor 'w': entry lacks 'shape'"},
      {"nooffsets.st", R"({"w":{"dtype":"F32","shape":[1]}})", f4, -1,
       "tensor 'w': entry lacks 'data_offsets'"},
      {"dtype.st", R"({"w":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}})", f4, -1,
       "tensor 'w': unknown dtype 'F12'"},
      {"dtypeint.st", R"({"w":{"dtype":7,"shape":[1],"data_offsets":[0,4]}})", f4, -1,
       "dtype must be a string"},
      {"neg.st", R"({"w":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", f4, -1,
       "tensor 'w': shape has a negative dimension"},
      {"floatdim.st", R"({"w":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", f4, -1,
       "shape entries must be integers"},
      {"overflow.st",
       R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,4]}})", f4, -1,
       "element count overflows"},
      {"bytesoverflow.st",
       R"({"w":{"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,4]}})", f4, -1,
       "byte size overflows"},
      {"hugedim.st", R"({"w":{"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,4]}})",
       f4, -1, "shape overflows int64"},
      {"order.st", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,0]}})", f4, -1,
       "tensor 'w': data_offsets begin 4 > end 0"},
      {"offsets.st", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0]}})", f4, -1,
       "tensor 'w': data_offsets must be [begin, end]"},
      {"negoff.st", R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[-4,0]}})", f4, -1,
       "data_offsets must be [begin, end] with non-negative integers"},
      {"beyond.st", R"({"w":{"dtype":"F32","shape":[250],"data_offsets":[0,1000]}})",
       std::string(16, '\0'), -1, "tensor 'w': data_offsets end 1000 exceeds data section size 16"},
      {"size.st", R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0'),
       -1, "tensor 'w': data_offsets span 8 bytes but shape and dtype F32 need 12"},
      {"overlap.st",
       R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
           "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       std::string(12, '\0'), -1, "tensors 'a' [0, 8) and 'b' [4, 12) overlap"},
      {"same.st",
       R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},
           "b":{"dtype":"I32","shape":[1],"data_offsets":[0,4]}})",
       f4, -1, "tensors 'a' [0, 4) and 'b' [0, 4) overlap"},
      {"meta.st", R"({"__metadata__":{"k":1}})", "", -1, "__metadata__['k'] is not a string"},
  };
  for (const Case& c : cases) {
    const std::string p = WriteRaw(c.file, c.header, c.data, c.len);
    auto f = SafetensorsFile::Open(p);
    ASSERT_FALSE(f.ok()) << c.file << " opened";
    EXPECT_EQ(f.status().code(), absl::StatusCode::kInvalidArgument) << f.status();
    const std::string msg(f.status().message());
    EXPECT_EQ(msg.rfind(p + ": ", 0), 0u) << "message does not start with the path: " << msg;
    EXPECT_NE(msg.find(c.want), std::string::npos) << msg << "\n  lacks: " << c.want;
  }
  {
    const std::string p = (dir_ / "short.safetensors").string();
    std::ofstream(p) << "abc";
    SPECDEC_EXPECT_STATUS(SafetensorsFile::Open(p), absl::StatusCode::kInvalidArgument,
                          p + ": file is 3 bytes");
  }
  {
    const std::string p = (dir_ / "empty.safetensors").string();
    std::ofstream{p};
    SPECDEC_EXPECT_STATUS(SafetensorsFile::Open(p), absl::StatusCode::kInvalidArgument,
                          p + ": file is 0 bytes");
  }
  // A bad shard inside a checkpoint reports the shard's path.
  WriteRaw("model.safetensors", R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", f4);
  SPECDEC_EXPECT_STATUS(Checkpoint::Open(dir_.string()), absl::StatusCode::kInvalidArgument,
                        "model.safetensors: tensor 'w': data_offsets end 8 exceeds data section "
                        "size 4");
}

TEST(DTypeTest, NamesSizesAndParsingAgree) {
  const std::vector<std::tuple<DType, std::string, size_t>> all = {
      {DType::kF64, "F64", 8},   {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2},
      {DType::kBF16, "BF16", 2}, {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},
      {DType::kI16, "I16", 2},   {DType::kI8, "I8", 1},   {DType::kU8, "U8", 1},
      {DType::kBool, "BOOL", 1}};
  for (const auto& [dtype, name, size] : all) {
    EXPECT_EQ(DTypeName(dtype), name);
    EXPECT_EQ(DTypeSize(dtype), size) << name;
    SPECDEC_ASSERT_OK_AND_ASSIGN(DType parsed, ParseSafetensorsDType(name));
    EXPECT_EQ(parsed, dtype) << name;
  }
  SPECDEC_EXPECT_STATUS(ParseSafetensorsDType("f32"), absl::StatusCode::kInvalidArgument,
                        "unknown dtype 'f32'");
}

TEST_F(SafetensorsTest, MappedFileMapsBytesAndEmptyFiles) {
  const std::string p = (dir_ / "bytes.bin").string();
  std::ofstream(p, std::ios::binary) << "hello";
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto m, MappedFile::Open(p));
  ASSERT_EQ(m->size(), 5u);
  EXPECT_EQ(std::memcmp(m->data(), "hello", 5), 0);
  EXPECT_EQ(m->path(), p);
  const std::string e = (dir_ / "empty.bin").string();
  std::ofstream{e};
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto empty, MappedFile::Open(e));
  EXPECT_EQ(empty->size(), 0u);
  SPECDEC_EXPECT_STATUS(MappedFile::Open((dir_ / "nope.bin").string()), absl::StatusCode::kNotFound,
                        "nope.bin: cannot open");
  SPECDEC_EXPECT_STATUS(MappedFile::Open(dir_.string()), absl::StatusCode::kInvalidArgument,
                        "not a regular file");
}

}  // namespace
}  // namespace specdec::io
