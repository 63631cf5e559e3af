// LoadAwareSpeculation: epochs in which every load-aware step takes one arm; per (load level,
// arm) rates of those epochs (output tokens/s per request in flight); exploration, then the faster
// arm with periodic re-exploration; levels independent.
#include "services/router/load_aware.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <map>
#include <vector>

namespace specdec::services {
namespace {

using Arm = LoadAwareSpeculation::Arm;
using Clock = LoadAwareSpeculation::Clock;
using std::chrono::milliseconds;

TEST(LoadAwareSpeculation, LevelsBucketRequestsInFlight) {
  EXPECT_EQ(LoadAwareSpeculation::Level(0), 0);
  EXPECT_EQ(LoadAwareSpeculation::Level(1), 0);
  EXPECT_EQ(LoadAwareSpeculation::Level(1.4), 0);
  EXPECT_EQ(LoadAwareSpeculation::Level(1.6), 1);
  EXPECT_EQ(LoadAwareSpeculation::Level(2), 1);
  EXPECT_EQ(LoadAwareSpeculation::Level(4), 2);
  EXPECT_EQ(LoadAwareSpeculation::Level(5), 3);
  EXPECT_EQ(LoadAwareSpeculation::Level(16), 4);
  EXPECT_EQ(LoadAwareSpeculation::Level(100), 5);
  EXPECT_STREQ(LoadAwareSpeculation::LevelName(3), "5-8");
}

// A closed loop of `n` requests that each step in turn: an AR step commits 1 token in `ar_ms`, a
// speculative one `tau` tokens in `spec_ms`. Returns the epochs run per arm.
struct Sim {
  LoadAwareSpeculation& la;
  Clock::time_point now;
  std::map<Arm, int> steps;
  void Run(int n, double ar_ms, double spec_ms, int tau, int total_steps) {
    std::vector<uint64_t> prev(n, 0);
    for (int i = 0; i < total_steps; ++i) {
      const int r = i % n;
      LoadAwareSpeculation::Step s = la.Next(now);
      const bool ar = s.arm == Arm::kAr;
      const double ms = ar ? ar_ms : spec_ms;
      la.Observe(s, prev[r] == s.epoch);
      la.Committed(now, ar ? 1 : tau);
      prev[r] = s.epoch;
      ++steps[s.arm];
      // The n requests step concurrently: the clock moves one step time per n steps.
      now += std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double, std::milli>(ms / n));
    }
  }
};

// `n` requests that each wait on their own step, as the router's do (a request starts its next
// step when its previous one ends), for `duration` on a 1 ms clock; request i starts `stagger` x i
// into the run. A request's k-th step of an arm (counted from 0) takes step_ms(arm, k) and commits
// 1 token (AR) or `spec_tokens`, after which the request has no step going for gap_ms(arm) (0
// without it); on_epoch(arm) is called for every epoch a step began.
void RunWaitingRequests(LoadAwareSpeculation& la, Clock::time_point& now, int n,
                        std::chrono::milliseconds duration, std::chrono::milliseconds stagger,
                        const std::function<double(Arm, int)>& step_ms, int spec_tokens,
                        const std::function<void(Arm)>& on_epoch = nullptr,
                        const std::function<double(Arm)>& gap_ms = nullptr) {
  for (int i = 0; i < n; ++i) la.RequestStarted(now);
  struct Req {
    Clock::time_point busy_until;
    LoadAwareSpeculation::Step step;
    uint64_t prev = 0;
    bool running = false;
    std::map<Arm, int> steps;
    double ms = 0;
  };
  std::vector<Req> reqs(n);
  for (int i = 0; i < n; ++i) reqs[i].busy_until = now + stagger * i;
  const auto end = now + duration;
  while (now < end) {
    for (Req& r : reqs) {
      if (r.busy_until > now) continue;
      if (r.running) {
        const bool ar = r.step.arm == Arm::kAr;
        la.Observe(r.step, r.prev == r.step.epoch);
        la.Committed(now, ar ? 1 : spec_tokens);
        r.prev = r.step.epoch;
        r.running = false;
        const double gap = gap_ms ? gap_ms(r.step.arm) : 0;
        if (gap > 0) {
          r.busy_until = now + milliseconds(static_cast<int>(gap));
          continue;
        }
      }
      r.step = la.Next(now);
      if (r.step.new_epoch && on_epoch) on_epoch(r.step.arm);
      r.running = true;
      r.ms = step_ms(r.step.arm, r.steps[r.step.arm]++);
      r.busy_until = now + milliseconds(static_cast<int>(r.ms));
    }
    now += milliseconds(1);
  }
}

// The arms of the first `count` epochs chosen at `level`, stepping every 1 ms (8 ms AR steps).
std::vector<Arm> FirstEpochArms(LoadAwareSpeculation& la, Clock::time_point& now, int level,
                                size_t count) {
  std::vector<Arm> arms;
  uint64_t last = 0;
  for (int i = 0; i < 4000 && arms.size() < count; ++i) {
    auto s = la.Next(now);
    if (s.epoch != last && s.level == level) arms.push_back(s.arm);
    last = s.epoch;
    la.Observe(s, true);
    la.Committed(now, 1);
    now += milliseconds(1);
  }
  return arms;
}

TEST(LoadAwareSpeculation, AHigherLevelStartsOnArWhenALowerOneLearnedArWins) {
  LoadAwareSpeculation la;
  Sim sim{la, Clock::now()};
  // Level 3-4 learns that AR wins clearly (log advantage -0.5): decisive after min_pairs.
  for (int i = 0; i < 4; ++i) la.RequestStarted(sim.now);
  sim.Run(4, 5, 16.5, 2, 4 * 800);
  ASSERT_GE(la.Pairs(2), 4);
  ASSERT_LT(la.LogAdvantage(2), -0.4);
  // At 8 in flight nothing is measured yet, but the first epochs run AR.
  for (int i = 0; i < 4; ++i) la.RequestStarted(sim.now);
  const std::vector<Arm> first = FirstEpochArms(la, sim.now, 3, 6);
  ASSERT_EQ(first.size(), 6u);
  for (Arm a : first) EXPECT_EQ(a, Arm::kAr);
  // Nor does it ever explore: its advantage is capped at the lower level's, so no pair of its
  // own could change its choice.
  EXPECT_EQ(la.ExploreInterval(3), 0);
  for (Arm a : FirstEpochArms(la, sim.now, 3, 200)) EXPECT_EQ(a, Arm::kAr);
  // Without that knowledge a fresh level alternates, speculation first.
  LoadAwareSpeculation fresh;
  auto t = Clock::now();
  for (int i = 0; i < 8; ++i) fresh.RequestStarted(t);
  EXPECT_EQ(fresh.Next(t).arm, Arm::kSpeculative);
}

TEST(LoadAwareSpeculation, AHigherLevelStartsOnArWhenALowerOneFoundTheArmsEven) {
  LoadAwareSpeculation la;
  Sim sim{la, Clock::now()};
  // Level 3-4 learns that speculation is slightly slower (log(2 / 10.5 x 5) = -0.049).
  for (int i = 0; i < 4; ++i) la.RequestStarted(sim.now);
  sim.Run(4, 5, 10.5, 2, 4 * 1600);
  ASSERT_GE(la.Pairs(2), 12);
  const double lower = la.LogAdvantage(2);
  ASSERT_LT(lower, 0);
  ASSERT_GT(lower, -0.1);
  // Speculation can only lose more at 8 in flight: no alternating there, AR from the start.
  for (int i = 0; i < 4; ++i) la.RequestStarted(sim.now);
  const std::vector<Arm> first = FirstEpochArms(la, sim.now, 3, 6);
  ASSERT_EQ(first.size(), 6u);
  for (Arm a : first) EXPECT_EQ(a, Arm::kAr);
  EXPECT_EQ(la.ExploreInterval(3), 0);
}

TEST(LoadAwareSpeculation, NoLevelIsCreditedWithMoreThanALowerOneLearned) {
  LoadAwareSpeculation la;
  Sim sim{la, Clock::now()};
  // Level 3-4 learns that AR wins clearly (log advantage about -0.5): decisive after min_pairs.
  for (int i = 0; i < 4; ++i) la.RequestStarted(sim.now);
  sim.Run(4, 5, 16.5, 2, 4 * 800);
  ASSERT_GE(la.Pairs(2), 4);
  const double lower = la.LogAdvantage(2);
  ASSERT_LT(lower, -0.4);
  // At 8 in flight speculation would be twice as fast (log advantage +0.69), which no lighter
  // load supports: the level runs AR and never explores.
  for (int i = 0; i < 4; ++i) la.RequestStarted(sim.now);
  sim.steps.clear();
  sim.Run(8, 5, 5, 2, 8 * 400 * 100);
  EXPECT_EQ(la.Pairs(3), 0);
  EXPECT_EQ(la.ExploreInterval(3), 0);
  EXPECT_GT(sim.steps[Arm::kAr], 0);
  EXPECT_EQ(sim.steps[Arm::kSpeculative], 0);
}

TEST(LoadAwareSpeculation, ALevelBoundToArLearnsOnceItsBoundTurnsPositive) {
  LoadAwareSpeculation la;
  Sim sim{la, Clock::now()};
  // Level 3-4 learns that AR wins clearly, then speculation becomes twice as fast there: its
  // explorations win, and its median turns positive.
  for (int i = 0; i < 4; ++i) la.RequestStarted(sim.now);
  sim.Run(4, 5, 16.5, 2, 4 * 800);
  ASSERT_LT(la.LogAdvantage(2), -0.4);
  sim.Run(4, 5, 5, 2, 4 * 400 * 200);
  ASSERT_GT(la.LogAdvantage(2), 0.5);
  // Level 5-8 is no longer bound to AR: it learns as a fresh level does, alternating from
  // speculation.
  for (int i = 0; i < 4; ++i) la.RequestStarted(sim.now);
  EXPECT_EQ(la.ExploreInterval(3), 2);
  const std::vector<Arm> first = FirstEpochArms(la, sim.now, 3, 4);
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(first[0], Arm::kSpeculative);
  EXPECT_EQ(first[1], Arm::kAr);
  EXPECT_EQ(first[2], Arm::kSpeculative);
}

TEST(LoadAwareSpeculation, ADecisiveLoserIsExploredAsSeldomAsAfterConfidentPairs) {
  // Eight requests: AR 8 ms per token, speculation 30 ms per 2 tokens (log advantage -0.63).
  // Every pair agrees, so after min_pairs the level explores every 10 x 5 epochs (and backs off
  // when those lose), not every third epoch until it has 12 pairs.
  auto run = [](LoadAwareSpeculation::Options o, std::map<Arm, int>* steps) {
    LoadAwareSpeculation la(o);
    Sim sim{la, Clock::now()};
    for (int i = 0; i < 8; ++i) la.RequestStarted(sim.now);
    sim.Run(8, 8, 30, 2, 8 * 300);
    *steps = sim.steps;
    const int level = LoadAwareSpeculation::Level(8);
    EXPECT_GE(la.Pairs(level), 4);
    EXPECT_LT(la.Pairs(level), 12);
    EXPECT_NEAR(la.LogAdvantage(level), std::log(66.67 / 125), 0.01);
    return la.ExploreInterval(level);
  };
  std::map<Arm, int> decisive, undecided;
  EXPECT_GE(run(LoadAwareSpeculation::Options{}, &decisive), 50);
  LoadAwareSpeculation::Options off;
  off.decisive_margin = 1e9;
  EXPECT_EQ(run(off, &undecided), 3);
  EXPECT_LT(decisive[Arm::kSpeculative], undecided[Arm::kSpeculative]);
}

TEST(LoadAwareSpeculation, PairsThatDisagreeAreNotDecisive) {
  LoadAwareSpeculation la;
  Sim sim{la, Clock::now()};
  for (int i = 0; i < 4; ++i) la.RequestStarted(sim.now);
  // AR clearly faster (log advantage -0.5): decisive after min_pairs.
  sim.Run(4, 5, 16.5, 2, 4 * 200);
  const int level = LoadAwareSpeculation::Level(4);
  ASSERT_GE(la.Pairs(level), 4);
  ASSERT_LT(la.LogAdvantage(level), -0.3);
  EXPECT_GE(la.ExploreInterval(level), 50);
  // Now speculation is 5x as fast: the next exploration wins both its pairs, so not every pair
  // agrees any more, although the median still favours AR.
  const int64_t settled = la.Pairs(level) + 1;  // the last alternating epoch's pair may be due
  for (int i = 0; i < 4000 && la.Pairs(level) < settled + 2; ++i) sim.Run(4, 5, 2, 2, 40);
  ASSERT_EQ(la.Pairs(level), settled + 2);
  ASSERT_LT(la.LogAdvantage(level), -0.3);
  EXPECT_EQ(la.ExploreInterval(level), 3);
}

TEST(LoadAwareSpeculation, OneArmPerEpochThenANewEpoch) {
  LoadAwareSpeculation la;
  const auto t0 = Clock::now();
  la.RequestStarted(t0);
  auto a = la.Next(t0);
  EXPECT_TRUE(a.new_epoch);
  auto b = la.Next(t0 + milliseconds(100));
  EXPECT_FALSE(b.new_epoch);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.arm, b.arm);
  auto c = la.Next(t0 + milliseconds(260));
  EXPECT_TRUE(c.new_epoch);
  EXPECT_EQ(c.epoch, a.epoch + 1);
}

