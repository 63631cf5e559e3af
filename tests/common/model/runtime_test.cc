// ConfigureKernelCache: bounds oneDNN's kernel caches through their environment variables,
// leaving values the operator set alone. ConfigureComputeThreads: SPECDEC_MAX_COMPUTE_THREADS
// caps the count asked for.
#include "common/model/runtime.h"

#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "common/model/compute_pool.h"

namespace specdec::model {
namespace {

TEST(ConfigureKernelCacheTest, SetsBothCachesUnlessTheEnvironmentAlreadyDoes) {
  unsetenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY");
  unsetenv("LRU_CACHE_CAPACITY");
  EXPECT_EQ(ConfigureKernelCache(0), 0) << "0 leaves the library defaults";
  EXPECT_EQ(std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY"), nullptr);
  EXPECT_EQ(ConfigureKernelCache(96), 96);
  EXPECT_STREQ(std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY"), "96");
  EXPECT_STREQ(std::getenv("LRU_CACHE_CAPACITY"), "96");
  // An operator's setting wins.
  setenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "12", 1);
  setenv("LRU_CACHE_CAPACITY", "7", 1);
  EXPECT_EQ(ConfigureKernelCache(256), 12);
  EXPECT_STREQ(std::getenv("LRU_CACHE_CAPACITY"), "7");
}

TEST(ConfigureComputeThreadsTest, TheEnvironmentCapsTheCount) {
  unsetenv("SPECDEC_MAX_COMPUTE_THREADS");
  EXPECT_EQ(ConfigureComputeThreads(3), 3);
  setenv("SPECDEC_MAX_COMPUTE_THREADS", "2", 1);
  EXPECT_EQ(ConfigureComputeThreads(3), 2);
  EXPECT_EQ(ConfigureComputeThreads(1), 1) << "a cap is not a floor";
  setenv("SPECDEC_MAX_COMPUTE_THREADS", "junk", 1);
  EXPECT_EQ(ConfigureComputeThreads(3), 3) << "an unreadable cap is ignored";
  unsetenv("SPECDEC_MAX_COMPUTE_THREADS");
}

// Serving: the kernels' pool takes the count, ATen's own operators one thread. Training: both.
TEST(ConfigureComputeThreadsTest, AtenKeepsOneThreadUnlessTraining) {
  unsetenv("SPECDEC_MAX_COMPUTE_THREADS");
  EXPECT_EQ(ConfigureComputeThreads(3), 3);
  EXPECT_EQ(ComputeThreads(), 3);
  EXPECT_EQ(at::get_num_threads(), 1);
  EXPECT_EQ(ConfigureTrainingThreads(2), 2);
  EXPECT_EQ(ComputeThreads(), 2);
  EXPECT_EQ(at::get_num_threads(), 2);
  ConfigureComputeThreads(1);
}

}  // namespace
}  // namespace specdec::model
