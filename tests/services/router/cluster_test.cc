// The cluster over real loopback gRPC: four in-process servers on port 0 (target, drafter,
// policy, router). Every method's greedy output equals in-process AR; sampling is reproducible;
// failures degrade as documented; bad requests get the right codes; cancellation frees handles.
#include <prometheus/registry.h>

#include <atomic>
#include <random>
#include <thread>

#include "common/engine/decoder.h"
#include "services/router/load_aware.h"
#include "tests/services/router/cluster_fixture.h"

namespace specdec::services {
namespace {

using cluster_testing::Checkpoints;
using cluster_testing::ClusterTest;

TEST_F(ClusterTest, EveryMethodEqualsInProcessArGreedy) {
  auto target = model::Transformer::Load(Checkpoints().target);
  ASSERT_TRUE(target.ok());
  engine::EngineModels em{target->get()};
  for (int p = 0; p < 4; ++p) {
    const std::vector<int32_t> prompt = TestPrompt(p);
    engine::DecodeOptions ar;
    ar.max_new_tokens = 30;
    auto want = engine::Decode(em, prompt, ar);
    ASSERT_TRUE(want.ok());
    for (v1::Method m :
         {v1::AR, v1::DRAFT_CHAIN, v1::DYSPEC_TREE, v1::DFLASH, v1::DFLASH_ADAPTIVE, v1::NGRAM}) {
      Result r = Generate(Request(prompt, m, 30));
      ASSERT_TRUE(r.status.ok()) << v1::Method_Name(m) << ": " << r.status.error_message();
      EXPECT_EQ(r.tokens, want->tokens) << v1::Method_Name(m) << " prompt " << p;
      const auto& s = r.summary.stats();
      EXPECT_EQ(s.method(), m);
      EXPECT_LE(s.accepted_tokens(), s.drafted_tokens());
      EXPECT_FALSE(s.drafter_fallback()) << s.note();
      EXPECT_EQ(r.summary.usage().completion_tokens(), 30);
      // A load-aware request asks the policy at its first speculative step (if any).
      if (m == v1::DFLASH_ADAPTIVE && s.drafted_tokens() > 0) {
        EXPECT_TRUE(s.block_size_from_policy()) << s.ShortDebugString();
      }
    }
  }
  // Finished requests close their streams, which frees the handles (asynchronously).
  for (int i = 0; i < 300 && target_->handles_in_use() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(target_->handles_in_use(), 0u);
}

// DFLASH requests on a target that hosts the drafter draft there (server-side speculative runs):
// no drafter service is involved, greedy output equals AR, sampled output equals the in-process
// decoder's with the same seed, and every handle is freed.
TEST_F(ClusterTest, TargetHostedDraftingEqualsArAndTheInProcessDecoder) {
  StartAll(true, true, /*target_drafting=*/true);
  drafter_.reset();  // not needed: the target drafts
  auto target = model::Transformer::Load(Checkpoints().target);
  ASSERT_TRUE(target.ok());
  auto dflash = model::DFlashDrafter::Load(Checkpoints().dflash, **target);
  ASSERT_TRUE(dflash.ok()) << dflash.status();
  engine::EngineModels em{target->get()};
  em.dflash = dflash->get();
  for (int p = 0; p < 4; ++p) {
    const std::vector<int32_t> prompt = TestPrompt(p);
    engine::DecodeOptions ar;
    ar.max_new_tokens = 30;
    auto want = engine::Decode(em, prompt, ar);
    ASSERT_TRUE(want.ok());
    for (v1::Method m : {v1::DFLASH, v1::DFLASH_ADAPTIVE}) {
      Result r = Generate(Request(prompt, m, 30));
      ASSERT_TRUE(r.status.ok()) << v1::Method_Name(m) << ": " << r.status.error_message();
      EXPECT_EQ(r.tokens, want->tokens) << v1::Method_Name(m) << " prompt " << p;
      const auto& s = r.summary.stats();
      EXPECT_FALSE(s.drafter_fallback()) << s.note();
      EXPECT_LE(s.accepted_tokens(), s.drafted_tokens());
      EXPECT_EQ(r.summary.usage().completion_tokens(), 30);
      if (m == v1::DFLASH) {
        EXPECT_TRUE(s.target_drafted());
        EXPECT_GT(s.drafted_tokens(), 0);
        EXPECT_EQ(s.block_size(), 5);  // the hosted drafter's training block size
      }
      // Its blocks came from the target's drafter. (Steps the load-aware router ran as AR look up
      // instead: drafts without a drafter, when the learner holds AR, as it may on a slow machine.)
      if (s.drafted_tokens() > 0 && s.load_aware_ar_steps() == 0) {
        EXPECT_TRUE(s.target_drafted()) << v1::Method_Name(m);
      }
    }
  }
  // Sampling: the same seed gives the in-process decoder's tokens (same rule, same streams).
  for (int32_t block : {3, 5}) {
    engine::DecodeOptions o;
    o.method = engine::Method::kDflash;
    o.max_new_tokens = 40;
    o.block_size = block;
    o.sampling.temperature = 1.0f;
    o.sampling.seed = 77;
    const std::vector<int32_t> prompt = {1, 2, 3, 4};
    auto want = engine::Decode(em, prompt, o);
    ASSERT_TRUE(want.ok()) << want.status();
    v1::GenerateRequest req = Request(prompt, v1::DFLASH, 40);
    req.set_block_size(block);
    req.mutable_sampling()->set_temperature(1.0f);
    req.mutable_sampling()->set_seed(77);
    Result a = Generate(req);
    ASSERT_TRUE(a.status.ok()) << a.status.error_message();
    EXPECT_EQ(a.tokens, want->tokens) << "block " << block;
    EXPECT_TRUE(a.summary.stats().target_drafted());
  }
  for (int i = 0; i < 300 && target_->handles_in_use() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(target_->handles_in_use(), 0u);
}

TEST_F(ClusterTest, SampledOutputIsReproducibleWithASeed) {
  for (v1::Method m : {v1::AR, v1::DRAFT_CHAIN, v1::DFLASH}) {
    v1::GenerateRequest req = Request({1, 2, 3, 4}, m, 25);
    req.mutable_sampling()->set_temperature(1.0f);
    req.mutable_sampling()->set_seed(77);
    Result a = Generate(req), b = Generate(req);
    ASSERT_TRUE(a.status.ok() && b.status.ok()) << a.status.error_message();
    EXPECT_EQ(a.tokens, b.tokens) << v1::Method_Name(m);
    req.mutable_sampling()->set_seed(78);
    EXPECT_NE(Generate(req).tokens, a.tokens) << v1::Method_Name(m);
  }
}

TEST_F(ClusterTest, BadRequestsGetInvalidArgumentAndTheClusterKeepsServing) {
  std::vector<v1::GenerateRequest> bad;
  bad.push_back(v1::GenerateRequest());  // no prompt
  bad.push_back(Request({1, 999}, v1::AR, 5));
  bad.push_back(Request({-1}, v1::AR, 5));
  auto t = Request({1, 2}, v1::AR, 5);
  t.mutable_sampling()->set_temperature(1e6);
  bad.push_back(t);
  auto tp = Request({1, 2}, v1::AR, 5);
  tp.mutable_sampling()->set_top_p(1.5);
  bad.push_back(tp);
  auto m = Request({1, 2}, v1::AR, 5);
  m.set_method(static_cast<v1::Method>(42));
  bad.push_back(m);
  bad.push_back(Request({1, 2}, v1::AR, 100000));
  auto bs = Request({1, 2}, v1::DFLASH, 5);
  bs.set_block_size(1);
  bad.push_back(bs);
  for (size_t i = 0; i < bad.size(); ++i) {
    Result r = Generate(bad[i]);
    EXPECT_EQ(r.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << "case " << i;
    EXPECT_FALSE(r.status.error_message().empty());
  }
  EXPECT_TRUE(Generate(Request({1, 2, 3}, v1::DFLASH, 10)).status.ok());
}

TEST_F(ClusterTest, DrafterDownDegradesToArAndPolicyDownToDefaultBlockSize) {
  auto target = model::Transformer::Load(Checkpoints().target);
  engine::EngineModels em{target->get()};
  std::vector<int32_t> prompt = {5, 6, 7, 8};
  engine::DecodeOptions ar;
  ar.max_new_tokens = 20;
  auto want = engine::Decode(em, prompt, ar);
  policy_.reset();  // policy down
  Result r = Generate(Request(prompt, v1::DFLASH_ADAPTIVE, 20));
  ASSERT_TRUE(r.status.ok()) << r.status.error_message();
  EXPECT_EQ(r.tokens, want->tokens);
  EXPECT_TRUE(r.summary.stats().policy_fallback());
  EXPECT_EQ(r.summary.stats().block_size(), 5);  // the drafter's training block size
  drafter_.reset();                              // drafter down
  for (v1::Method m : {v1::DFLASH, v1::DRAFT_CHAIN}) {
    r = Generate(Request(prompt, m, 20));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, want->tokens) << v1::Method_Name(m);
    EXPECT_TRUE(r.summary.stats().drafter_fallback()) << v1::Method_Name(m);
  }
}

TEST_F(ClusterTest, DrafterDyingMidRequestFinishesAsArWithTheSameOutput) {
  auto target = model::Transformer::Load(Checkpoints().target);
  engine::EngineModels em{target->get()};
  std::vector<int32_t> prompt = {9, 8, 7};
  engine::DecodeOptions ar;
  ar.max_new_tokens = 300;
  auto want = engine::Decode(em, prompt, ar);
  ASSERT_TRUE(want.ok());
  for (v1::Method m : {v1::DRAFT_CHAIN, v1::DFLASH}) {
    StartAll(true, true);  // a fresh drafter for each method
    grpc::ClientContext ctx;
    auto reader = stub_->Generate(&ctx, Request(prompt, m, 300));
    // The drafter goes away once it has served a few operations: mid-request whatever the
    // scheduling (the router runs ahead of a slow reader, so the client's progress is no clock).
    std::atomic<bool> killed{false};
    std::thread killer([&] {
      for (int i = 0; i < 3000; ++i) {
        double ops = 0;
        for (const auto& f : drafter_->registry().Collect()) {
          if (f.name != "specdec_drafter_operations_total") continue;
          for (const auto& mm : f.metric) ops += mm.counter.value;
        }
        if (ops >= 10) break;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
      drafter_.reset();
      killed = true;
    });
    std::vector<int32_t> got;
    v1::GenerateResponse resp;
    v1::Summary summary;
    while (reader->Read(&resp)) {
      if (resp.has_chunk()) {
        got.insert(got.end(), resp.chunk().token_ids().begin(), resp.chunk().token_ids().end());
      } else {
        summary = resp.summary();
      }
    }
    killer.join();
    ASSERT_TRUE(reader->Finish().ok()) << v1::Method_Name(m);
    EXPECT_TRUE(killed);
    EXPECT_EQ(got, want->tokens) << v1::Method_Name(m);
    EXPECT_TRUE(summary.stats().drafter_fallback()) << v1::Method_Name(m);
  }
}

TEST_F(ClusterTest, ThousandRandomizedBadRequestsGetTheRightCodes) {
  std::mt19937 rng(123);
  int bad = 0;
  for (int i = 0; i < 1000; ++i) {
    v1::GenerateRequest req = Request({1, 2, 3}, v1::DRAFT_CHAIN, 4);
    switch (rng() % 9) {
      case 0:
        req.clear_token_ids();
        break;  // no prompt
      case 1:
        req.mutable_token_ids()->set_ids(1, 67 + rng() % 1000);
        break;  // id >= vocab
      case 2:
        req.mutable_token_ids()->set_ids(0, -1 - rng() % 100);
        break;  // negative id
      case 3:
        req.mutable_sampling()->set_temperature(101 + rng() % 1000);
        break;
      case 4:
        req.mutable_sampling()->set_top_p(1.0f + (rng() % 100 + 1) / 10.0f);
        break;
      case 5:
        req.mutable_sampling()->set_top_k(-1 - static_cast<int>(rng() % 10));
        break;
      case 6:
        req.set_method(static_cast<v1::Method>(6 + rng() % 100));
        break;
      case 7:
        req.set_max_new_tokens(600 + rng() % 10000);
        break;
      case 8:
        req.set_draft_length(65 + rng() % 100);
        break;
    }
    Result r = Generate(req);
    bad += r.status.error_code() == grpc::StatusCode::INVALID_ARGUMENT &&
           !r.status.error_message().empty();
    if (i % 100 == 0) {  // good requests keep being served meanwhile
      Result good = Generate(Request({4, 5, 6}, v1::DRAFT_CHAIN, 6));
      ASSERT_TRUE(good.status.ok()) << good.status.error_message();
      EXPECT_EQ(good.tokens.size(), 6u);
    }
  }
  EXPECT_EQ(bad, 1000);
}

TEST_F(ClusterTest, TargetDownIsUnavailableWithinTheDeadline) {
  target_.reset();
  const auto t0 = std::chrono::steady_clock::now();
  Result r = Generate(Request({1, 2, 3}, v1::AR, 5), 3000);
  EXPECT_TRUE(r.status.error_code() == grpc::StatusCode::UNAVAILABLE ||
              r.status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
      << r.status.error_code() << " " << r.status.error_message();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // The router itself stays up.
  grpc::ClientContext ctx;
  v1::RouterInfo info;
  EXPECT_TRUE(stub_->GetInfo(&ctx, v1::GetInfoRequest(), &info).ok());
}

TEST_F(ClusterTest, ClientCancelReleasesTargetAndDrafterHandles) {
  for (v1::Method m : {v1::AR, v1::DRAFT_CHAIN, v1::DFLASH}) {
    grpc::ClientContext ctx;
    auto reader = stub_->Generate(&ctx, Request({1, 2, 3}, m, 400));
    v1::GenerateResponse resp;
    ASSERT_TRUE(reader->Read(&resp));
    ctx.TryCancel();
    while (reader->Read(&resp)) {
    }
    EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  }
  for (int i = 0; i < 300 && (target_->handles_in_use() + drafter_->handles_in_use()) > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(target_->handles_in_use(), 0u);
  EXPECT_EQ(drafter_->handles_in_use(), 0u);
}

// The sum of counter `name` over the children whose labels include every pair of `labels`.
double Sum(prometheus::Registry& r, const std::string& name,
           const std::map<std::string, std::string>& labels = {}) {
  double total = 0;
  for (const auto& f : r.Collect()) {
    if (f.name != name) continue;
    for (const auto& m : f.metric) {
      size_t matched = 0;
      for (const auto& l : m.label) {
        auto it = labels.find(l.name);
        matched += it != labels.end() && it->second == l.value;
      }
      if (matched == labels.size()) total += m.counter.value;
    }
  }
  return total;
}

TEST_F(ClusterTest, MetricsAgreeWithWhatClientsSaw) {
  int64_t committed = 0, steps = 0;
  for (int i = 0; i < 3; ++i) {
    Result r = Generate(Request({3, 1, 4, 1, 5}, v1::DRAFT_CHAIN, 20));
    ASSERT_TRUE(r.status.ok());
    committed += r.summary.stats().accepted_tokens();
    steps += r.summary.stats().verify_steps();
  }
  auto& reg = router_->registry();
  const double drafted = Sum(reg, "specdec_spec_decode_num_draft_tokens_total");
  const double accepted = Sum(reg, "specdec_spec_decode_num_accepted_tokens_total");
  EXPECT_GT(drafted, 0);
  EXPECT_LE(accepted, drafted);
  EXPECT_EQ(accepted, committed);
  double per_pos = Sum(reg, "specdec_spec_decode_num_accepted_tokens_per_pos_total");
  EXPECT_EQ(per_pos, accepted);
  EXPECT_GT(Sum(reg, "specdec_spec_decode_num_drafts_total"), 0);
  EXPECT_LE(Sum(reg, "specdec_spec_decode_num_drafts_total"), steps);
}

// The Summary splits the target round trips the router measured into the target's compute, its
// queue and the rest (network): positive network time, never more than the round trips.
TEST_F(ClusterTest, TimingsSplitTargetRoundTripsIntoQueueAndNetwork) {
  for (v1::Method m : {v1::AR, v1::DRAFT_CHAIN}) {
    Result r = Generate(Request({3, 1, 4, 1, 5}, m, 12));
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    const v1::StageTimings& t = r.summary.stats().timings();
    EXPECT_GT(t.network_ms(), 0) << v1::Method_Name(m);
    EXPECT_GE(t.queue_ms(), 0) << v1::Method_Name(m);
    EXPECT_LE(t.network_ms() + t.queue_ms(), t.prefill_ms() + t.verify_ms() + 1e-6)
        << v1::Method_Name(m);
    EXPECT_LT(t.network_ms(), t.total_ms()) << v1::Method_Name(m);
  }
}

// Sum of the counter or gauge values of `name` whose label `label` equals `value`.
double Labelled(prometheus::Registry& r, const std::string& name, const std::string& label,
                const std::string& value) {
  double total = 0;
  for (const auto& f : r.Collect()) {
    if (f.name != name) continue;
    for (const auto& m : f.metric) {
      for (const auto& l : m.label) {
        if (l.name == label && l.value == value) total += m.counter.value + m.gauge.value;
      }
    }
  }
  return total;
}

TEST_F(ClusterTest, ConcurrentRequestsAreBatchedOnTheTargetAndEqualAr) {
  auto target = model::Transformer::Load(Checkpoints().target);
  engine::EngineModels em{target->get()};
  constexpr int kClients = 8;
  const v1::Method methods[] = {v1::AR, v1::DFLASH, v1::DRAFT_CHAIN, v1::DYSPEC_TREE};
  std::vector<std::vector<int32_t>> want(kClients);
  for (int i = 0; i < kClients; ++i) {
    engine::DecodeOptions ar;
    ar.max_new_tokens = 40;
    const std::vector<int32_t> prompt = {3 + i, 7, 20 + i};
    auto r = engine::Decode(em, prompt, ar);
    ASSERT_TRUE(r.ok());
    want[i] = r->tokens;
  }
  std::vector<Result> got(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      got[i] = Generate(Request({3 + i, 7, 20 + i}, methods[i % 4], 40));
    });
  }
  for (auto& t : clients) t.join();
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << i << ": " << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, want[i]) << i << " " << v1::Method_Name(methods[i % 4]);
  }
  // Some verify passes held several sessions: the batch-size histogram's sum exceeds its count.
  double sum = 0, count = 0;
  for (const auto& f : target_->registry().Collect()) {
    if (f.name != "specdec_target_batch_size") continue;
    for (const auto& m : f.metric) {
      sum += m.histogram.sample_sum;
      count += static_cast<double>(m.histogram.sample_count);
    }
  }
  EXPECT_GT(count, 0);
  EXPECT_GT(sum, count) << "no verify pass batched two sessions";
}

TEST_F(ClusterTest, LoadAwareAdaptiveRequestsUnderLoadEqualAr) {
  auto target = model::Transformer::Load(Checkpoints().target);
  engine::EngineModels em{target->get()};
  constexpr int kClients = 6;
  std::vector<std::vector<int32_t>> want(kClients);
  for (int i = 0; i < kClients; ++i) {
    engine::DecodeOptions ar;
    ar.max_new_tokens = 60;
    const std::vector<int32_t> prompt = {30 + i, 2, 9};
    auto r = engine::Decode(em, prompt, ar);
    ASSERT_TRUE(r.ok());
    want[i] = r->tokens;
  }
  std::vector<Result> got(kClients);
  std::vector<std::thread> clients;
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      got[i] = Generate(Request({30 + i, 2, 9}, v1::DFLASH_ADAPTIVE, 60));
    });
  }
  for (auto& t : clients) t.join();
  int loaded = 0, ar_steps = 0, steps = 0;
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << got[i].status.error_message();
    EXPECT_EQ(got[i].tokens, want[i]) << i;
    const auto& st = got[i].summary.stats();
    EXPECT_EQ(st.method(), v1::DFLASH_ADAPTIVE);
    loaded += st.in_flight_at_start() >= 2;
    ar_steps += st.load_aware_ar_steps();
    steps += st.verify_steps();
    EXPECT_LE(st.load_aware_ar_steps(), st.verify_steps());
    EXPECT_EQ(st.load_aware_ar(), st.load_aware_ar_steps() > 0 && st.drafted_tokens() == 0);
  }
  EXPECT_GT(loaded, 0) << "the requests never overlapped";
  // Every load-aware step was counted by arm, and at least one epoch was chosen.
  EXPECT_EQ(
      Sum(router_->registry(), "specdec_load_aware_steps_total"),
      Sum(router_->registry(), "specdec_load_aware_steps_total", {{"arm", "AR"}}) +
          Sum(router_->registry(), "specdec_load_aware_steps_total", {{"arm", "speculative"}}));
  EXPECT_EQ(Sum(router_->registry(), "specdec_load_aware_steps_total", {{"arm", "AR"}}), ar_steps);
  EXPECT_GE(Sum(router_->registry(), "specdec_load_aware_choices_total"), 1);
  // Exploration starts with speculation and then alternates: the requests ran some speculative
  // steps.
  EXPECT_LT(ar_steps, steps);
}