// Peek answers what Next would within the open epoch, and neither begins an epoch nor counts a
// step: the epoch after it still begins at Next, and its step count is Next's alone.
TEST(LoadAwareSpeculation, PeekSaysTheOpenEpochWithoutTakingAStep) {
  LoadAwareSpeculation la;
  const auto t0 = Clock::now();
  la.RequestStarted(t0);
  EXPECT_FALSE(la.Peek(t0).has_value()) << "no epoch is open before the first Next";
  const auto a = la.Next(t0);
  const std::optional<LoadAwareSpeculation::Step> p = la.Peek(t0 + milliseconds(100));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->epoch, a.epoch);
  EXPECT_EQ(p->arm, a.arm);
  EXPECT_EQ(p->holds, a.holds);
  EXPECT_FALSE(p->new_epoch);
  EXPECT_FALSE(la.Peek(t0 + milliseconds(260)).has_value()) << "the epoch has ended";
  EXPECT_TRUE(la.Next(t0 + milliseconds(260)).new_epoch);
}

TEST(LoadAwareSpeculation, LearnsThatArWinsUnderLoadAndSpeculationAlone) {
  LoadAwareSpeculation la;
  Sim sim{la, Clock::now()};
  // Eight requests in flight: AR steps take 8 ms (1 token), speculative ones 30 ms (2 tokens):
  // 125 against 67 tokens/s per request.
  for (int i = 0; i < 8; ++i) la.RequestStarted(sim.now);
  sim.Run(8, 8, 30, 2, 8 * 400);
  const int level = LoadAwareSpeculation::Level(8);
  EXPECT_GE(la.Epochs(level, Arm::kAr), 2);
  EXPECT_GE(la.Epochs(level, Arm::kSpeculative), 2);
  EXPECT_GE(la.Pairs(level), 4);
  EXPECT_NEAR(la.LogAdvantage(level), std::log(66.67 / 125), 0.01);
  EXPECT_NEAR(la.Rate(level, Arm::kAr), 125, 1);
  EXPECT_NEAR(la.Rate(level, Arm::kSpeculative), 66.7, 1);
  // Most steps ran as AR once both arms were measured.
  EXPECT_GT(sim.steps[Arm::kAr], 3 * sim.steps[Arm::kSpeculative]);

  // One request alone: AR 4 ms per token, speculation 6 ms per 2 tokens.
  for (int i = 0; i < 7; ++i) la.RequestFinished(sim.now);
  sim.now += milliseconds(1000);  // an idle spell between the two phases
  sim.steps.clear();
  sim.Run(1, 4, 6, 2, 1500);
  EXPECT_NEAR(la.Rate(0, Arm::kAr), 250, 1);
  EXPECT_NEAR(la.Rate(0, Arm::kSpeculative), 333.3, 1);
  EXPECT_GT(sim.steps[Arm::kSpeculative], 2 * sim.steps[Arm::kAr]);
  // The level-8 estimates were not touched by the lone request's epochs.
  EXPECT_NEAR(la.Rate(level, Arm::kAr), 125, 1);
}

