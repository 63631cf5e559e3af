#include "common/model/parallel_linear.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "common/model/compute_pool.h"
#include "common/model/vec16.h"

namespace specdec::model {
namespace {

class ParallelLinearTest : public testing::Test {
 protected:
  void SetUp() override { threads_before_ = ComputeThreads(); }
  void TearDown() override { SetComputeThreads(threads_before_); }

 private:
  int threads_before_ = 1;
};

TEST_F(ParallelLinearTest, OutputBlocksCoverEveryOutputOnceFromMultiplesOf16) {
  for (int threads : {1, 2, 3}) {
    SetComputeThreads(threads);
    for (int64_t out : {16, 64, 80, 768, 1000}) {
      std::vector<std::atomic<int>> covered(static_cast<size_t>(out));
      ForEachOutputBlock(out, [&](int64_t o0, int64_t n) {
        ASSERT_EQ(o0 % 16, 0) << "a block starts inside a packed group of 16 outputs";
        ASSERT_GT(n, 0);
        ASSERT_LE(o0 + n, out);
        for (int64_t o = o0; o < o0 + n; ++o) covered[static_cast<size_t>(o)].fetch_add(1);
      });
      for (int64_t o = 0; o < out; ++o) {
        EXPECT_EQ(covered[static_cast<size_t>(o)].load(), 1)
            << "output " << o << " of " << out << ", " << threads << " threads";
      }
    }
  }
}

// Over the threads, a packed bf16 product gives every row the bits one thread's RunLinear gives.
TEST_F(ParallelLinearTest, ThreadsChangeNoBitOfAPackedProduct) {
  const int64_t in = 96, out = 208;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.f, 1.f);
  std::vector<uint16_t> w(in * out), packed(in * out);
  for (uint16_t& v : w) v = FloatToBf16(u(rng));
  const int32_t block = LinearPackBlock() > 0 ? LinearPackBlock() : 16;
  PackLinearWeights(w.data(), in, out, block, packed.data());
  for (int64_t rows : {1, 3, 17}) {
    std::vector<uint16_t> x(rows * in);
    for (uint16_t& v : x) v = FloatToBf16(u(rng));
    LinearProblem p;
    p.x = x.data();
    p.rows = rows;
    p.x_stride = in;
    p.w = packed.data();
    p.w_block = block;
    p.in = in;
    p.out = out;
    p.y_stride = out;
    std::vector<float> alone(rows * out), split(rows * out);
    SetComputeThreads(1);
    p.y_f32 = alone.data();
    RunLinear(p);
    SetComputeThreads(3);
    p.y_f32 = split.data();
    RunLinearParallel(p);
    EXPECT_EQ(std::memcmp(alone.data(), split.data(), alone.size() * sizeof(float)), 0)
        << rows << " rows";
    // Reading the next matrix ahead (here the same one) changes no bit either.
    std::vector<float> read_ahead(rows * out);
    p.y_f32 = read_ahead.data();
    RunLinearParallel(p, NextWeights{packed.data(), out, in, 2});
    EXPECT_EQ(std::memcmp(alone.data(), read_ahead.data(), alone.size() * sizeof(float)), 0)
        << rows << " rows, reading ahead";
  }
}

// Each thread reads ahead the start of its range in the next product's loop (BalancedParallelFor
// gives thread t of T the blocks [blocks * t / T, blocks * (t + 1) / T)).
TEST_F(ParallelLinearTest, ReadAheadIsTheStartOfEachThreadsShareOfTheNextProduct) {
  SetComputeThreads(2);
  std::vector<char> bytes(1);
  const char* base = bytes.data();
  // 10 blocks of 64 outputs of 100 bf16 inputs (12,800 bytes each): 5 blocks a thread.
  const NextWeights small{base, 640, 100, 2};
  ReadAhead t0 = ReadAheadShare(small, 0), t1 = ReadAheadShare(small, 1);
  EXPECT_EQ(t0.begin, base);
  EXPECT_EQ(t0.bytes, 5 * 12800);
  EXPECT_EQ(t1.begin, base + 5 * 12800);
  EXPECT_EQ(t1.bytes, 5 * 12800);
  EXPECT_EQ(ReadAheadShare(small, 2).bytes, 0) << "the loop has two threads";

  // A large matrix's shares are capped; f32 elements count 4 bytes.
  const NextWeights large{base, 4096, 1024, 4};  // 64 blocks of 256 KiB
  t1 = ReadAheadShare(large, 1);
  EXPECT_EQ(t1.begin, base + 32 * 64 * 1024 * 4);
  EXPECT_EQ(t1.bytes, kReadAheadBytes);

  // Nothing when the next loop runs on one thread, or there is no next matrix.
  EXPECT_EQ(ReadAheadShare(NextWeights{base, 64, 100, 2}, 0).bytes, 0);
  EXPECT_EQ(ReadAheadShare(NextWeights{}, 0).bytes, 0);
  SetComputeThreads(1);
  EXPECT_EQ(ReadAheadShare(small, 0).bytes, 0);
}

}  // namespace
}  // namespace specdec::model
