#include "services/target/server_run.h"

#include <gtest/gtest.h>

#include <limits>

namespace specdec::services {
namespace {

v1::TargetRun MakeRun(int32_t max_tokens) {
  v1::TargetRun r;
  r.set_handle("t/1");
  r.set_last_token(5);
  r.set_max_tokens(max_tokens);
  return r;
}

v1::TargetVerifyResult Step(std::vector<int32_t> committed, int64_t length) {
  v1::TargetVerifyResult v;
  for (int32_t t : committed) v.add_committed(t);
  v.set_next_token(committed.back());
  v.set_length(length);
  return v;
}

TEST(ServerRunTest, TheNextStepCarriesWhatIsLeft) {
  v1::TargetRun run = MakeRun(10);
  run.set_draft_block_size(4);
  run.add_stop_token_ids(99);
  int32_t left = -1;
  auto next = NextRunStep(run, Step({7, 8, 9}, 20), 0, 128, &left);
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(left, 7);
  EXPECT_EQ(next->run().max_tokens(), 7);
  EXPECT_EQ(next->run().last_token(), 9);
  EXPECT_EQ(next->run().draft_block_size(), 4);
  EXPECT_EQ(next->run().stop_token_ids(0), 99);
  EXPECT_EQ(next->run().handle(), "t/1");
}

TEST(ServerRunTest, TheRunEndsAtItsLengthAStopTokenAFullCacheOrItsTime) {
  int32_t left = -1;
  EXPECT_FALSE(NextRunStep(MakeRun(3), Step({1, 2, 3}, 20), 0, 128, &left).has_value());
  EXPECT_EQ(left, 0);
  v1::TargetRun stops = MakeRun(50);
  stops.add_stop_token_ids(2);
  EXPECT_FALSE(NextRunStep(stops, Step({1, 2, 3}, 20), 0, 128, &left).has_value());
  EXPECT_FALSE(NextRunStep(MakeRun(50), Step({1}, 128), 0, 128, &left).has_value());
  v1::TargetRun timed = MakeRun(50);
  timed.set_max_ms(5.f);
  EXPECT_FALSE(NextRunStep(timed, Step({1}, 20), 6.0, 128, &left).has_value());
  auto next = NextRunStep(timed, Step({1}, 20), 2.0, 128, &left);
  ASSERT_TRUE(next.has_value());
  EXPECT_FLOAT_EQ(next->run().max_ms(), 3.f);
}

TEST(ServerRunTest, BadRunsNameTheField) {
  EXPECT_NE(ValidateRun(MakeRun(0)).message().find("max_tokens"), std::string::npos);
  EXPECT_NE(ValidateRun(MakeRun(4097)).message().find("max_tokens"), std::string::npos);
  v1::TargetRun b = MakeRun(5);
  b.set_draft_block_size(1);
  EXPECT_NE(ValidateRun(b).message().find("draft_block_size"), std::string::npos);
  v1::TargetRun t = MakeRun(5);
  t.set_max_ms(std::numeric_limits<float>::infinity());
  EXPECT_NE(ValidateRun(t).message().find("max_ms"), std::string::npos);
  EXPECT_TRUE(ValidateRun(MakeRun(4096)).ok());
}

}  // namespace
}  // namespace specdec::services
