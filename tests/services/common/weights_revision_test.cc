// WeightsRevision: a content hash of a checkpoint's *.safetensors files.
#include "services/common/weights_revision.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace specdec::services {
namespace {

namespace fs = std::filesystem;

class WeightsRevisionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "/weights_revision." + std::to_string(::getpid());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void Write(const std::string& name, const std::string& bytes) {
    std::ofstream(dir_ + "/" + name, std::ios::binary) << bytes;
  }
  std::string dir_;
};

TEST_F(WeightsRevisionTest, TheSameBytesGiveTheSameRevisionAndAnyChangeAnother) {
  const std::string weights(3 * 1000 * 1000 + 5, 'w');  // several read chunks and a tail
  Write("model.safetensors", weights);
  Write("config.json", "{}");
  auto a = WeightsRevision(dir_);
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->size(), 16u);
  EXPECT_EQ(*WeightsRevision(dir_), *a) << "not reproducible";
  Write("config.json", "{\"other\": 1}");
  EXPECT_EQ(*WeightsRevision(dir_), *a) << "only the weights count";
  std::string changed = weights;
  changed[2 * 1000 * 1000] = 'x';
  Write("model.safetensors", changed);
  EXPECT_NE(*WeightsRevision(dir_), *a) << "one byte changed";
  Write("model.safetensors", weights + std::string(1, '\0'));
  EXPECT_NE(*WeightsRevision(dir_), *a) << "a zero byte appended";
  Write("model.safetensors", weights);
  Write("model-2.safetensors", "more");
  EXPECT_NE(*WeightsRevision(dir_), *a) << "a second shard";
  EXPECT_EQ(*WeightsRevision(dir_ + "/model.safetensors"),
            *WeightsRevision(dir_ + "/model.safetensors"));
}

TEST_F(WeightsRevisionTest, NoWeightsIsNotFound) {
  Write("config.json", "{}");
  EXPECT_EQ(WeightsRevision(dir_).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(WeightsRevision(dir_ + "/missing").status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace specdec::services
