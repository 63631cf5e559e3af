// The target service over real loopback gRPC: results equal the in-process engine, errors are
// per-operation with the documented codes, prompts join other requests' passes, handles follow
// their streams, leases and budget.
#include "services/target/target_service.h"

#include <ATen/ATen.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <limits>
#include <thread>

#include "common/engine/target_session.h"
#include "common/model/dflash_drafter.h"
#include "common/model/transformer.h"
#include "common/util/status_matchers.h"
#include "services/common/lookup_weighing_proto.h"
#include "services/common/tensor_proto.h"
#include "specdec/v1/target.grpc.pb.h"
#include "tests/services/test_checkpoints.h"

namespace specdec::services {
namespace {

using Stream = grpc::ClientReaderWriter<v1::TargetRequest, v1::TargetResponse>;

model::ModelConfig SmallConfig() {
  model::ModelConfig c;
  c.architecture = model::Architecture::kQwen3;
  c.qk_norm = true;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = 128;
  c.tie_word_embeddings = true;
  return c;
}

// Writes a random checkpoint once per process.
const std::string& ModelDir() {
  static const std::string* dir = [] {
    auto c = SmallConfig();
    return new std::string(testing_util::WriteCheckpoint(
        "target_svc", model::Transformer::RandomWeights(c, 5, 0.3), model::ModelConfigToJson(c)));
  }();
  return *dir;
}

// The same shapes with a context of 2048: room for runs that last long beside other requests.
const std::string& LongContextModelDir() {
  static const std::string* dir = [] {
    auto c = SmallConfig();
    c.max_position_embeddings = 2048;
    return new std::string(testing_util::WriteCheckpoint(
        "target_svc_long", model::Transformer::RandomWeights(c, 5, 0.3),
        model::ModelConfigToJson(c)));
  }();
  return *dir;
}

const std::string& DFlashDir() {
  static const std::string* dir = [] {
    model::DFlashConfig fc;
    fc.layers = SmallConfig();
    fc.layers.num_hidden_layers = 1;
    fc.block_size = 4;
    fc.mask_token_id = 60;
    fc.target_layer_ids = {0, 1};
    return new std::string(testing_util::WriteCheckpoint(
        "target_svc_dflash", model::DFlashDrafter::RandomWeights(fc, 32, 7, 0.3),
        model::DFlashConfigToJson(fc)));
  }();
  return *dir;
}

class TargetServiceTest : public ::testing::Test {
 protected:
  void StartServer(int64_t budget = int64_t{1} << 30, int64_t lease_ms = 60000,
                   bool host_drafter = false) {
    TargetServerOptions o;
    o.address = "127.0.0.1:0";
    o.metrics_address = "";
    o.model_dir = model_dir_.empty() ? ModelDir() : model_dir_;
    if (host_drafter) o.dflash_dir = DFlashDir();
    o.replica = "t0";
    o.kv_budget_bytes = budget;
    o.lease_ms = lease_ms;
    o.threads = 1;
    o.batch_prefill_max_rows = batch_prefill_max_rows_;
    o.iteration_prefill_max_rows = iteration_prefill_max_rows_;
    auto s = TargetServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    stub_ = v1::Target::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                                    grpc::InsecureChannelCredentials()));
  }

  struct Open {
    std::unique_ptr<grpc::ClientContext> ctx = std::make_unique<grpc::ClientContext>();
    std::unique_ptr<Stream> stream;
  };
  Open OpenStream() {
    Open o;
    o.stream = stub_->Session(o.ctx.get());
    return o;
  }

  static v1::TargetResponse Call(Stream* s, const v1::TargetRequest& req) {
    EXPECT_TRUE(s->Write(req));
    v1::TargetResponse resp;
    EXPECT_TRUE(s->Read(&resp));
    EXPECT_EQ(resp.seq(), req.seq());
    return resp;
  }

  static v1::TargetRequest Prefill(uint64_t seq, std::vector<int32_t> tokens, float t = 0.f) {
    v1::TargetRequest r;
    r.set_seq(seq);
    for (int32_t x : tokens) r.mutable_prefill()->add_tokens(x);
    r.mutable_prefill()->mutable_sampling()->set_temperature(t);
    r.mutable_prefill()->mutable_sampling()->set_seed(11);
    return r;
  }
  static v1::TargetRequest Verify(uint64_t seq, const std::string& h, std::vector<int32_t> rows) {
    v1::TargetRequest r;
    r.set_seq(seq);
    r.mutable_verify()->set_handle(h);
    for (int32_t x : rows) r.mutable_verify()->add_tokens(x);
    r.mutable_verify()->set_proposal(v1::TargetVerify::ONE_HOT);
    return r;
  }

  // A server-side run of up to `max_tokens` tokens from `last`.
  static v1::TargetRequest Run(uint64_t seq, const std::string& h, int32_t last,
                               int32_t max_tokens) {
    v1::TargetRequest r;
    r.set_seq(seq);
    r.mutable_run()->set_handle(h);
    r.mutable_run()->set_last_token(last);
    r.mutable_run()->set_max_tokens(max_tokens);
    return r;
  }