TEST_F(ClusterTest, LoadAwareRequestSwitchingArmsMidRequestEqualsAr) {
  // Short epochs so that a single request crosses many of them and runs both kinds of steps;
  // the drafter must receive the features of the AR-committed tokens to stay in sync.
  RestartRouterWithLoadAwareEpochMs(5);
  auto target = model::Transformer::Load(Checkpoints().target);
  engine::EngineModels em{target->get()};
  int switched = 0;  // requests that ran both kinds of steps
  for (int p = 0; p < 3; ++p) {
    const std::vector<int32_t> prompt = {40 + p, 7, 3, 11};
    engine::DecodeOptions ar;
    ar.max_new_tokens = 80;
    auto want = engine::Decode(em, prompt, ar);
    ASSERT_TRUE(want.ok());
    Result got = Generate(Request(prompt, v1::DFLASH_ADAPTIVE, 80));
    ASSERT_TRUE(got.status.ok()) << got.status.error_message();
    EXPECT_EQ(got.tokens, want->tokens) << p;
    const auto& st = got.summary.stats();
    EXPECT_FALSE(st.drafter_fallback()) << st.note();
    EXPECT_LE(st.load_aware_ar_steps(), st.verify_steps());
    switched += st.load_aware_ar_steps() > 0 && st.drafted_tokens() > 0;
  }
  // The level alternates arms while it learns, so some request switched mid-request.
  EXPECT_GT(switched, 0);
}

