// ConfigureKernelCache: bounds oneDNN's kernel caches through their environment variables,
// leaving values the operator set alone.
#include "common/model/runtime.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

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

}  // namespace
}  // namespace specdec::model
