#include "services/target/server_run.h"

#include <gtest/gtest.h>

#include <limits>

#include "services/common/lookup_weighing_proto.h"

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

// A weighing run's next step carries its weighing after the step: decayed, with the step's lookup.
TEST(ServerRunTest, TheNextStepCarriesTheRunsWeighingAfterTheStep) {
  v1::TargetRun run = MakeRun(10);
  run.mutable_lookup()->set_max_tokens(4);
  engine::LookupWeighing w;
  w.rows_ms = {0, 1, 1.25, 1.5, 1.75, 2};
  w.alternative_rate = 1;
  w.decay = 0.5;
  w.odds.first_drafted[3] = 2;
  WeighingToProto(w, run.mutable_lookup()->mutable_weighing());
  v1::TargetVerifyResult looked = Step({7, 8}, 20);  // 4 tokens drafted, 1 accepted
  looked.set_looked_up(true);
  looked.set_rows_verified(5);
  looked.set_num_accepted(1);
  looked.set_lookup_match(3);
  int32_t left = 0;
  auto next = NextRunStep(run, looked, 0, 128, &left);
  ASSERT_TRUE(next.has_value());
  auto after = WeighingFromProto(next->run().lookup().weighing());
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_DOUBLE_EQ(after->odds.first_drafted[3], 2 * 0.5 + 1);
  EXPECT_DOUBLE_EQ(after->odds.first_accepted[3], 1);
  EXPECT_DOUBLE_EQ(after->odds.reached[1], 1);
  EXPECT_DOUBLE_EQ(after->odds.accepted[1], 0);
  EXPECT_DOUBLE_EQ(after->alternative_rate, 1);
  EXPECT_EQ(after->rows_ms, w.rows_ms);
  // A step that did not look up only decays it.
  auto plain = NextRunStep(next->run(), Step({9}, 22), 0, 128, &left);
  ASSERT_TRUE(plain.has_value());
  auto decayed = WeighingFromProto(plain->run().lookup().weighing());
  ASSERT_TRUE(decayed.ok());
  EXPECT_DOUBLE_EQ(decayed->odds.first_drafted[3], 1);
  EXPECT_DOUBLE_EQ(decayed->odds.reached[1], 0.5);
  // A run without a weighing gets none.
  v1::TargetRun fixed = MakeRun(10);
  fixed.mutable_lookup()->set_max_tokens(4);
  EXPECT_FALSE(NextRunStep(fixed, looked, 0, 128, &left)->run().lookup().has_weighing());
}

TEST(ServerRunTest, ABadWeighingNamesItsField) {
  engine::LookupWeighing w;
  w.rows_ms = {0, 1, 2};
  v1::TargetRun run = MakeRun(5);
  run.mutable_lookup()->set_max_tokens(4);
  WeighingToProto(w, run.mutable_lookup()->mutable_weighing());
  EXPECT_TRUE(ValidateRun(run).ok()) << ValidateRun(run);
  v1::TargetRun short_prior = run;
  short_prior.mutable_lookup()->mutable_weighing()->mutable_first_prior()->RemoveLast();
  EXPECT_NE(ValidateRun(short_prior).message().find("run.lookup.weighing.first_prior"),
            std::string::npos);
  v1::TargetRun nan_rate = run;
  nan_rate.mutable_lookup()->mutable_weighing()->set_alternative_rate(
      std::numeric_limits<float>::quiet_NaN());
  EXPECT_NE(ValidateRun(nan_rate).message().find("run.lookup.weighing.alternative_rate"),
            std::string::npos);
  v1::TargetRun big_decay = run;
  big_decay.mutable_lookup()->mutable_weighing()->set_decay(1.5f);
  EXPECT_NE(ValidateRun(big_decay).message().find("run.lookup.weighing.decay"), std::string::npos);
  v1::TargetRun negative = run;
  negative.mutable_lookup()->mutable_weighing()->set_reached(3, -1.f);
  EXPECT_NE(ValidateRun(negative).message().find("run.lookup.weighing.reached[3]"),
            std::string::npos);
  v1::TargetRun prior = run;
  prior.mutable_lookup()->mutable_weighing()->set_first_prior(1, 2.f);
  EXPECT_NE(ValidateRun(prior).message().find("run.lookup.weighing.first_prior[1]"),
            std::string::npos);
  v1::TargetRun long_steps = run;
  for (int i = 0; i < 70; ++i) long_steps.mutable_lookup()->mutable_weighing()->add_step_ms(1);
  EXPECT_NE(ValidateRun(long_steps).message().find("run.lookup.weighing.step_ms"),
            std::string::npos);
}

}  // namespace
}  // namespace specdec::services
