// BlockCostModel: per-position acceptance, straight-line pass costs from the target's reports,
// and the block that maximizes tau / step cost at a load.
#include "common/engine/block_cost_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <utility>

namespace specdec::engine {
namespace {

using StepCost = BlockCostModel::StepCost;

// Steps that accept 0, 1, 2, 0, 1, 2, ... of `drafted`: position 0 is accepted 2/3 of the time,
// position 1 1/3, later ones never.
void AcceptZeroOneTwo(BlockCostModel& m, int steps, int drafted) {
  for (int i = 0; i < steps; ++i) m.ObserveAcceptance(drafted, i % 3, 0);
}

// Passes whose costs lie on verify_ms = 2 + 0.1 rows and draft_ms = 1 + 0.05 rows, with rows
// from 1 to 256 and nothing else in a step's wall time.
void ObserveLinearCosts(BlockCostModel& m) {
  for (int rows = 1; rows <= 256; rows *= 2) {
    for (int k = 0; k < 8; ++k) {
      m.ObserveStep({.sessions = 1,
                     .pass_rows = rows,
                     .pass_ms = 2 + 0.1 * rows,
                     .draft_rows = rows,
                     .draft_ms = 1 + 0.05 * rows,
                     .wall_ms = 3 + 0.15 * rows});
      m.ObserveStep({.sessions = 1, .pass_rows = rows, .pass_ms = 2 + 0.1 * rows});
    }
  }
}

TEST(BlockCostModel, TauSumsAcceptanceOfTheDraftedPositions) {
  BlockCostModel m;
  EXPECT_DOUBLE_EQ(m.Tau(16, 0), 1.0);  // nothing observed: a block commits its bonus token only
  AcceptZeroOneTwo(m, 300, 15);
  EXPECT_DOUBLE_EQ(m.Tau(1, 0), 1.0);
  EXPECT_NEAR(m.Tau(2, 0), 1 + 2.0 / 3, 0.01);
  EXPECT_NEAR(m.Tau(3, 0), 2.0, 0.01);
  EXPECT_NEAR(m.Tau(16, 0), 2.0, 0.01);
  EXPECT_EQ(m.SpeculativeSteps(), 300);
}

TEST(BlockCostModel, FitsStraightLinesThroughThePassCosts) {
  BlockCostModel m;
  ObserveLinearCosts(m);
  // An AR step of 16 requests: a 16-row pass and no draft.
  EXPECT_NEAR(m.StepMs(16, 1), 2 + 1.6, 1e-6);
  // 4 requests with 8-row blocks: a 32-row pass and a 32-row draft.
  EXPECT_NEAR(m.StepMs(4, 8), (2 + 3.2) + (1 + 1.6), 1e-6);
}

// Under load, prompts that joined a pass make it wide and cheap per row (one sequence's long
// chunk): a lookup that gives every request 3 rows is priced by the sequences' own passes, not
// by those.
TEST(BlockCostModel, PassesThatPromptsJoinedDoNotPriceTheSequencesRows) {
  BlockCostModel m;
  for (int k = 0; k < 40; ++k) {
    for (int rows = 16; rows <= 24; ++rows) {  // 16 sequences, lookups adding 0-8 rows
      m.ObserveStep({.sessions = 16, .pass_rows = rows, .pass_ms = 1.2 + 0.075 * rows});
    }
    for (int prompt = 84; prompt <= 184; prompt += 50) {  // and a prompt joining them
      m.ObserveStep({.sessions = 16,
                     .pass_rows = 16 + prompt,
                     .prompt_rows = prompt,
                     .pass_ms = 2.4 + 0.05 * prompt});
    }
  }
  EXPECT_NEAR(m.DrafterlessStepMs(16, 1), 1.2 + 0.075 * 16, 0.01);
  EXPECT_NEAR(m.DrafterlessStepMs(16, 3), 1.2 + 0.075 * 48, 0.05);
}

// A lone request whose lookups stopped runs 1-row passes only: once the multi-row passes have
// decayed away, a 2-row pass keeps the shape they had, scaled to today's 1-row cost.
TEST(BlockCostModel, PassesWithoutSpreadKeepTheShapeOfTheLastFit) {
  BlockCostModel m;
  for (int k = 0; k < 40; ++k) {
    for (int rows = 1; rows <= 5; ++rows) {
      m.ObserveStep({.sessions = 1, .pass_rows = rows, .pass_ms = 0.14 + 0.065 * rows});
    }
  }
  for (int k = 0; k < 5000; ++k) m.ObserveStep({.sessions = 1, .pass_rows = 1, .pass_ms = 0.205});
  EXPECT_NEAR(m.DrafterlessStepMs(1, 1), 0.205, 1e-6);
  EXPECT_NEAR(m.DrafterlessStepMs(1, 2), 0.14 + 0.13, 1e-3);  // through the origin: 0.41
}

TEST(BlockCostModel, CostsWithoutSpreadInRowsAreProportionalToRows) {
  BlockCostModel m;
  for (int k = 0; k < 20; ++k) m.ObserveStep({.sessions = 16, .pass_rows = 16, .pass_ms = 4});
  EXPECT_NEAR(m.StepMs(16, 1), 4, 1e-9);
  EXPECT_NEAR(m.StepMs(16, 1) * 2, m.StepMs(32, 1), 1e-9);
}

// Between measured row counts a pass's cost is interpolated, capped by the least cost measured at
// as many rows or more; Read gives every row count the same costs as one query each.
TEST(BlockCostModel, InterpolatesMeasuredRowCountsCappedByLargerPasses) {
  BlockCostModel m;
  // 8 rows measured cheaper than 4 (a noisy mean): it caps the row counts below it.
  for (const auto& [rows, ms] : {std::pair{1, 1.0}, {4, 2.5}, {8, 2.0}, {16, 4.0}}) {
    m.ObserveStep({.sessions = 1, .pass_rows = rows, .pass_ms = ms});
  }
  const std::pair<int, double> expected[] = {{1, 1.0}, {2, 1.5}, {3, 2.0},  {4, 2.0},
                                             {6, 2.0}, {8, 2.0}, {12, 3.0}, {16, 4.0}};
  for (const auto& [rows, ms] : expected) {
    EXPECT_NEAR(m.DrafterlessStepMs(1, rows), ms, 1e-9) << rows << " rows";
  }
  m.ObserveStep({.sessions = 1,
                 .pass_rows = 8,
                 .pass_ms = 2.0,
                 .draft_rows = 8,
                 .draft_ms = 0.5,
                 .wall_ms = 3.0});
  for (int sessions : {1, 2, 3}) {
    const BlockCostModel::Reading r = m.Read(sessions, 17, 9, 0);
    for (int b = 1; b <= 17; ++b) {
      EXPECT_EQ(r.step_ms[static_cast<size_t>(b)], m.StepMs(sessions, b))
          << sessions << " sessions, block " << b;
    }
    for (int rows = 1; rows <= 9; ++rows) {
      EXPECT_EQ(r.drafterless_ms[static_cast<size_t>(rows)], m.DrafterlessStepMs(sessions, rows))
          << sessions << " sessions, " << rows << " rows";
    }
  }
}

TEST(BlockCostModel, DraftCostsOfOneSizeScaleAsTheTargetsPasses) {
  BlockCostModel m;
  for (int k = 0; k < 20; ++k) {
    m.ObserveStep({.sessions = 1, .pass_rows = 1, .pass_ms = 2.1});
    m.ObserveStep(
        {.sessions = 1, .pass_rows = 16, .pass_ms = 3.6, .draft_rows = 16, .draft_ms = 1.8});
  }
  // The target's line: 2 + 0.1 rows. The drafter was seen at 16 rows only (1.8 ms = 0.5 x the
  // target's 3.6): at 4 rows, 0.5 x (2 + 0.4).
  EXPECT_NEAR(m.StepMs(1, 4), (2 + 0.4) * 1.5, 1e-6);
}

TEST(BlockCostModel, TheRestOfAStepsWallTimeIsOverhead) {
  BlockCostModel m;
  for (int k = 0; k < 20; ++k) {
    m.ObserveStep({.sessions = 1, .pass_rows = 4, .pass_ms = 3, .wall_ms = 4.5});
    // A run's first step (its time includes the round trip) says nothing about the overhead.
    m.ObserveStep({.sessions = 1, .pass_rows = 4, .pass_ms = 3, .wall_ms = -1});
  }
  EXPECT_NEAR(m.StepMs(4, 1), 3 + 1.5, 1e-9);
}

TEST(BlockCostModel, UnderLoadTheRestOfAStepGrowsWithItsPasses) {
  BlockCostModel m;
  for (int k = 0; k < 40; ++k) {
    // A lone request: 0.5 ms beyond its pass, whatever the pass.
    m.ObserveStep({.sessions = 1, .pass_rows = 1, .pass_ms = 0.5, .wall_ms = 1.0});
    // Four requests: each step waits as long again as its pass (a pass it was not ready for).
    m.ObserveStep({.sessions = 4, .pass_rows = 4, .pass_ms = 1.0, .wall_ms = 2.0});
    m.ObserveStep({.sessions = 4, .pass_rows = 16, .pass_ms = 2.0, .wall_ms = 4.0});
  }
  EXPECT_NEAR(m.StepMs(1, 1), 0.5 + 0.5, 1e-9);
  EXPECT_NEAR(m.StepMs(4, 1), 2 * 1.0, 1e-9);
  EXPECT_NEAR(m.DrafterlessStepMs(4, 4), 2 * 2.0, 1e-9);
  // The same in one reading.
  const BlockCostModel::Reading r = m.Read(4, 1, 4, 0);
  EXPECT_NEAR(r.step_ms[1], 2.0, 1e-9);
  EXPECT_NEAR(r.drafterless_ms[4], 4.0, 1e-9);
}

TEST(BlockCostModel, BestBlockShrinksAsTheLoadGrows) {
  BlockCostModel m;
  ObserveLinearCosts(m);
  AcceptZeroOneTwo(m, 300, 15);
  // 1 request: b=2 makes (5/3) / 3.3 ms = 0.505 tokens/ms, b=3 2 / 3.45 = 0.580, b=4 2 / 3.6.
  EXPECT_EQ(m.BestBlock(1, 16, 0), 3);
  // 16 requests: b=2 makes (5/3) / 7.8 = 0.214, b=3 2 / 10.2 = 0.196.
  EXPECT_EQ(m.BestBlock(16, 16, 0), 2);
  // Never above the cap it is given.
  EXPECT_EQ(m.BestBlock(1, 2, 0), 2);
}

TEST(BlockCostModel, HighAcceptanceAndCheapRowsKeepTheWholeBlock) {
  BlockCostModel m;
  for (int k = 0; k < 50; ++k) {
    m.ObserveStep({.sessions = 1, .pass_rows = 1, .pass_ms = 2});
    m.ObserveStep(
        {.sessions = 1, .pass_rows = 64, .pass_ms = 2.2, .draft_rows = 64, .draft_ms = 1.1});
    m.ObserveStep(
        {.sessions = 1, .pass_rows = 16, .pass_ms = 2.05, .draft_rows = 16, .draft_ms = 1.0});
  }
  for (int i = 0; i < 100; ++i) m.ObserveAcceptance(15, 15, 0);  // every drafted token accepted
  EXPECT_EQ(m.BestBlock(1, 16, 0), 16);
}

TEST(BlockCostModel, KeepsTheCapUntilEnoughSpeculativeStepsWereSeen) {
  BlockCostModel m({.decay = 0.998, .min_steps = 32});
  ObserveLinearCosts(m);
  AcceptZeroOneTwo(m, 31, 15);
  EXPECT_EQ(m.BestBlock(16, 16, 0), 16);
  m.ObserveAcceptance(15, 0, 0);
  EXPECT_EQ(m.BestBlock(16, 16, 0), 2);
}

TEST(BlockCostModel, FollowsAChangedMachine) {
  BlockCostModel m;
  for (int k = 0; k < 100; ++k) m.ObserveStep({.sessions = 1, .pass_rows = 8, .pass_ms = 10});
  // The passes got twice as fast: after a few thousand more, the old ones are forgotten.
  for (int k = 0; k < 5000; ++k) m.ObserveStep({.sessions = 1, .pass_rows = 8, .pass_ms = 5});
  EXPECT_NEAR(m.StepMs(8, 1), 5, 0.01);
  // Every sequence of a pass reports it: 16 reports of one pass weigh as one observation.
  BlockCostModel w;
  w.ObserveStep({.sessions = 1, .pass_rows = 16, .pass_ms = 10});
  for (int k = 0; k < 16; ++k) w.ObserveStep({.sessions = 16, .pass_rows = 16, .pass_ms = 20});
  EXPECT_NEAR(w.StepMs(16, 1), 15, 0.1);
}

TEST(BlockCostModel, TemperaturesFallIntoFourAcceptanceClasses) {
  EXPECT_EQ(BlockCostModel::AcceptanceClass(0), 0);
  EXPECT_EQ(BlockCostModel::AcceptanceClass(-1), 0);
  EXPECT_EQ(BlockCostModel::AcceptanceClass(std::nan("")), 0);
  EXPECT_EQ(BlockCostModel::AcceptanceClass(0.01), 1);
  EXPECT_EQ(BlockCostModel::AcceptanceClass(0.5), 1);
  EXPECT_EQ(BlockCostModel::AcceptanceClass(0.7), 2);
  EXPECT_EQ(BlockCostModel::AcceptanceClass(1.0), 2);
  EXPECT_EQ(BlockCostModel::AcceptanceClass(1.2), 3);
}

// Greedy requests accept every drafted token, T=1 requests none: each class keeps its own
// acceptance, and a class that has seen no step answers with every class's steps.
TEST(BlockCostModel, AcceptanceIsKeptPerTemperatureClass) {
  BlockCostModel m;
  ObserveLinearCosts(m);
  for (int i = 0; i < 40; ++i) {
    m.ObserveAcceptance(15, 15, 0);
    m.ObserveAcceptance(15, 0, 2);
  }
  EXPECT_NEAR(m.Tau(16, 0), 16, 1e-9);
  EXPECT_NEAR(m.Tau(16, 2), 1, 1e-9);
  EXPECT_NEAR(m.Tau(3, 3), 2, 1e-9);  // pooled: half the steps accepted each position
  double weight = 0;
  EXPECT_NEAR(m.AcceptedShare(0, 2, &weight), 0, 1e-9);
  EXPECT_GT(weight, 30);
  EXPECT_NEAR(m.AcceptedShare(0, 1, &weight), 0.5, 1e-9);
  EXPECT_GT(weight, 60);
  EXPECT_EQ(m.BestBlock(1, 16, 0), 16);
  EXPECT_EQ(m.BestBlock(1, 16, 2), 2);
}

// Prompt-lookup steps measure the sequence's repetition, not the drafter: their acceptance is
// kept apart from the drafter's, per match length (0: unknown), and per class (pooled where a
// class has none).
TEST(BlockCostModel, LookupAcceptanceIsKeptApartFromTheDrafters) {
  BlockCostModel m;
  ObserveLinearCosts(m);
  double weight = 0;
  EXPECT_EQ(m.LookupShare(0, 0, 2, &weight), 0);
  EXPECT_EQ(weight, 0);
  for (int i = 0; i < 40; ++i) {
    m.ObserveAcceptance(15, 0, 0);
    m.ObserveLookup(4, 2, 0, 2);
    m.ObserveLookup(4, 0, 2, 2);
    m.ObserveLookup(4, 0, 0, 1);
    m.ObserveLookup(4, 4, 0, 3);
  }
  EXPECT_NEAR(m.Tau(16, 0), 1, 1e-9);
  EXPECT_NEAR(m.LookupShare(1, 0, 2, &weight), 1, 1e-9);
  EXPECT_GT(weight, 30);
  EXPECT_NEAR(m.LookupShare(2, 0, 2, &weight), 0, 1e-9);
  EXPECT_NEAR(m.LookupShare(0, 2, 2, &weight), 0, 1e-9);
  EXPECT_NEAR(m.LookupShare(0, 3, 2, &weight), 0.5, 1e-9);  // pooled
  EXPECT_NEAR(m.LookupShare(4, 0, 2, &weight), 0, 1e-9);    // never drafted
  EXPECT_EQ(weight, 0);
  // Each match length's own.
  EXPECT_NEAR(m.LookupShare(0, 0, 1, &weight), 0, 1e-9);
  EXPECT_GT(weight, 30);
  EXPECT_NEAR(m.LookupShare(3, 0, 3, &weight), 1, 1e-9);
  EXPECT_NEAR(m.LookupShare(0, 0, 0, &weight), 0, 1e-9);  // unknown: none observed
  EXPECT_EQ(weight, 0);
  const BlockCostModel::Reading r = m.Read(1, 2, 2, 0);
  EXPECT_NEAR(r.lookup_share[1], 0, 1e-9);
  EXPECT_NEAR(r.lookup_share[2], 1, 1e-9);
  EXPECT_NEAR(r.lookup_share[3], 1, 1e-9);
  EXPECT_EQ(r.lookup_weight[0], 0);
  EXPECT_NEAR(m.AcceptedShare(0, 0, &weight), 0, 1e-9);  // the drafter's stays its own
}

}  // namespace
}  // namespace specdec::engine