  bool WaitForHandles(size_t n) {
    for (int i = 0; i < 300 && server_->handles_in_use() != n; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return server_->handles_in_use() == n;
  }

  // What PrefillsBesideARun saw: prompts answered from a pass of several sequences, and the
  // run's steps whose pass carried more rows than its own.
  struct Sharing {
    int joined = 0, wide = 0;
  };
  // Prompts beside a long server-side run (a verify in every scheduler iteration), one of them
  // bad, three rounds: each answer equals the in-process prefill, the run's tokens equal
  // stepwise decoding.
  Sharing PrefillsBesideARun();

  int batch_prefill_max_rows_ = 256;
  int iteration_prefill_max_rows_ = 256;
  std::string model_dir_;  // empty: ModelDir()
  std::unique_ptr<TargetServer> server_;
  std::unique_ptr<v1::Target::Stub> stub_;
};

TEST_F(TargetServiceTest, PrefillAndVerifyEqualTheInProcessSession) {
  StartServer();
  auto model = model::Transformer::Load(ModelDir());
  ASSERT_TRUE(model.ok());
  engine::TargetSession local(**model, sampling::SamplingParams{0.f, 0, 1.f, 11}, {});
  std::vector<int32_t> prompt = {3, 9, 27, 20, 1};
  auto lp = local.Prefill(prompt);
  ASSERT_TRUE(lp.ok());

  Open o = OpenStream();
  v1::TargetResponse r = Call(o.stream.get(), Prefill(1, prompt));
  ASSERT_TRUE(r.has_prefill()) << r.error().message();
  EXPECT_EQ(r.prefill().first_token(), lp->first_token);
  EXPECT_EQ(r.prefill().handle().length(), 5);
  EXPECT_GT(r.prefill().compute_ms(), 0) << "the prefill's compute, for the router's timings";
  EXPECT_GE(r.prefill().queue_ms(), 0);
  const std::string h = r.prefill().handle().id();
  EXPECT_EQ(h.rfind("t0/", 0), 0u);
  // The lease as the handle reports it: its idle timeout, and when it ends unless renewed.
  EXPECT_EQ(r.prefill().handle().lease_ms(), 60000);
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                             std::chrono::system_clock::now().time_since_epoch())
                             .count();
  EXPECT_GT(r.prefill().handle().lease_expires_unix_ms(), now_ms + 50000);
  EXPECT_LE(r.prefill().handle().lease_expires_unix_ms(), now_ms + 60000);

  // Three greedy verify steps with arbitrary drafts.
  int32_t last = lp->first_token;
  for (int step = 0; step < 3; ++step) {
    std::vector<int32_t> rows = {last, (last + 7) % 61, (last * 3) % 61, 4};
    engine::VerifyRequest vr;
    vr.tokens = rows;
    vr.proposal = engine::Proposal::kOneHot;
    auto lv = local.Verify(vr);
    ASSERT_TRUE(lv.ok());
    v1::TargetResponse resp = Call(o.stream.get(), Verify(2 + step, h, rows));
    ASSERT_TRUE(resp.has_verify()) << resp.error().message();
    EXPECT_EQ(
        std::vector<int32_t>(resp.verify().committed().begin(), resp.verify().committed().end()),
        lv->committed);
    EXPECT_EQ(resp.verify().length(), local.length());
    last = resp.verify().next_token();
  }
  o.stream->WritesDone();
  EXPECT_TRUE(o.stream->Finish().ok());
}