// Options that settle a level quickly: 3 pairs, then re-explore every 4 epochs or more seldom.
LoadAwareSpeculation::Options QuickOptions() {
  LoadAwareSpeculation::Options o;
  o.explore_every = 4;
  o.min_pairs = 3;
  o.confident_pairs = 3;
  return o;
}

// Four requests stepping in turn where speculation wins (3 tokens in 10 ms against 1 in 5 ms);
// on_step gets every step's answer.
void RunFourWhereSpeculationWins(
    LoadAwareSpeculation& la, Sim& sim, int steps,
    const std::function<void(const LoadAwareSpeculation::Step&)>& on_step) {
  for (int i = 0; i < 4; ++i) la.RequestStarted(sim.now);
  std::vector<uint64_t> prev(4, 0);
  for (int i = 0; i < steps; ++i) {
    auto s = la.Next(sim.now);
    on_step(s);
    const bool ar = s.arm == Arm::kAr;
    la.Observe(s, prev[i % 4] == s.epoch);
    la.Committed(sim.now, ar ? 1 : 3);
    prev[i % 4] = s.epoch;
    sim.now += milliseconds(ar ? 5 : 10) / 4;
  }
}

TEST(LoadAwareSpeculation, ExploresThenExploitsWithPeriodicReexploration) {
  LoadAwareSpeculation la(QuickOptions());
  Sim sim{la, Clock::now()};
  // Record the arm of every epoch.
  std::vector<Arm> epochs;
  RunFourWhereSpeculationWins(la, sim, 4 * 20000, [&](const LoadAwareSpeculation::Step& s) {
    if (s.new_epoch) epochs.push_back(s.arm);
  });
  ASSERT_GE(epochs.size(), 12u);
  // Exploration alternates, speculation first.
  EXPECT_EQ(epochs[0], Arm::kSpeculative);
  EXPECT_EQ(epochs[1], Arm::kAr);
  EXPECT_EQ(epochs[2], Arm::kSpeculative);
  EXPECT_EQ(epochs[3], Arm::kAr);
  // Then speculation. Its advantage is log(300 / 200) = 0.41, clearly ahead, so AR is
  // re-explored five times as seldom as explore_every says: after 20 epochs. Each of those
  // explorations loses, so the interval doubles, up to max_backoff (8) times: 40, 80, 160, 160.
  std::vector<size_t> ar_epochs;
  for (size_t i = 4; i < epochs.size(); ++i) {
    if (epochs[i] == Arm::kAr) ar_epochs.push_back(i);
  }
  ASSERT_GE(ar_epochs.size(), 5u);
  EXPECT_NEAR(static_cast<int>(ar_epochs[0]), 4 + 20 - 1, 1);
  const std::vector<int> want = {40, 80, 160, 160};
  for (size_t j = 0; j < want.size(); ++j) {
    EXPECT_NEAR(static_cast<int>(ar_epochs[j + 1] - ar_epochs[j]), want[j], 1) << "gap " << j;
  }
  const int level = LoadAwareSpeculation::Level(4);
  EXPECT_EQ(la.Backoff(level), 8);
  EXPECT_NEAR(la.ExploreInterval(level), 160, 1);
}

