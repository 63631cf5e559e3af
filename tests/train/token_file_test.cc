#include "train/token_file.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/util/status_matchers.h"
#include "train/progress.h"

namespace specdec::train {
namespace {

TEST(TokenFileTest, RoundTripAndCorruption) {
  const std::string path = testing::TempDir() + "/t.tok";
  std::vector<int32_t> ids = {0, 1, 4095, 7, 7, 3};
  SPECDEC_ASSERT_OK(WriteTokenFile(path, ids));
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto back, ReadTokenFile(path));
  EXPECT_EQ(back, ids);
  {
    std::ofstream out(path, std::ios::binary | std::ios::app);
    out << "xx";
  }
  EXPECT_EQ(ReadTokenFile(path).status().code(), absl::StatusCode::kInvalidArgument);
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << "not a token file at all";
  }
  EXPECT_EQ(ReadTokenFile(path).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadTokenFile(path + ".missing").status().code(), absl::StatusCode::kNotFound);
}

TEST(ProgressTest, FormatsBarRateAndEta) {
  const std::string line = Progress::Format("lm", 50, 100, 5.0, "loss 2.000");
  EXPECT_NE(line.find("[############............]"), std::string::npos) << line;
  EXPECT_NE(line.find("50/100"), std::string::npos);
  EXPECT_NE(line.find("5.00 it/s"), std::string::npos);
  EXPECT_NE(line.find("ETA 00:10"), std::string::npos);
  EXPECT_NE(line.find("loss 2.000"), std::string::npos);
  EXPECT_NE(Progress::Format("x", 0, 100000, 1.0, "").find("ETA 27:46:40"), std::string::npos);
}

}  // namespace
}  // namespace specdec::train