TEST_F(TargetServiceTest, ErrorsArePerOperationAndTheStreamKeepsServing) {
  StartServer();
  Open o = OpenStream();
  auto r = Call(o.stream.get(), Verify(1, "t0/999-1", {1, 2}));
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().code(), grpc::StatusCode::NOT_FOUND);
  r = Call(o.stream.get(), Verify(2, "t7/1-1", {1, 2}));
  EXPECT_EQ(r.error().code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(r.error().message().find("not minted by replica 't0'"), std::string::npos);
  r = Call(o.stream.get(), Prefill(3, {1, 99}));
  EXPECT_EQ(r.error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(r.error().message().find("99"), std::string::npos) << r.error().message();
  r = Call(o.stream.get(), Prefill(4, {}));
  EXPECT_EQ(r.error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::TargetRequest bad_t = Prefill(5, {1, 2});
  bad_t.mutable_prefill()->mutable_sampling()->set_temperature(-1);
  EXPECT_EQ(Call(o.stream.get(), bad_t).error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Sampled proposals at T>0 need the draft distribution.
  r = Call(o.stream.get(), Prefill(6, {1, 2, 3}, 1.0f));
  ASSERT_TRUE(r.has_prefill());
  v1::TargetRequest v = Verify(7, r.prefill().handle().id(), {r.prefill().first_token(), 5});
  v.mutable_verify()->set_proposal(v1::TargetVerify::SAMPLED);
  auto e = Call(o.stream.get(), v);
  EXPECT_EQ(e.error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(e.error().message().find("draft_probs"), std::string::npos);
  // Still serving: a good prefill works and the failed ones left no handles behind.
  EXPECT_TRUE(Call(o.stream.get(), Prefill(8, {4, 5})).has_prefill());
  EXPECT_EQ(server_->handles_in_use(), 2u);
  o.stream->WritesDone();
  EXPECT_TRUE(o.stream->Finish().ok());
}

TEST_F(TargetServiceTest, StreamEndAndCancelReleaseHandles) {
  StartServer();
  {
    Open o = OpenStream();
    ASSERT_TRUE(Call(o.stream.get(), Prefill(1, {1, 2, 3})).has_prefill());
    ASSERT_TRUE(Call(o.stream.get(), Prefill(2, {4, 5})).has_prefill());
    EXPECT_EQ(server_->handles_in_use(), 2u);
    EXPECT_GT(server_->kv_bytes_in_use(), 0);
    o.stream->WritesDone();
    EXPECT_TRUE(o.stream->Finish().ok());
  }
  EXPECT_TRUE(WaitForHandles(0));
  EXPECT_EQ(server_->kv_bytes_in_use(), 0);
  {
    Open o = OpenStream();
    ASSERT_TRUE(Call(o.stream.get(), Prefill(1, {1, 2, 3})).has_prefill());
    o.ctx->TryCancel();  // a client that disappears
    o.stream->Finish();
  }
  EXPECT_TRUE(WaitForHandles(0));
}

// Decodes `n` tokens after a prefill one verify at a time (what a client without runs sends).
std::vector<int32_t> StepwiseTokens(v1::Target::Stub* stub, std::vector<int32_t> prompt, float t,
                                    int n) {
  grpc::ClientContext ctx;
  auto s = stub->Session(&ctx);
  v1::TargetRequest p;
  p.set_seq(1);
  for (int32_t x : prompt) p.mutable_prefill()->add_tokens(x);
  p.mutable_prefill()->mutable_sampling()->set_temperature(t);
  p.mutable_prefill()->mutable_sampling()->set_seed(11);
  v1::TargetResponse r;
  EXPECT_TRUE(s->Write(p) && s->Read(&r));
  std::vector<int32_t> out;
  int32_t last = r.prefill().first_token();
  for (int i = 0; i < n; ++i) {
    v1::TargetRequest v;
    v.set_seq(2 + i);
    v.mutable_verify()->set_handle(r.prefill().handle().id());
    v.mutable_verify()->add_tokens(last);
    v1::TargetResponse vr;
    EXPECT_TRUE(s->Write(v) && s->Read(&vr));
    last = vr.verify().next_token();
    out.push_back(last);
  }
  s->WritesDone();
  s->Finish();
  return out;
}

TEST_F(TargetServiceTest, ARunDecodesServerSideExactlyLikeSingleSteps) {
  StartServer();
  const std::vector<int32_t> prompt = {3, 9, 27, 20, 1};
  for (float t : {0.f, 1.f}) {
    const std::vector<int32_t> want = StepwiseTokens(stub_.get(), prompt, t, 20);
    Open o = OpenStream();
    v1::TargetResponse r = Call(o.stream.get(), Prefill(1, prompt, t));
    ASSERT_TRUE(r.has_prefill()) << r.error().message();
    v1::TargetRequest run = Run(2, r.prefill().handle().id(), r.prefill().first_token(), 20);
    ASSERT_TRUE(o.stream->Write(run));
    // Half-closing does not cut the run short: the stream ends after its last answer.
    o.stream->WritesDone();
    std::vector<int32_t> got;
    v1::TargetResponse step;
    while (o.stream->Read(&step)) {
      ASSERT_TRUE(step.has_verify()) << step.error().message();
      EXPECT_EQ(step.seq(), 2u);
      EXPECT_EQ(step.verify().run_left(), 19 - static_cast<int>(got.size()));
      EXPECT_EQ(step.verify().length(), 6 + static_cast<int64_t>(got.size()));
      got.push_back(step.verify().next_token());
    }
    EXPECT_TRUE(o.stream->Finish().ok());
    EXPECT_EQ(got, want) << "temperature " << t;
  }
  EXPECT_TRUE(WaitForHandles(0));
}

TargetServiceTest::Sharing TargetServiceTest::PrefillsBesideARun() {
  auto model = model::Transformer::Load(ModelDir());
  EXPECT_TRUE(model.ok());
  if (!model.ok()) return {-1, -1};
  const std::vector<int32_t> prompt = {3, 9, 27, 20, 1};
  const std::vector<int32_t> want = StepwiseTokens(stub_.get(), prompt, 0.f, 110);
  // A long server-side run keeps a verify in every scheduler iteration.
  Open a = OpenStream();
  v1::TargetResponse r = Call(a.stream.get(), Prefill(1, prompt));
  EXPECT_TRUE(r.has_prefill()) << r.error().message();
  v1::TargetRequest run = Run(2, r.prefill().handle().id(), r.prefill().first_token(), 110);
  EXPECT_TRUE(a.stream->Write(run));
  a.stream->WritesDone();
  int wide = 0;  // the run's steps whose pass carried more rows than its own (a prompt's)
  std::thread reader([&] {
    std::vector<int32_t> got;
    v1::TargetResponse step;
    while (a.stream->Read(&step)) {
      got.push_back(step.verify().next_token());
      EXPECT_GE(step.verify().pass_rows(), 1);
      // The run's own row is one of its pass's rows; the others are prompts that joined it.
      EXPECT_EQ(step.verify().pass_prompt_rows(), step.verify().pass_rows() - 1);
      wide += step.verify().pass_rows() > 1;
    }
    EXPECT_TRUE(a.stream->Finish().ok());
    EXPECT_EQ(got, want);
  });
  // Meanwhile prompts of other streams, one of them bad, arrive.
  const std::vector<std::vector<int32_t>> prompts = {
      {5, 6, 7}, {8, 9, 10, 11, 12, 13}, {1, 99, 2}, {40, 41}, {2, 4, 8, 16, 32, 3, 6}};
  int joined = 0;
  for (int round = 0; round < 3; ++round) {
    std::vector<Open> opens(prompts.size());
    for (size_t i = 0; i < prompts.size(); ++i) {
      opens[i] = OpenStream();
      EXPECT_TRUE(opens[i].stream->Write(Prefill(1, prompts[i])));
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      v1::TargetResponse pr;
      EXPECT_TRUE(opens[i].stream->Read(&pr));
      if (i == 2) {
        EXPECT_EQ(pr.error().code(), static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
        EXPECT_NE(pr.error().message().find("99"), std::string::npos) << pr.error().message();
      } else {
        EXPECT_TRUE(pr.has_prefill()) << pr.error().message();
        engine::TargetSession local(**model, sampling::SamplingParams{0.f, 0, 1.f, 11}, {});
        auto lp = local.Prefill(prompts[i]);
        EXPECT_TRUE(lp.ok());
        if (!lp.ok()) continue;
        EXPECT_EQ(pr.prefill().first_token(), lp->first_token) << i;
        EXPECT_EQ(pr.prefill().handle().length(), static_cast<int64_t>(prompts[i].size()));
        joined += pr.prefill().batch_size() > 1;
      }
      opens[i].stream->WritesDone();
      EXPECT_TRUE(opens[i].stream->Finish().ok());
    }
  }
  reader.join();
  EXPECT_TRUE(WaitForHandles(0));
  // A wide pass of the run carried a prompt, which then answered from a shared pass.
  EXPECT_TRUE(wide == 0 || joined > 0) << wide << " wide passes, " << joined << " prompts joined";
  return {joined, wide};
}

TEST_F(TargetServiceTest, PrefillsJoinARunningRequestsPassAndAnswerAsAlone) {
  StartServer();
  // Prompts arriving while the run decodes share its passes (and each other's). On a loaded
  // machine the 110-token run can end before a round of prompts arrives: up to 5 tries.
  Sharing sharing;
  for (int attempt = 0; attempt < 5 && sharing.wide == 0; ++attempt) {
    sharing = PrefillsBesideARun();
  }
  EXPECT_GT(sharing.wide, 0);
  EXPECT_GT(sharing.joined, 0);
}

TEST_F(TargetServiceTest, PrefillsRunInPassesOfTheirOwnWithARowBudgetOfZero) {
  batch_prefill_max_rows_ = 0;
  StartServer();
  const Sharing sharing = PrefillsBesideARun();
  EXPECT_EQ(sharing.joined, 0);
  EXPECT_EQ(sharing.wide, 0);
}

TEST_F(TargetServiceTest, PromptsBeyondAnIterationsBudgetWaitAndAnswerAsAlone) {
  // With a 4-row budget, prompts queued together spread over several scheduler iterations: each
  // is answered once, as alone, beside a run whose tokens stay stepwise decoding's, and every
  // handle is freed (PrefillsBesideARun).
  iteration_prefill_max_rows_ = 4;
  StartServer();
  Sharing sharing;
  for (int attempt = 0; attempt < 5 && sharing.wide == 0; ++attempt) {
    sharing = PrefillsBesideARun();
  }
  EXPECT_GT(sharing.wide, 0);
}

// Chunked prefill: with a 16-row budget, a 100-token prompt arriving beside a running request is
// prefilled over several scheduler iterations, at most 16 of its rows in any of the run's passes,
// and answered once, as alone: the in-process prefill's first token and every prompt row's
// features; its next verify agrees too, the run's tokens stay stepwise decoding's, and a stream
// that goes away in the middle of a prompt leaves no handle behind.
TEST_F(TargetServiceTest, ALongPromptBesideARunIsPrefilledInPartsWithinTheBudget) {
  iteration_prefill_max_rows_ = 16;
  // A run of 1,000 steps outlasts the long prompt's parts however slowly this client is scheduled.
  model_dir_ = LongContextModelDir();
  constexpr int kRunTokens = 1000;
  StartServer();
  auto model = model::Transformer::Load(model_dir_);
  ASSERT_TRUE(model.ok());
  std::vector<int32_t> long_prompt(100);
  for (int i = 0; i < 100; ++i) long_prompt[i] = (i * 7 + 3) % 61;
  const std::vector<int32_t> prompt = {3, 9, 27, 20, 1};
  const std::vector<int32_t> stepwise = StepwiseTokens(stub_.get(), prompt, 0.f, kRunTokens);
  int parted_passes = 0;  // the run's passes that carried part of the long prompt
  for (int attempt = 0; attempt < 5 && parted_passes < 2; ++attempt) {
    engine::TargetSession local(**model, sampling::SamplingParams{0.f, 0, 1.f, 11}, {0, 1});
    SPECDEC_ASSERT_OK_AND_ASSIGN(engine::PrefillOutcome want, local.Prefill(long_prompt));
    Open a = OpenStream();
    v1::TargetResponse r = Call(a.stream.get(), Prefill(1, prompt));
    ASSERT_TRUE(r.has_prefill()) << r.error().message();
    ASSERT_TRUE(
        a.stream->Write(Run(2, r.prefill().handle().id(), r.prefill().first_token(), kRunTokens)));
    a.stream->WritesDone();
    int most = 0;
    parted_passes = 0;
    std::atomic<bool> running{false};
    std::thread reader([&] {
      std::vector<int32_t> got;
      v1::TargetResponse step;
      while (a.stream->Read(&step)) {
        running.store(true);
        got.push_back(step.verify().next_token());
        most = std::max<int>(most, step.verify().pass_prompt_rows());
        parted_passes += step.verify().pass_prompt_rows() > 0;
      }
      running.store(true);
      EXPECT_TRUE(a.stream->Finish().ok());
      EXPECT_EQ(got, stepwise);
    });
    while (!running.load()) std::this_thread::yield();
    // One stream leaves in the middle of its prompt; the next one's prompt is answered. (A lambda,
    // so that a failed assertion still ends the runs below.)
    auto prefill_long_prompts = [&] {
      Open gone = OpenStream();
      EXPECT_TRUE(gone.stream->Write(Prefill(1, long_prompt)));
      gone.ctx->TryCancel();
      Open b = OpenStream();
      v1::TargetRequest pre = Prefill(1, long_prompt);
      pre.mutable_prefill()->add_capture_layers(0);
      pre.mutable_prefill()->add_capture_layers(1);
      v1::TargetResponse pr = Call(b.stream.get(), pre);
      ASSERT_TRUE(pr.has_prefill()) << pr.error().message();
      EXPECT_EQ(pr.prefill().first_token(), want.first_token);
      EXPECT_EQ(pr.prefill().handle().length(), 100);
      auto features = TensorToFloats(pr.prefill().features(), "features");
      ASSERT_TRUE(features.ok()) << features.status();
      const at::Tensor want_features =
          want.features.to(at::kBFloat16).to(at::kFloat).contiguous().view({-1});
      ASSERT_EQ(static_cast<int64_t>(features->size()), want_features.numel());
      EXPECT_TRUE(at::from_blob(features->data(), {want_features.numel()}, at::kFloat)
                      .equal(want_features));
      const std::vector<int32_t> rows = {pr.prefill().first_token(), 4, 5};
      engine::VerifyRequest vr;
      vr.tokens = rows;
      vr.proposal = engine::Proposal::kOneHot;
      SPECDEC_ASSERT_OK_AND_ASSIGN(engine::VerifyOutcome lv, local.Verify(vr));
      v1::TargetResponse v = Call(b.stream.get(), Verify(2, pr.prefill().handle().id(), rows));
      ASSERT_TRUE(v.has_verify()) << v.error().message();
      EXPECT_EQ(std::vector<int32_t>(v.verify().committed().begin(), v.verify().committed().end()),
                lv.committed);
      b.stream->WritesDone();
      EXPECT_TRUE(b.stream->Finish().ok());
      gone.stream->Finish().IgnoreError();
    };
    prefill_long_prompts();
    reader.join();
    EXPECT_LE(most, 16);
    EXPECT_TRUE(WaitForHandles(0));
  }
  EXPECT_GE(parted_passes, 2) << "the run never shared its passes with the long prompt's parts";
}

TEST_F(TargetServiceTest, ARunEndsAtAStopTokenOrAFullCacheAndValidatesItsShape) {
  StartServer();
  const std::vector<int32_t> prompt = {3, 9, 27, 20, 1};
  const std::vector<int32_t> want = StepwiseTokens(stub_.get(), prompt, 0.f, 12);
  const size_t stop_at = 6;
  const size_t first = std::find(want.begin(), want.end(), want[stop_at]) - want.begin();
  Open o = OpenStream();
  v1::TargetResponse r = Call(o.stream.get(), Prefill(1, prompt));
  const std::string h = r.prefill().handle().id();
  v1::TargetRequest run = Run(2, h, r.prefill().first_token(), 12);
  run.mutable_run()->add_stop_token_ids(want[stop_at]);
  ASSERT_TRUE(o.stream->Write(run));
  std::vector<int32_t> got;
  v1::TargetResponse step;
  do {
    ASSERT_TRUE(o.stream->Read(&step));
    ASSERT_TRUE(step.has_verify()) << step.error().message();
    got.push_back(step.verify().next_token());
  } while (step.verify().run_left() > 0);
  EXPECT_EQ(got, std::vector<int32_t>(want.begin(), want.begin() + first + 1));
  // The stream goes on: a run longer than the cache stops when the cache is full.
  int32_t last = got.back();
  run = Run(3, h, last, 4000);
  ASSERT_TRUE(o.stream->Write(run));
  int64_t length = 0;
  int steps = 0;
  do {
    ASSERT_TRUE(o.stream->Read(&step));
    ASSERT_TRUE(step.has_verify()) << step.error().message();
    EXPECT_EQ(step.seq(), 3u);
    length = step.verify().length();
    ++steps;
  } while (step.verify().run_left() > 0);
  EXPECT_EQ(length, 128);  // max_position_embeddings
  EXPECT_LT(steps, 4000);
  // Field errors name the field.
  for (int32_t bad : {0, 4097}) {
    v1::TargetResponse e = Call(o.stream.get(), Run(4, h, 1, bad));
    EXPECT_EQ(e.error().code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_NE(e.error().message().find("max_tokens"), std::string::npos) << e.error().message();
  }
  v1::TargetResponse e = Call(o.stream.get(), Run(5, h, 61, 3));  // vocab_size is 61
  EXPECT_EQ(e.error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(e.error().message().find("last_token"), std::string::npos) << e.error().message();
  o.stream->WritesDone();
  EXPECT_TRUE(o.stream->Finish().ok());
}

// A run's max_ms bounds it in time: it ends after the first step that finishes past the bound,
// having committed exactly the stepwise tokens up to there.
TEST_F(TargetServiceTest, ARunEndsAtItsTimeBound) {
  StartServer();
  const std::vector<int32_t> prompt = {3, 9, 27, 20, 1};
  const std::vector<int32_t> want = StepwiseTokens(stub_.get(), prompt, 0.f, 40);
  Open o = OpenStream();
  v1::TargetResponse r = Call(o.stream.get(), Prefill(1, prompt));
  ASSERT_TRUE(r.has_prefill()) << r.error().message();
  const std::string h = r.prefill().handle().id();
  // Reads one run's answers (request seq `seq`) up to its last.
  auto read_run = [&](uint64_t seq, std::vector<int32_t>* got) {
    v1::TargetResponse step;
    int64_t length = 0;
    do {
      if (!o.stream->Read(&step) || !step.has_verify()) {
        ADD_FAILURE() << step.error().message();
        return length;
      }
      EXPECT_EQ(step.seq(), seq);
      got->push_back(step.verify().next_token());
      length = step.verify().length();
    } while (step.verify().run_left() > 0);
    return length;
  };
  // A bound already spent after the first step: that step alone.
  v1::TargetRequest run = Run(2, h, r.prefill().first_token(), 30);
  run.mutable_run()->set_max_ms(1e-3f);
  ASSERT_TRUE(o.stream->Write(run));
  std::vector<int32_t> got;
  read_run(2, &got);
  ASSERT_EQ(got.size(), 1u);
  // A bound far away: the run commits all its steps.
  run = Run(3, h, got.back(), 10);
  run.mutable_run()->set_max_ms(60000.f);
  ASSERT_TRUE(o.stream->Write(run));
  read_run(3, &got);
  ASSERT_EQ(got.size(), 11u);
  EXPECT_EQ(got, std::vector<int32_t>(want.begin(), want.begin() + 11));
  // A run of more steps than the cache holds, bounded to 1 ms: it ends before the cache is full
  // (117 steps of this small model took under 5 ms on an AVX-512 CPU), and not before its bound.
  run = Run(4, h, got.back(), 4000);
  run.mutable_run()->set_max_ms(1.f);
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(o.stream->Write(run));
  const int64_t length = read_run(4, &got);
  const double took_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_GE(took_ms, 1.0);
  EXPECT_LT(length, 128);  // max_position_embeddings
  // A negative or non-finite bound is refused, naming the field.
  for (float bad : {-1.f, std::numeric_limits<float>::quiet_NaN()}) {
    v1::TargetRequest v = Run(5, h, got.back(), 3);
    v.mutable_run()->set_max_ms(bad);
    v1::TargetResponse e = Call(o.stream.get(), v);
    EXPECT_EQ(e.error().code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_NE(e.error().message().find("max_ms"), std::string::npos) << e.error().message();
  }
  o.stream->WritesDone();
  EXPECT_TRUE(o.stream->Finish().ok());
}

// Target-hosted drafting: a server-side speculative run drafts every block on the target and
// commits exactly what single-row AR steps commit (greedy), never more than max_tokens tokens.
TEST_F(TargetServiceTest, AHostedDraftingRunCommitsExactlyTheStepwiseTokens) {
  StartServer(int64_t{1} << 30, 60000, /*host_drafter=*/true);
  {
    grpc::ClientContext ctx;
    v1::ModelInfo info;
    ASSERT_TRUE(stub_->GetInfo(&ctx, v1::GetInfoRequest(), &info).ok());
    ASSERT_EQ(info.draft_models_size(), 1);
    EXPECT_EQ(info.draft_models(0).kind(), v1::DFLASH_DRAFTER);
    EXPECT_EQ(info.draft_models(0).model().block_size(), 4);
  }
  for (const std::vector<int32_t>& prompt :
       {std::vector<int32_t>{3, 9, 27, 20, 1}, std::vector<int32_t>{7, 7, 7, 7, 7, 7, 7, 7}}) {
    for (int block : {2, 4, 9}) {
      const std::vector<int32_t> want = StepwiseTokens(stub_.get(), prompt, 0.f, 23);
      Open o = OpenStream();
      v1::TargetRequest pf = Prefill(1, prompt);
      pf.mutable_prefill()->set_hosted_draft(true);
      v1::TargetResponse r = Call(o.stream.get(), pf);
      ASSERT_TRUE(r.has_prefill()) << r.error().message();
      EXPECT_FALSE(r.prefill().has_features());  // none asked for
      v1::TargetRequest run = Run(2, r.prefill().handle().id(), r.prefill().first_token(), 23);
      run.mutable_run()->set_draft_block_size(block);
      ASSERT_TRUE(o.stream->Write(run));
      std::vector<int32_t> got;
      int drafted = 0, steps = 0;
      v1::TargetResponse step;
      do {
        ASSERT_TRUE(o.stream->Read(&step));
        ASSERT_TRUE(step.has_verify()) << step.error().message();
        const auto& v = step.verify();
        EXPECT_TRUE(v.draft_error().empty()) << v.draft_error();
        // The block is cut to the tokens the run has left.
        const int left_before = 23 - static_cast<int>(got.size());
        const int rows = std::max(1, v.rows_verified());
        EXPECT_EQ(rows, std::min(block, left_before));
        // The step's costs: a pass of its rows alone, and its block's drafter pass.
        EXPECT_EQ(v.pass_rows(), rows);
        EXPECT_GT(v.compute_ms(), 0);
        EXPECT_EQ(v.draft_pass_rows(), v.rows_verified());
        if (v.rows_verified() > 0) {
          EXPECT_GT(v.draft_ms(), 0);
        }
        EXPECT_LE(v.num_accepted(), rows - 1);
        EXPECT_EQ(v.committed_size(), v.num_accepted() + 1);
        got.insert(got.end(), v.committed().begin(), v.committed().end());
        EXPECT_EQ(v.run_left(), 23 - static_cast<int>(got.size()));
        drafted += rows - 1;
        ++steps;
      } while (step.verify().run_left() > 0);
      EXPECT_EQ(got, want) << "block " << block;
      EXPECT_GT(drafted, 0);
      EXPECT_LE(steps, 23);
      // The same handle goes on with plain AR steps (the hosted drafter keeps up with them).
      v1::TargetResponse ar =
          Call(o.stream.get(), Verify(3, r.prefill().handle().id(), {got.back()}));
      ASSERT_TRUE(ar.has_verify()) << ar.error().message();
      EXPECT_EQ(ar.verify().rows_verified(), 0);
      EXPECT_EQ(ar.verify().pass_rows(), 1);
      EXPECT_EQ(ar.verify().draft_pass_rows(), 0);
      v1::TargetRequest more = Run(4, r.prefill().handle().id(), ar.verify().next_token(), block);
      more.mutable_run()->set_draft_block_size(block);
      v1::TargetResponse m = Call(o.stream.get(), more);
      ASSERT_TRUE(m.has_verify()) << m.error().message();
      // Its first step drafts the whole block: the run has `block` tokens left.
      EXPECT_EQ(m.verify().rows_verified(), block);
      for (v1::TargetResponse rest = m; rest.verify().run_left() > 0;) {
        ASSERT_TRUE(o.stream->Read(&rest));
        ASSERT_TRUE(rest.has_verify()) << rest.error().message();
      }
      o.stream->WritesDone();
      EXPECT_TRUE(o.stream->Finish().ok());
    }
  }
  // Field errors name the field; a handle without a hosted session cannot draft.
  Open o = OpenStream();
  v1::TargetResponse plain = Call(o.stream.get(), Prefill(1, {1, 2, 3}));
  const std::string h = plain.prefill().handle().id();
  for (int bad : {1, 257, -2}) {
    v1::TargetRequest v = Run(2, h, 4, 8);
    v.mutable_run()->set_draft_block_size(bad);
    v1::TargetResponse e = Call(o.stream.get(), v);
    EXPECT_EQ(e.error().code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_NE(e.error().message().find("draft_block_size"), std::string::npos);
  }
  v1::TargetRequest no_host = Run(4, h, 4, 8);
  no_host.mutable_run()->set_draft_block_size(4);
  v1::TargetResponse e = Call(o.stream.get(), no_host);
  EXPECT_EQ(e.error().code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(e.error().message().find("hosted_draft"), std::string::npos) << e.error().message();
  o.stream->WritesDone();
  EXPECT_TRUE(o.stream->Finish().ok());
  EXPECT_TRUE(WaitForHandles(0));
  // A replica without a hosted drafter refuses hosted_draft at prefill.
  StartServer();
  Open o2 = OpenStream();
  v1::TargetRequest pf = Prefill(1, {1, 2, 3});
  pf.mutable_prefill()->set_hosted_draft(true);
  v1::TargetResponse r = Call(o2.stream.get(), pf);
  EXPECT_EQ(r.error().code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_NE(r.error().message().find("--dflash"), std::string::npos) << r.error().message();
  o2.stream->WritesDone();
  EXPECT_TRUE(o2.stream->Finish().ok());
}

// Reads a run's steps to its end; appends what they commit and counts draft rows and acceptance.
void ReadRun(Stream* s, std::vector<int32_t>* got, int* drafted, int* accepted) {
  v1::TargetResponse step;
  do {
    ASSERT_TRUE(s->Read(&step));
    ASSERT_TRUE(step.has_verify()) << step.error().message();
    const auto& v = step.verify();
    ASSERT_GE(v.rows_verified(), 1);  // a lookup run reports every step's rows
    EXPECT_EQ(v.pass_rows(), v.rows_verified());
    EXPECT_EQ(v.draft_pass_rows(), 0);
    EXPECT_EQ(v.committed_size(), v.num_accepted() + 1);
    got->insert(got->end(), v.committed().begin(), v.committed().end());
    *drafted += v.rows_verified() - 1;
    *accepted += v.num_accepted();
  } while (step.verify().run_left() > 0);
}

TEST_F(TargetServiceTest, ALookupRunCommitsExactlyTheStepwiseTokens) {
  StartServer();
  for (const std::vector<int32_t>& prompt :
       {std::vector<int32_t>{3, 9, 27, 20, 1, 3, 9, 27}, std::vector<int32_t>{7, 7, 7, 7, 7, 7}}) {
    const std::vector<int32_t> want = StepwiseTokens(stub_.get(), prompt, 0.f, 41);
    Open o = OpenStream();
    v1::TargetResponse r = Call(o.stream.get(), Prefill(1, prompt));
    ASSERT_TRUE(r.has_prefill()) << r.error().message();
    const std::string h = r.prefill().handle().id();
    // A lookup run, a plain verify on the same handle, and a lookup run again: the sequence the
    // target looks up in keeps every committed token, whoever drafted it.
    v1::TargetRequest run = Run(2, h, r.prefill().first_token(), 20);
    run.mutable_run()->mutable_lookup()->set_max_tokens(4);
    ASSERT_TRUE(o.stream->Write(run));
    std::vector<int32_t> got;
    int drafted = 0, accepted = 0;
    ReadRun(o.stream.get(), &got, &drafted, &accepted);
    ASSERT_EQ(got.size(), 20u);
    v1::TargetResponse ar = Call(o.stream.get(), Verify(3, h, {got.back()}));
    ASSERT_TRUE(ar.has_verify()) << ar.error().message();
    EXPECT_EQ(ar.verify().rows_verified(), 0);
    got.push_back(ar.verify().next_token());
    v1::TargetRequest more = Run(4, h, got.back(), 20);
    more.mutable_run()->mutable_lookup()->set_max_tokens(4);
    ASSERT_TRUE(o.stream->Write(more));
    ReadRun(o.stream.get(), &got, &drafted, &accepted);
    EXPECT_EQ(got, want);
    // The random model's greedy output repeats itself: lookups draft and are accepted.
    EXPECT_GT(drafted, 0);
    EXPECT_GT(accepted, 0);
    o.stream->WritesDone();
    EXPECT_TRUE(o.stream->Finish().ok());
  }
  // Field errors name the field.
  Open o = OpenStream();
  v1::TargetResponse plain = Call(o.stream.get(), Prefill(1, {1, 2, 3}));
  const std::string h = plain.prefill().handle().id();
  struct Bad {
    int max_tokens, min_match, min_tokens;
    const char* field;
  };
  for (const Bad& bad : {Bad{-1, 0, 0, "lookup.max_tokens"}, Bad{65, 0, 0, "lookup.max_tokens"},
                         Bad{4, 4, 0, "lookup.min_match"}, Bad{4, -1, 0, "lookup.min_match"},
                         Bad{4, 2, 5, "lookup.min_tokens"}, Bad{4, 2, -1, "lookup.min_tokens"}}) {
    v1::TargetRequest v = Run(2, h, 4, 8);
    v.mutable_run()->mutable_lookup()->set_max_tokens(bad.max_tokens);
    v.mutable_run()->mutable_lookup()->set_min_match(bad.min_match);
    v.mutable_run()->mutable_lookup()->set_min_tokens(bad.min_tokens);
    v1::TargetResponse e = Call(o.stream.get(), v);
    EXPECT_EQ(e.error().code(), grpc::StatusCode::INVALID_ARGUMENT) << bad.field;
    EXPECT_NE(e.error().message().find(bad.field), std::string::npos) << e.error().message();
  }
  o.stream->WritesDone();
  EXPECT_TRUE(o.stream->Finish().ok());
  EXPECT_TRUE(WaitForHandles(0));
}

// A run that weighs its lookups commits the stepwise tokens, and verifies lookups only where its
// weighing predicts they pay: all where any pays, none where none does.
TEST_F(TargetServiceTest, AWeighedLookupRunVerifiesWhatItsWeighingGives) {
  StartServer();
  const std::vector<int32_t> prompt{3, 9, 27, 20, 1, 3, 9, 27};
  const std::vector<int32_t> want = StepwiseTokens(stub_.get(), prompt, 0.f, 20);
  for (double alternative : {0.0, 1000.0}) {
    Open o = OpenStream();
    v1::TargetResponse r = Call(o.stream.get(), Prefill(1, prompt));
    ASSERT_TRUE(r.has_prefill()) << r.error().message();
    v1::TargetRequest run = Run(2, r.prefill().handle().id(), r.prefill().first_token(), 20);
    run.mutable_run()->mutable_lookup()->set_max_tokens(4);
    engine::LookupWeighing w;
    w.rows_ms = {0, 1, 1, 1, 1, 1};
    w.alternative_rate = alternative;
    WeighingToProto(w, run.mutable_run()->mutable_lookup()->mutable_weighing());
    ASSERT_TRUE(o.stream->Write(run));
    std::vector<int32_t> got;
    int drafted = 0, accepted = 0;
    ReadRun(o.stream.get(), &got, &drafted, &accepted);
    EXPECT_EQ(got, want) << alternative;
    if (alternative == 0) {
      EXPECT_GT(drafted, 0);  // the random model's greedy output repeats itself
    } else {
      EXPECT_EQ(drafted, 0);
    }
    o.stream->WritesDone();
    EXPECT_TRUE(o.stream->Finish().ok());
  }
  // A malformed weighing is refused up front, naming the field.
  Open o = OpenStream();
  v1::TargetResponse plain = Call(o.stream.get(), Prefill(1, {1, 2, 3}));
  v1::TargetRequest bad = Run(2, plain.prefill().handle().id(), 4, 8);
  bad.mutable_run()->mutable_lookup()->set_max_tokens(4);
  bad.mutable_run()->mutable_lookup()->mutable_weighing()->add_first_prior(0.5f);
  v1::TargetResponse e = Call(o.stream.get(), bad);
  EXPECT_EQ(e.error().code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(e.error().message().find("run.lookup.weighing.first_prior"), std::string::npos)
      << e.error().message();
  o.stream->WritesDone();
  EXPECT_TRUE(o.stream->Finish().ok());
  EXPECT_TRUE(WaitForHandles(0));
}

// A hosted-drafting run that looks up: where the sequence repeats a step verifies the lookup
// draft instead of drafting a block; the tokens are the stepwise ones either way.
TEST_F(TargetServiceTest, AHostedRunThatLooksUpVerifiesLookupsInsteadOfBlocks) {
  StartServer(int64_t{1} << 30, 60000, /*host_drafter=*/true);
  const std::vector<int32_t> prompt = {3, 9, 27, 20, 1, 3, 9, 27};
  const std::vector<int32_t> want = StepwiseTokens(stub_.get(), prompt, 0.f, 30);
  Open o = OpenStream();
  v1::TargetRequest pf = Prefill(1, prompt);
  pf.mutable_prefill()->set_hosted_draft(true);
  v1::TargetResponse r = Call(o.stream.get(), pf);
  ASSERT_TRUE(r.has_prefill()) << r.error().message();
  v1::TargetRequest run = Run(2, r.prefill().handle().id(), r.prefill().first_token(), 30);
  run.mutable_run()->set_draft_block_size(4);
  run.mutable_run()->mutable_lookup()->set_max_tokens(6);
  run.mutable_run()->mutable_lookup()->set_min_match(2);
  run.mutable_run()->mutable_lookup()->set_min_tokens(2);
  ASSERT_TRUE(o.stream->Write(run));
  std::vector<int32_t> got;
  int lookups = 0, blocks = 0;
  v1::TargetResponse step;
  do {
    ASSERT_TRUE(o.stream->Read(&step));
    ASSERT_TRUE(step.has_verify()) << step.error().message();
    const auto& v = step.verify();
    if (v.looked_up()) {
      ++lookups;
      EXPECT_GE(v.rows_verified(), 3);  // at least min_tokens drafted
      EXPECT_LE(v.rows_verified(), 7);
      EXPECT_EQ(v.draft_pass_rows(), 0);  // no block drafted for it
      EXPECT_GE(v.lookup_match(), 2);     // at least min_match
      EXPECT_LE(v.lookup_match(), 3);
    } else if (v.rows_verified() > 1) {
      EXPECT_EQ(v.lookup_match(), 0);
      ++blocks;
      EXPECT_EQ(v.draft_pass_rows(), v.rows_verified());
    }
    got.insert(got.end(), v.committed().begin(), v.committed().end());
  } while (step.verify().run_left() > 0);
  EXPECT_EQ(got, want);
  EXPECT_GT(lookups, 0) << ::testing::PrintToString(want);
  EXPECT_GT(blocks, 0);
  o.stream->WritesDone();
  EXPECT_TRUE(o.stream->Finish().ok());
}

TEST_F(TargetServiceTest, CancellingAStreamMidRunStopsTheRunAndReleasesItsHandle) {
  StartServer();
  Open o = OpenStream();
  v1::TargetResponse r = Call(o.stream.get(), Prefill(1, {3, 9, 27}));
  v1::TargetRequest run = Run(2, r.prefill().handle().id(), r.prefill().first_token(), 100);
  ASSERT_TRUE(o.stream->Write(run));
  v1::TargetResponse step;
  ASSERT_TRUE(o.stream->Read(&step));
  EXPECT_GT(step.verify().run_left(), 0);
  o.ctx->TryCancel();
  o.stream->Finish();
  EXPECT_TRUE(WaitForHandles(0));
  // The server goes on serving.
  Open o2 = OpenStream();
  EXPECT_TRUE(Call(o2.stream.get(), Prefill(1, {4, 5})).has_prefill());
  o2.stream->WritesDone();
  EXPECT_TRUE(o2.stream->Finish().ok());
}

TEST_F(TargetServiceTest, AttachMovesAHandleToANewStream) {
  StartServer();
  Open a = OpenStream();
  auto r = Call(a.stream.get(), Prefill(1, {1, 2, 3}));
  ASSERT_TRUE(r.has_prefill());
  const std::string h = r.prefill().handle().id();
  Open b = OpenStream();
  v1::TargetRequest att;
  att.set_seq(1);
  att.mutable_attach()->set_handle(h);
  auto ar = Call(b.stream.get(), att);
  ASSERT_TRUE(ar.has_attached()) << ar.error().message();
  EXPECT_EQ(ar.attached().length(), 3);
  EXPECT_TRUE(Call(b.stream.get(), Verify(2, h, {r.prefill().first_token(), 1})).has_verify());
  EXPECT_EQ(Call(a.stream.get(), Verify(2, h, {1, 1})).error().code(),
            grpc::StatusCode::FAILED_PRECONDITION);
  v1::TargetRequest rel;
  rel.set_seq(3);
  rel.mutable_release()->set_handle(h);
  EXPECT_TRUE(Call(b.stream.get(), rel).has_released());
  EXPECT_EQ(server_->handles_in_use(), 0u);
  a.stream->WritesDone();
  a.stream->Finish();
  b.stream->WritesDone();
  b.stream->Finish();
}

TEST_F(TargetServiceTest, BudgetAndLeases) {
  auto c = SmallConfig();
  const int64_t per_token = 2 * c.num_hidden_layers * c.num_key_value_heads * c.head_dim * 4;
  StartServer(/*budget=*/per_token * 40, /*lease_ms=*/300);
  Open o = OpenStream();
  v1::TargetRequest big = Prefill(1, {1, 2, 3});
  big.mutable_prefill()->set_reserve_tokens(30);  // 33 tokens reserved
  auto r = Call(o.stream.get(), big);
  ASSERT_TRUE(r.has_prefill()) << r.error().message();
  v1::TargetRequest second = Prefill(2, {1, 2, 3});
  second.mutable_prefill()->set_reserve_tokens(10);
  auto e = Call(o.stream.get(), second);
  EXPECT_EQ(e.error().code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_GT(e.error().retry_after_ms(), 0);
  // The lease (300 ms) runs out while idle; the scheduler's sweep frees the cache.
  EXPECT_TRUE(WaitForHandles(0));
  EXPECT_EQ(Call(o.stream.get(), Verify(3, r.prefill().handle().id(), {1, 2})).error().code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_TRUE(Call(o.stream.get(), second).has_prefill());  // memory is available again
  o.stream->WritesDone();
  o.stream->Finish();
}

}  // namespace
}  // namespace specdec::services