TEST(LoadAwareSpeculation, HoldsCoversTheEpochsBeforeTheNextExploration) {
  LoadAwareSpeculation::Options o = QuickOptions();
  o.max_hold = 6;
  LoadAwareSpeculation la(o);
  Sim sim{la, Clock::now()};
  struct Epoch {
    Arm arm;
    int hold;  // (holds - ends) in epochs
    Clock::duration run_for, to_holds;
  };
  std::vector<Epoch> epochs;
  RunFourWhereSpeculationWins(la, sim, 4 * 8000, [&](const LoadAwareSpeculation::Step& s) {
    // A run may never outlast the plan.
    ASSERT_LE(s.run_for, s.holds - sim.now);
    ASSERT_GT(s.run_for, Clock::duration::zero());
    if (!s.new_epoch) return;
    ASSERT_GE(s.holds, s.ends);
    const auto extra = s.holds - s.ends;
    ASSERT_EQ(extra % o.epoch, Clock::duration::zero());
    epochs.push_back({s.arm, static_cast<int>(extra / o.epoch), s.run_for, s.holds - sim.now});
  });
  ASSERT_GE(epochs.size(), 200u);
  // While alternating (speculation first, until min_pairs pairs are measured, one epoch after
  // they ran), no epoch holds beyond itself.
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(epochs[i].arm, i % 2 ? Arm::kAr : Arm::kSpeculative) << "epoch " << i;
    EXPECT_EQ(epochs[i].hold, 0) << "epoch " << i;
  }
  // Then an exploiting epoch holds until the epoch before the next exploration (at most
  // max_hold), and an exploring one not at all. Epochs just after an exploration are skipped:
  // its pair is judged (and the interval changed) two epochs later. A run may last until the
  // arm changes; when that is beyond max_hold, max_hold epochs from its own start, wherever
  // in the epoch that falls.
  int checked = 0, full = 0, capped = 0;
  size_t last_explore = 0;
  for (size_t i = 5; i < epochs.size(); ++i) {
    if (epochs[i].arm == Arm::kAr) {
      EXPECT_EQ(epochs[i].hold, 0) << "exploring epoch " << i;
      last_explore = i;
      continue;
    }
    size_t next = i + 1;
    while (next < epochs.size() && epochs[next].arm == Arm::kSpeculative) ++next;
    if (next == epochs.size() || i < last_explore + 4) continue;
    EXPECT_EQ(epochs[i].hold, std::min<int>(static_cast<int>(next - i - 1), o.max_hold))
        << "epoch " << i;
    if (static_cast<int>(next - i - 1) > o.max_hold) {
      EXPECT_EQ(epochs[i].run_for, o.max_hold * o.epoch) << "epoch " << i;
      ++capped;
    } else {
      EXPECT_EQ(epochs[i].run_for, epochs[i].to_holds) << "epoch " << i;
    }
    ++checked;
    full += epochs[i].hold == o.max_hold;
  }
  EXPECT_GT(checked, 100);
  EXPECT_GT(full, 50);
  EXPECT_GT(capped, 20);
}

