#include "common/engine/warped_rows.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace specdec::engine {
namespace {

// Three rows of five logits.
std::vector<float> Logits() {
  return {0.5f,      2.f,  -1.f, 0.f,  1.f, /**/ 3.f, 0.f, 0.f, 1.f, -2.f,
          /**/ -1.f, -1.f, 4.f,  0.5f, 0.f};
}

TEST(WarpedRowsTest, GreedyRowsAreTheLogits) {
  sampling::SamplingParams greedy;
  greedy.temperature = 0.f;
  WarpedRows rows(Logits(), 5, greedy);
  const ProbRows view = rows.View();
  EXPECT_FALSE(view.prepare);
  EXPECT_EQ(view.row(2)[2], 4.f);
  EXPECT_EQ(rows.warped_rows(), 0);
}

TEST(WarpedRowsTest, WarpsEachRowOnItsFirstReadOnly) {
  sampling::SamplingParams params;
  params.temperature = 0.7f;
  params.top_k = 3;
  WarpedRows rows(Logits(), 5, params);
  const ProbRows view = rows.View();
  EXPECT_EQ(rows.warped_rows(), 0);
  const std::vector<float> logits = Logits();
  const std::vector<float> row1 =
      sampling::WarpedProbs(std::span<const float>(logits).subspan(5, 5), params);
  for (int i = 0; i < 2; ++i) {
    const std::span<const float> got = view.row(1);
    EXPECT_EQ(std::vector<float>(got.begin(), got.end()), row1);
  }
  EXPECT_EQ(rows.warped_rows(), 1);  // row 1 once; rows 0 and 2 never read
  (void)view.row(0);
  EXPECT_EQ(rows.warped_rows(), 2);
}

// A one-hot chain whose first token the target never picks is rejected at row 0: the residual is
// drawn from that row, and rows 1 and 2 are never warped.
TEST(WarpedRowsTest, AChainRejectedAtItsFirstTokenWarpsOneRow) {
  sampling::SamplingParams params;
  params.temperature = 1.f;
  params.top_k = 2;  // row 0 keeps tokens 1 and 4: token 2 has probability 0
  WarpedRows rows(Logits(), 5, params);
  sampling::Rng rng(5);
  const std::vector<int32_t> draft = {2, 0};
  const VerifyResult r = VerifyChain(draft, rows.View(), ProbRows{}, Proposal::kOneHot, false, rng);
  EXPECT_EQ(r.num_accepted, 0);
  EXPECT_TRUE(r.next_token == 1 || r.next_token == 4) << r.next_token;
  EXPECT_EQ(rows.warped_rows(), 1);
}

}  // namespace
}  // namespace specdec::engine