TEST_F(ClusterTest, AdmissionQueuesThenRefusesBeyondCapacityAndKeepsServing) {
  auto queued = [&] {
    for (const auto& f : router_->registry().Collect()) {
      if (f.name == "specdec_queued_requests" && !f.metric.empty()) {
        return f.metric[0].gauge.value;
      }
    }
    return -1.0;
  };
  // A long request holds the only slot; its first chunk proves it is being served. (500 tokens
  // of this model take tens of milliseconds: far longer than the waits below, which are timed
  // from moments when it is known to be running.)
  struct Holder {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> stream;
    int tokens = 0;
  };
  auto hold = [&](Holder& h) {
    h.stream = stub_->Generate(&h.ctx, Request({5, 6, 7}, v1::AR, 500));
    v1::GenerateResponse msg;
    ASSERT_TRUE(h.stream->Read(&msg));
    h.tokens = msg.chunk().token_ids_size();
  };
  // The holder was not disturbed.
  auto finish = [&](Holder& h) {
    v1::GenerateResponse msg;
    while (h.stream->Read(&msg)) h.tokens += msg.chunk().token_ids_size();
    EXPECT_TRUE(h.stream->Finish().ok());
    EXPECT_EQ(h.tokens, 500);
  };

  // One request served at a time; one more may wait, here for 10 s: the second waits in the
  // queue, the third finds the queue full and is refused at once, and the second is served
  // when the slot frees.
  RestartRouterWithAdmission(1, 1, 10000);
  {
    Holder first;
    hold(first);
    Result second, third;
    std::thread t2([&] { second = Generate(Request({1, 2, 3}, v1::AR, 8)); });
    while (queued() < 1) std::this_thread::sleep_for(std::chrono::microseconds(200));
    third = Generate(Request({1, 2, 3}, v1::AR, 8));
    EXPECT_EQ(third.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << third.status.error_message();
    EXPECT_NE(third.status.error_message().find("--max-queued-requests"), std::string::npos)
        << third.status.error_message();
    finish(first);
    t2.join();
    ASSERT_TRUE(second.status.ok()) << second.status.error_message();
    EXPECT_EQ(second.tokens.size(), 8u);
  }

  // A queued request waits at most --queue-timeout-ms (here 5 ms), then gives up.
  RestartRouterWithAdmission(1, 1, 5);
  Holder first;
  hold(first);
  Result second = Generate(Request({1, 2, 3}, v1::AR, 8));
  EXPECT_EQ(second.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
      << second.status.error_message();
  EXPECT_NE(second.status.error_message().find("--queue-timeout-ms"), std::string::npos)
      << second.status.error_message();
  finish(first);
  // Its slot is free again.
  Result again = Generate(Request({1, 2, 3}, v1::AR, 8));
  ASSERT_TRUE(again.status.ok()) << again.status.error_message();
  EXPECT_EQ(again.tokens.size(), 8u);
  EXPECT_EQ(queued(), 0);
}

TEST_F(ClusterTest, TargetReplicasShareRequestsAndADeadOneIsSkipped) {
  auto target = model::Transformer::Load(Checkpoints().target);
  engine::EngineModels em{target->get()};
  std::vector<int32_t> prompt = {4, 5, 6};
  engine::DecodeOptions ar;
  ar.max_new_tokens = 24;
  auto want = engine::Decode(em, prompt, ar);
  ASSERT_TRUE(want.ok());

  TargetServerOptions to;
  to.address = "127.0.0.1:0";
  to.metrics_address = "";
  to.model_dir = Checkpoints().target;
  to.threads = 1;
  to.replica = "second";
  auto second = TargetServer::Start(to);
  ASSERT_TRUE(second.ok()) << second.status();
  const std::string a = Addr(target_->port()), b = Addr((*second)->port());
  RouterServerOptions ro;
  ro.address = "127.0.0.1:0";
  ro.metrics_address = "";
  ro.http_address = "127.0.0.1:0";
  ro.target_address = a + "," + b;
  ro.drafter_address = Addr(drafter_->port());
  ro.policy_address = Addr(policy_->port());
  ro.health_interval_ms = 60000;  // only failures mark replicas down in this test
  auto router = RouterServer::Start(ro);
  ASSERT_TRUE(router.ok()) << router.status();
  auto stub = v1::Router::NewStub(
      grpc::CreateChannel(Addr((*router)->port()), grpc::InsecureChannelCredentials()));
  auto& reg = (*router)->registry();

  for (int i = 0; i < 4; ++i) {
    Result r = Generate(Request(prompt, v1::DFLASH, 24), 30000, stub.get());
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, want->tokens);
  }
  EXPECT_EQ(Labelled(reg, "specdec_replica_picks_total", "address", a), 2);
  EXPECT_EQ(Labelled(reg, "specdec_replica_picks_total", "address", b), 2);
  EXPECT_EQ(Labelled(reg, "specdec_replica_healthy", "address", a), 1);

  target_.reset();  // replica a dies: its next pick fails over to b within the same request
  for (int i = 0; i < 4; ++i) {
    Result r = Generate(Request(prompt, v1::DRAFT_CHAIN, 24), 30000, stub.get());
    ASSERT_TRUE(r.status.ok()) << r.status.error_message();
    EXPECT_EQ(r.tokens, want->tokens);
  }
  EXPECT_EQ(Labelled(reg, "specdec_replica_healthy", "address", a), 0);
  EXPECT_EQ(Labelled(reg, "specdec_replica_healthy", "address", b), 1);
  EXPECT_EQ(Labelled(reg, "specdec_replica_picks_total", "address", b), 6);
  for (int i = 0; i < 300 && (*second)->handles_in_use() > 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // released as streams end
  }
  EXPECT_EQ((*second)->handles_in_use(), 0u);

  (*second).reset();  // no target left: UNAVAILABLE naming the replicas
  Result r = Generate(Request(prompt, v1::AR, 4), 5000, stub.get());
  EXPECT_EQ(r.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(r.status.error_message().find("no healthy target replica"), std::string::npos)
      << r.status.error_message();
}

}  // namespace
}  // namespace specdec::services