TEST(LoadAwareSpeculation, AnExplorationThatWinsResetsTheBackoff) {
  LoadAwareSpeculation::Options o = QuickOptions();
  o.window = 5;
  LoadAwareSpeculation la(o);
  Sim sim{la, Clock::now()};
  for (int i = 0; i < 4; ++i) la.RequestStarted(sim.now);
  const int level = LoadAwareSpeculation::Level(4);
  // Speculation wins (300 against 200 tokens/s per request) until AR's explorations have
  // backed off all the way.
  for (int i = 0; i < 200 && la.Backoff(level) < 8; ++i) sim.Run(4, 5, 10, 3, 400);
  ASSERT_EQ(la.Backoff(level), 8);
  // Then speculation gets slow (100 tokens/s): within two explorations (the first may pair with
  // an epoch that straddles the change) an AR exploration wins, which resets the backoff, the
  // explorations come at the short interval again and AR takes over.
  const int64_t pairs = la.Pairs(level);
  while (la.Backoff(level) > 1 && la.Pairs(level) < pairs + 4) sim.Run(4, 5, 30, 3, 40);
  EXPECT_EQ(la.Backoff(level), 1);
  sim.steps.clear();
  sim.Run(4, 5, 30, 3, 4 * 4000);
  EXPECT_LT(la.LogAdvantage(level), 0);
  EXPECT_GT(sim.steps[Arm::kAr], 4 * sim.steps[Arm::kSpeculative]);
}

TEST(LoadAwareSpeculation, SpeculationTooSlowToMeasureStopsAlternatingAndBacksOff) {
  // Sixteen requests; a speculative step takes 600 ms (each request catching its drafter up on
  // its whole context, whole blocks verified in the shared batch), longer than two epochs, so no
  // speculative epoch ever holds a clean step; AR steps take 14 ms.
  LoadAwareSpeculation la;
  Sim sim{la, Clock::now()};
  for (int i = 0; i < 16; ++i) la.RequestStarted(sim.now);
  const int level = LoadAwareSpeculation::Level(16);
  std::vector<Arm> epochs;
  uint64_t last = 0;
  std::vector<uint64_t> prev(16, 0);
  const auto end = sim.now + std::chrono::seconds(120);
  for (int i = 0; sim.now < end; ++i) {
    auto s = la.Next(sim.now);
    if (s.epoch != last) epochs.push_back(s.arm);
    last = s.epoch;
    const bool ar = s.arm == Arm::kAr;
    const double ms = ar ? 14 : 600;
    la.Observe(s, prev[i % 16] == s.epoch);
    la.Committed(sim.now, ar ? 1 : 3);
    prev[i % 16] = s.epoch;
    sim.now += std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::milli>(ms / 16));
  }
  EXPECT_EQ(la.Pairs(level), 0);
  EXPECT_GE(la.Unmeasured(level), 3);
  EXPECT_EQ(la.Epochs(level, Arm::kSpeculative), 0);
  // Alternation stops after two slow speculative epochs, then exploration backs off to every
  // 10 x 8 epochs.
  ASSERT_GE(epochs.size(), 200u);
  EXPECT_EQ(epochs[0], Arm::kSpeculative);
  EXPECT_EQ(epochs[2], Arm::kSpeculative);
  int spec = 0;
  for (size_t i = 4; i < epochs.size(); ++i) spec += epochs[i] == Arm::kSpeculative;
  EXPECT_LE(spec, 1 + static_cast<int>(epochs.size()) / 40) << "of " << epochs.size();
  EXPECT_EQ(la.Backoff(level), 8);
  EXPECT_NEAR(la.ExploreInterval(level), 80, 1e-9);
}

