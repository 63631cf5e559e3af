#include "common/model/huge_pages.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>

namespace specdec::model {
namespace {

constexpr uintptr_t kHugePage = uintptr_t{2} << 20;

uintptr_t Address(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }

class HugePagesTest : public testing::Test {
 protected:
  void SetUp() override { unsetenv("SPECDEC_HUGE_PAGES"); }
  void TearDown() override { unsetenv("SPECDEC_HUGE_PAGES"); }
};

TEST_F(HugePagesTest, MovesWholeTensorsKeepingValuesAndSharing) {
  at::manual_seed(3);
  at::Tensor matrix = at::randn({1000, 300});
  at::Tensor tied = matrix;  // one storage, two tensors: a tied embedding and LM head
  at::Tensor norm = at::randn({300}).to(at::kBFloat16);
  at::Tensor base = at::randn({10, 10});
  at::Tensor view = base.narrow(0, 2, 3);  // part of its storage: stays where it is
  at::Tensor undefined;
  const at::Tensor matrix_before = matrix.clone(), norm_before = norm.clone();
  const uintptr_t view_before = Address(view), matrix_at = Address(matrix);

  const int64_t moved = MoveIntoHugePages({&matrix, &tied, &norm, &view, &undefined});

  EXPECT_TRUE(at::equal(matrix, matrix_before));
  EXPECT_TRUE(at::equal(norm, norm_before));
  EXPECT_EQ(norm.scalar_type(), at::kBFloat16);
  EXPECT_EQ(Address(matrix), Address(tied));
  EXPECT_EQ(Address(view), view_before);
  EXPECT_FALSE(undefined.defined());
  if (!HugePagesAvailable()) {
    EXPECT_EQ(moved, 0);
    EXPECT_EQ(Address(matrix), matrix_at);
    GTEST_SKIP() << "transparent huge pages are off on this machine: nothing moves";
  }
  // Each storage once, 64-byte aligned: 1,200,000 bytes and 600 rounded up to 640.
  EXPECT_EQ(moved, 1000 * 300 * 4 + 640);
  EXPECT_EQ(Address(matrix) % kHugePage, 0u);
  EXPECT_EQ(Address(norm), Address(matrix) + 1000 * 300 * 4);
}

TEST_F(HugePagesTest, TheBufferLivesAsLongAsItsLastTensor) {
  at::Tensor a = at::full({4096, 64}, 1.5f), b = at::arange(100000, at::kFloat);
  const at::Tensor b_before = b.clone();
  MoveIntoHugePages({&a, &b});
  a = at::Tensor();  // the first tensor goes; the second still reads its copy
  EXPECT_TRUE(at::equal(b, b_before));
  b.add_(1);  // and may write it
  EXPECT_EQ(b[99999].item<float>(), 100000.0f);
}

TEST_F(HugePagesTest, TurnedOffByTheEnvironment) {
  setenv("SPECDEC_HUGE_PAGES", "0", 1);
  EXPECT_FALSE(HugePagesAvailable());
  at::Tensor a = at::ones({512, 512});
  const uintptr_t before = Address(a);
  EXPECT_EQ(MoveIntoHugePages({&a}), 0);
  EXPECT_EQ(Address(a), before);
}

}  // namespace
}  // namespace specdec::model