TEST(LoadAwareSpeculation, SpeculativeStepsOutlastingTheirEpochCountAsSlowNotIdle) {
  // Sixteen requests each waiting on its own step, as in the router: a speculative step takes
  // 900 ms (longer than two epochs, so no request starts a new step and the epoch outlives
  // itself), an AR step 14 ms. Such an epoch had requests in flight all along: it was slow, not
  // idle, and exploration backs off.
  LoadAwareSpeculation la;
  auto now = Clock::now();
  constexpr int kRequests = 16;
  int spec_epochs = 0, epochs = 0;
  RunWaitingRequests(
      la, now, kRequests, std::chrono::seconds(300), milliseconds(0),
      [](Arm arm, int) { return arm == Arm::kAr ? 14.0 : 900.0; }, 3,
      [&](Arm arm) {
        ++epochs;
        spec_epochs += arm == Arm::kSpeculative;
      });
  const int level = LoadAwareSpeculation::Level(kRequests);
  EXPECT_GE(la.Unmeasured(level), 3);
  EXPECT_EQ(la.Backoff(level), 8);
  EXPECT_LE(spec_epochs, 1 + epochs / 40) << "of " << epochs << " epochs";
}

TEST(LoadAwareSpeculation, PairedEpochsCancelSlowDriftOfTheMachine) {
  // Speculation is 10% faster than AR at every moment, but the machine slows down threefold over
  // the run (a busy neighbour): every epoch's rate carries the drift, the pairs do not.
  LoadAwareSpeculation la;
  auto t0 = Clock::now();
  auto now = t0;
  for (int i = 0; i < 4; ++i) la.RequestStarted(now);
  std::vector<uint64_t> prev(4, 0);
  int spec = 0, total = 0;
  const double run_s = 30;
  for (int i = 0;; ++i) {
    const double at = std::chrono::duration<double>(now - t0).count();
    if (at > run_s) break;
    const double slow = 1 + 2 * at / run_s;
    auto s = la.Next(now);
    const bool ar = s.arm == Arm::kAr;
    const double ms = (ar ? 5.0 : 5.0 * 2 / 1.1) * slow;  // AR 1 token, speculation 2
    la.Observe(s, prev[i % 4] == s.epoch);
    la.Committed(now, ar ? 1 : 2);
    prev[i % 4] = s.epoch;
    if (at > 5) {
      ++total;
      spec += !ar;
    }
    now += std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::milli>(ms / 4));
  }
  const int level = LoadAwareSpeculation::Level(4);
  EXPECT_NEAR(la.LogAdvantage(level), std::log(1.1), 0.03);
  EXPECT_GT(spec, total * 3 / 4);
}

TEST(LoadAwareSpeculation, AnOutlierEpochDoesNotFlipTheChoice) {
  // AR 250 tokens/s per request against speculation's 200 (log advantage -0.22), but every
  // seventh epoch the machine stalls to a quarter of its speed: those epochs sit in two pairs
  // each, with a log ratio of +1.2 or -1.6.
  LoadAwareSpeculation::Options o;
  o.explore_every = 3;
  LoadAwareSpeculation la(o);
  auto now = Clock::now();
  for (int i = 0; i < 2; ++i) la.RequestStarted(now);
  std::vector<uint64_t> prev(2, 0);
  int flips = 0;
  bool was_negative = false;
  for (int i = 0; i < 2 * 4000; ++i) {
    auto s = la.Next(now);
    const bool ar = s.arm == Arm::kAr;
    const double slow = s.epoch % 7 == 0 ? 4 : 1;
    const double ms = (ar ? 4.0 : 10.0) * slow;
    la.Observe(s, prev[i % 2] == s.epoch);
    la.Committed(now, ar ? 1 : 2);
    prev[i % 2] = s.epoch;
    now += std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double, std::milli>(ms / 2));
    if (la.Pairs(1) >= 4) {
      const bool negative = la.LogAdvantage(1) < 0;
      flips += negative != was_negative && was_negative;
      was_negative = negative;
    }
  }
  EXPECT_GE(la.Pairs(1), 10);
  EXPECT_LT(la.LogAdvantage(1), 0);
  EXPECT_EQ(flips, 0) << "an outlier pair turned the estimate towards speculation";
}

TEST(LoadAwareSpeculation, CleanStepsCountForTheirEpochAndTokensWhenCommitted) {
  LoadAwareSpeculation::Options o;
  o.min_steps = 4;
  LoadAwareSpeculation la(o);
  auto t = Clock::now();
  la.RequestStarted(t);
  auto e1 = la.Next(t);
  // Unclean steps (the request's previous step was in another epoch) never count, and 3 clean
  // ones are too few: epoch 1 is not measured, whatever it committed.
  for (int i = 0; i < 10; ++i) la.Observe(e1, false);
  for (int i = 0; i < 3; ++i) la.Observe(e1, true);
  la.Committed(t + milliseconds(100), 50);
  t += milliseconds(250);
  auto e2 = la.Next(t);
  EXPECT_NE(e2.epoch, e1.epoch);
  // Epoch 2 commits 50 tokens in its 250 ms with one request in flight: 200 tokens/s. It gets 4
  // clean steps, two of them finishing after it closed: they still count.
  for (int i = 0; i < 2; ++i) la.Observe(e2, true);
  la.Committed(t + milliseconds(125), 50);
  t += milliseconds(250);
  auto e3 = la.Next(t);  // measures epoch 1 (not enough steps); epoch 2 waits
  EXPECT_EQ(la.Epochs(0, e1.arm), 0);
  for (int i = 0; i < 2; ++i) la.Observe(e2, true);
  // A step of epoch 1 finishing now is too late for anything.
  for (int i = 0; i < 10; ++i) la.Observe(e1, true);
  // Tokens count for the epoch open when they are committed, whenever their step began.
  la.Committed(t + milliseconds(10), 30);
  for (int i = 0; i < 4; ++i) la.Observe(e3, true);
  t += milliseconds(250);
  la.Next(t);  // measures epoch 2
  EXPECT_EQ(la.Epochs(0, e2.arm), 1);
  EXPECT_NEAR(la.Rate(0, e2.arm), 200, 1e-6);
  // Epoch 4 ran until an idle spell made it outlive itself: not measured.
  auto e4 = la.Next(t);
  for (int i = 0; i < 8; ++i) la.Observe(e4, true);
  la.Committed(t + milliseconds(100), 40);
  t += milliseconds(900);
  la.Next(t);                 // closes epoch 4 (too long) and measures epoch 3: 30 tokens in 250 ms
  ASSERT_NE(e3.arm, e2.arm);  // the level alternates
  EXPECT_EQ(la.Epochs(0, e3.arm), 1);
  EXPECT_NEAR(la.Rate(0, e3.arm), 120, 1e-6);
  t += milliseconds(250);
  la.Next(t);  // measures epoch 4
  const int64_t ar = la.Epochs(0, Arm::kAr), spec = la.Epochs(0, Arm::kSpeculative);
  EXPECT_EQ(ar + spec, 2) << "epochs 2 and 3 measured, 1 and 4 not";
}

TEST(LoadAwareSpeculation, EpochRateIsThroughputPerRequestInFlight) {
  // Two requests in flight for a whole epoch commit 100 tokens in 250 ms: 200 tokens/s each. In
  // the next epoch a third joins halfway (2.5 requests on average) and they commit 150 tokens:
  // 240 tokens/s each.
  LoadAwareSpeculation::Options o;
  o.min_steps = 1;
  LoadAwareSpeculation la(o);
  auto t = Clock::now();
  la.RequestStarted(t);
  la.RequestStarted(t);
  auto e1 = la.Next(t);
  la.Observe(e1, true);
  la.Committed(t + milliseconds(50), 100);
  auto e2 = la.Next(t + milliseconds(250));
  la.RequestStarted(t + milliseconds(375));
  la.Observe(e2, true);
  la.Committed(t + milliseconds(300), 150);
  la.Next(t + milliseconds(500));  // measures epoch 1
  EXPECT_NEAR(la.Rate(1, e1.arm), 200, 1e-6);
  la.Next(t + milliseconds(750));  // measures epoch 2
  EXPECT_NEAR(la.Rate(LoadAwareSpeculation::Level(2.5), e2.arm), 240, 1e-6);
}

TEST(LoadAwareSpeculation, EpochLevelIsTheTimeAveragedLoad) {
  LoadAwareSpeculation la;
  auto t = Clock::now();
  la.RequestStarted(t);
  auto s = la.Next(t);
  EXPECT_EQ(s.level, 0);
  la.RequestStarted(t + milliseconds(10));  // two in flight for almost the whole epoch
  for (int i = 0; i < 8; ++i) {
    la.Observe(s, true);
    la.Committed(t + milliseconds(20 * i), 1);
  }
  auto s2 = la.Next(t + milliseconds(250));
  EXPECT_EQ(s2.level, 1);
  la.Next(t + milliseconds(500));     // measures the first epoch
  EXPECT_EQ(la.Epochs(1, s.arm), 1);  // at level 2, where it ran
  EXPECT_EQ(la.Epochs(0, s.arm), 0);
  EXPECT_EQ(la.in_flight(), 2);
}

TEST(LoadAwareSpeculation, TimeBetweenARequestsStepsCountsAgainstItsArm) {
  // Four requests. A speculative step commits 2 tokens in 10 ms and an AR step 1 token, but
  // every speculative step is followed by 15 ms in which the request has no step going (a
  // round trip, a drafter to start): 80 tokens/s per request against AR's 100. The time of the
  // steps alone would rate speculation at 200.
  LoadAwareSpeculation la(QuickOptions());
  auto now = Clock::now();
  constexpr int kRequests = 4;
  int spec_epochs = 0, epochs = 0;
  RunWaitingRequests(
      la, now, kRequests, std::chrono::seconds(30), milliseconds(3), [](Arm, int) { return 10.0; },
      2,
      [&](Arm arm) {
        ++epochs;
        spec_epochs += arm == Arm::kSpeculative;
      },
      [](Arm arm) { return arm == Arm::kAr ? 0.0 : 15.0; });
  const int level = LoadAwareSpeculation::Level(kRequests);
  EXPECT_NEAR(la.Rate(level, Arm::kAr), 100, 5);
  EXPECT_NEAR(la.Rate(level, Arm::kSpeculative), 80, 8);
  EXPECT_LT(la.LogAdvantage(level), std::log(0.9));
  EXPECT_LT(spec_epochs, epochs / 3) << "of " << epochs << " epochs";
}

TEST(LoadAwareSpeculation, LongStepsStraddlingAnEpochEndStillCount) {
  // Speculative steps take 60 or 180 ms (2 tokens) against AR's 20 ms (1 token): per request AR
  // wins, 50 against 16.7 tokens/s. A speculative epoch holds a dozen steps of two lengths, some
  // of which end in the epoch after; tokens counted when committed measure the true rates.
  LoadAwareSpeculation la;
  auto now = Clock::now();
  constexpr int kRequests = 8;
  RunWaitingRequests(
      la, now, kRequests, std::chrono::seconds(40), milliseconds(7),
      [](Arm arm, int k) { return arm == Arm::kAr ? 20.0 : (k % 2 ? 60.0 : 180.0); }, 2);
  const int level = LoadAwareSpeculation::Level(kRequests);
  EXPECT_NEAR(la.Rate(level, Arm::kAr), 50, 1);
  // The per-epoch speculative rate rests on a dozen steps of two lengths, so it scatters around
  // 16.7 (and a mean of ratios leans high); it is nowhere near AR's.
  EXPECT_NEAR(la.Rate(level, Arm::kSpeculative), 16.7, 0.2 * 16.7);
  EXPECT_LT(la.LogAdvantage(level), std::log(0.5));
}

// A convoy: `n` requests that start together, wait `prefill_ms` for their first token, then step
// together until each has `tokens` tokens (AR: 1 token per `ar_ms`; speculative: `spec_tokens`
// per `spec_ms`), end together and are replaced at once, for `duration` on a 1 ms clock. With
// equal lengths a closed loop stays in step like this: every request's prefill lands in the same
// part of each cycle. Returns the speculative share of the decoding time.
double RunConvoy(LoadAwareSpeculation& la, Clock::time_point& now, int n, double prefill_ms,
                 int tokens, double ar_ms, double spec_ms, int spec_tokens,
                 std::chrono::milliseconds duration) {
  const auto end = now + duration;
  double spec_time = 0, time = 0;
  while (now < end) {
    const auto started = now;
    for (int i = 0; i < n; ++i) la.RequestStarted(now);
    now += milliseconds(static_cast<int>(prefill_ms));
    for (int i = 0; i < n; ++i) la.Committed(now, 1);
    std::vector<uint64_t> prev(n, 0);
    for (int done = 1; done < tokens;) {
      std::vector<LoadAwareSpeculation::Step> steps;
      for (int i = 0; i < n; ++i) steps.push_back(la.Next(now));
      const bool ar = steps[0].arm == Arm::kAr;
      const double ms = ar ? ar_ms : spec_ms;
      now += milliseconds(static_cast<int>(ms));
      time += ms;
      if (!ar) spec_time += ms;
      const int k = std::min(ar ? 1 : spec_tokens, tokens - done);
      for (int i = 0; i < n; ++i) {
        la.Observe(steps[i], prev[i] == steps[i].epoch);
        la.Committed(now, k);
        prev[i] = steps[i].epoch;
      }
      done += k;
    }
    for (int i = 0; i < n; ++i) la.RequestFinished(now, now - started);
  }
  return time > 0 ? spec_time / time : 0;
}

TEST(LoadAwareSpeculation, EpochsAsLongAsARequestSeeEveryPhaseOfAConvoy) {
  // 16 requests of 64 tokens behind a 180 ms prefill; AR decodes them in 320 ms, speculation
  // (3 tokens per 24 ms) in 504 ms: a 500 ms cycle, two default epochs. Epochs that short fall
  // into the prefill half or the decoding half of a cycle, and a pair of adjacent epochs
  // compares the halves, not the arms. An epoch as long as a request sees a whole cycle.
  LoadAwareSpeculation la;
  auto now = Clock::now();
  const double spec_share = RunConvoy(la, now, 16, 180, 64, 5, 24, 3, std::chrono::seconds(120));
  const int level = LoadAwareSpeculation::Level(16);
  EXPECT_GT(la.EpochLength(), milliseconds(450));
  EXPECT_LT(la.EpochLength(), milliseconds(750));
  EXPECT_LT(la.LogAdvantage(level), std::log(0.8));
  EXPECT_LT(spec_share, 0.15);
}

TEST(LoadAwareSpeculation, EpochLengthFollowsRequestLifetimesWithinItsBounds) {
  LoadAwareSpeculation::Options o;
  o.epoch = milliseconds(250);
  o.max_epoch = std::chrono::seconds(1);
  LoadAwareSpeculation la(o);
  auto now = Clock::now();
  EXPECT_EQ(la.EpochLength(), milliseconds(250));
  auto ms = [&] { return std::chrono::duration<double, std::milli>(la.EpochLength()).count(); };
  la.RequestStarted(now);
  la.RequestFinished(now, milliseconds(600));
  EXPECT_NEAR(ms(), 600, 1);
  // A request that did not run to its end says nothing about lifetimes.
  la.RequestStarted(now);
  la.RequestFinished(now);
  EXPECT_NEAR(ms(), 600, 1);
  for (int i = 0; i < 200; ++i) la.RequestFinished(now, std::chrono::seconds(5));
  EXPECT_EQ(la.EpochLength(), std::chrono::seconds(1));
  for (int i = 0; i < 200; ++i) la.RequestFinished(now, milliseconds(20));
  EXPECT_EQ(la.EpochLength(), milliseconds(250));
  // An epoch begun now lasts that long.
  auto s = la.Next(now);
  EXPECT_EQ(s.ends - now, milliseconds(250));
}

}  // namespace
}  // namespace specdec::services
