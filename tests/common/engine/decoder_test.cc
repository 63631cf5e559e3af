// Every decoding method must reproduce AR greedy output token for token, on random-weight
// models and on the real pretrained stories260K; sampling is seeded and reproducible.
#include "common/engine/decoder.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <set>

#include "common/engine/target_session.h"
#include "common/engine/warm_up.h"
#include "common/io/gguf_to_hf.h"
#include "common/model/block_pilot.h"
#include "common/model/dflash_drafter.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"
#include "common/util/status_matchers.h"
#include "tests/common/engine/expect_same_as_ar.h"
#include "tests/common/remove_tree.h"

namespace specdec::engine {
namespace {

using model::Architecture;
using model::Transformer;

// Greedy outputs may differ from AR only where AR's top-2 logit gap is below this (docs/design.md
// §2.6): batched verification rounds differently from single-token steps.
constexpr double kNearTie = 1e-3;

model::ModelConfig Config(int64_t vocab, int64_t hidden, int64_t layers) {
  model::ModelConfig c;
  c.architecture = Architecture::kQwen3;
  c.qk_norm = true;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = 2 * hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = hidden / 4;
  c.max_position_embeddings = 512;
  c.tie_word_embeddings = true;
  return c;
}

struct Models {
  std::unique_ptr<Transformer> target, draft;
  std::unique_ptr<model::DFlashDrafter> dflash;
  std::unique_ptr<model::BlockPilot> policy;
};

Models MakeRandomModels() {
  Models m;
  auto tc = Config(97, 64, 4);
  // A large weight scale gives peaked, structured distributions (fewer near-ties than tiny ones).
  m.target = *Transformer::FromTensors(tc, Transformer::RandomWeights(tc, 1, 0.3));
  auto dc = Config(97, 32, 2);
  m.draft = *Transformer::FromTensors(dc, Transformer::RandomWeights(dc, 2, 0.3));
  model::DFlashConfig fc;
  fc.layers = Config(97, 64, 2);
  fc.block_size = 6;
  fc.mask_token_id = 96;
  fc.target_layer_ids = {1, 2};
  m.dflash = *model::DFlashDrafter::FromTensors(
      fc, model::DFlashDrafter::RandomWeights(fc, 64, 3, 0.2), *m.target);
  model::BlockPilotConfig pc;
  pc.vocab_size = 97;
  pc.hidden_size = 16;
  pc.training_block_size = 6;
  pc.block_sizes = {4, 5, 6, 7, 8};
  auto pw = model::BlockPilot::WeightShapes(pc);
  std::map<std::string, at::Tensor> w;
  for (const auto& s : pw) w[s.name] = at::randn(s.shape) * 0.1;
  m.policy = *model::BlockPilot::FromTensors(pc, w);
  return m;
}

// Checks `got` equals `want` (AR), allowing a divergence only at a documented near-tie.
void ExpectSameAsAr(const Transformer& target, const std::vector<int32_t>& prompt,
                    const std::vector<int32_t>& want, const std::vector<int32_t>& got,
                    const std::string& what) {
  testing_util::ExpectSameAsAr(target, prompt, want, got, kNearTie, what);
}

std::vector<std::vector<int32_t>> Prompts(int n, int64_t vocab) {
  std::vector<std::vector<int32_t>> ps;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p;
    for (int j = 0; j < 3 + (i * 5) % 17; ++j) p.push_back((i * 31 + j * 7 + j * j) % vocab);
    ps.push_back(p);
  }
  return ps;
}

class DecoderGreedyTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    model::ConfigureComputeThreads(0);
    models_ = new Models(MakeRandomModels());
  }
  static void TearDownTestSuite() { delete models_; }
  static Models* models_;
};
Models* DecoderGreedyTest::models_ = nullptr;

TEST_F(DecoderGreedyTest, EveryMethodEqualsArOnRandomModels) {
  EngineModels em{models_->target.get(), models_->draft.get(), models_->dflash.get(),
                  models_->policy.get()};
  for (const auto& prompt : Prompts(12, 96)) {
    DecodeOptions ar;
    ar.max_new_tokens = 40;
    auto base = Decode(em, prompt, ar);
    ASSERT_TRUE(base.ok()) << base.status();
    ASSERT_EQ(base->tokens.size(), 40u);
    for (Method m : {Method::kDraftChain, Method::kDyspecTree, Method::kDflash,
                     Method::kDflashAdaptive, Method::kNgram}) {
      for (int variant = 0; variant < 2; ++variant) {
        DecodeOptions o = ar;
        o.method = m;
        o.draft_length = variant ? 7 : 3;
        o.tree_budget = variant ? 24 : 6;
        o.tree_threshold = variant ? 0.02f : 0.f;
        o.block_size = variant ? 9 : 0;
        auto r = Decode(em, prompt, o);
        ASSERT_TRUE(r.ok()) << MethodName(m) << ": " << r.status();
        ExpectSameAsAr(*models_->target, prompt, base->tokens, r->tokens,
                       std::string(MethodName(m)) + " variant " + std::to_string(variant));
        EXPECT_GE(r->stats.tau(), 1.0);
        EXPECT_LE(r->stats.accepted_tokens, r->stats.drafted_tokens);
      }
    }
  }
}

TEST_F(DecoderGreedyTest, SelfDraftingAcceptsEveryDraftToken) {
  EngineModels em{models_->target.get(), models_->target.get()};
  const auto prompt = Prompts(1, 96)[0];
  DecodeOptions o;
  o.max_new_tokens = 41;  // 1 from prefill + 8 steps of K+1 = 5
  o.method = Method::kDraftChain;
  o.draft_length = 4;
  auto r = Decode(em, prompt, o);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->stats.accepted_tokens, r->stats.drafted_tokens);
  EXPECT_DOUBLE_EQ(r->stats.tau(), 5.0);
  o.method = Method::kDyspecTree;
  o.tree_budget = 8;
  o.tree_max_depth = 4;
  r = Decode(em, prompt, o);
  ASSERT_TRUE(r.ok()) << r.status();
  // The draft's top child at every level is the target's argmax, and best-first expansion always
  // creates the root's top child first: every step accepts at least that node (and then the
  // top-1 chain as deep as the tree holds it).
  ASSERT_FALSE(r->stats.drafted_per_position.empty());
  EXPECT_EQ(r->stats.accepted_per_position[0], r->stats.drafted_per_position[0]);
  EXPECT_GE(r->stats.tau(), 2.0);
}

TEST_F(DecoderGreedyTest, StopTokensAndLengthCapsAreHonoured) {
  EngineModels em{models_->target.get(), models_->draft.get(), models_->dflash.get()};
  const auto prompt = Prompts(3, 96)[2];
  DecodeOptions ar;
  ar.max_new_tokens = 30;
  auto base = Decode(em, prompt, ar);
  ASSERT_TRUE(base.ok());
  const int32_t stop = base->tokens[10];
  size_t first = 0;
  while (base->tokens[first] != stop) ++first;
  for (Method m : {Method::kAr, Method::kDraftChain, Method::kDyspecTree, Method::kDflash}) {
    DecodeOptions o = ar;
    o.method = m;
    o.stop_token_ids = {stop};
    auto r = Decode(em, prompt, o);
    ASSERT_TRUE(r.ok());
    EXPECT_TRUE(r->stopped) << MethodName(m);
    // The output ends before the stop token (docs/design.md §1, the stop contract).
    EXPECT_EQ(r->tokens.size(), first) << MethodName(m);
    EXPECT_EQ(r->stop_token, stop) << MethodName(m);
    o.stop_token_ids.clear();
    o.max_new_tokens = 7;
    r = Decode(em, prompt, o);
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->tokens.size(), 7u) << MethodName(m);
  }
}

TEST_F(DecoderGreedyTest, CommitCallbackStreamsEveryStep) {
  EngineModels em{models_->target.get(), models_->draft.get(), models_->dflash.get()};
  const auto prompt = Prompts(4, 96)[3];
  for (Method m : {Method::kAr, Method::kDraftChain, Method::kDyspecTree, Method::kDflash}) {
    DecodeOptions o;
    o.method = m;
    o.max_new_tokens = 25;
    std::vector<int32_t> streamed;
    int64_t steps = 0, drafted = 0, accepted = 0;
    auto r = Decode(em, prompt, o, [&](std::span<const int32_t> toks, const StepInfo& s) {
      EXPECT_EQ(s.step, steps) << MethodName(m);
      ++steps;
      drafted += s.drafted;
      accepted += s.accepted;
      EXPECT_LE(static_cast<int64_t>(toks.size()), s.accepted + 1);
      streamed.insert(streamed.end(), toks.begin(), toks.end());
    });
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(streamed, r->tokens) << MethodName(m);
    EXPECT_EQ(steps, r->stats.verify_steps + 1) << MethodName(m);
    EXPECT_EQ(drafted, r->stats.drafted_tokens);
    EXPECT_EQ(accepted, r->stats.accepted_tokens);
  }
}

TEST_F(DecoderGreedyTest, SamplingIsSeededAndReproducible) {
  EngineModels em{models_->target.get(), models_->draft.get(), models_->dflash.get()};
  const auto prompt = Prompts(2, 96)[1];
  for (Method m : {Method::kAr, Method::kDraftChain, Method::kDyspecTree, Method::kDflash}) {
    DecodeOptions o;
    o.method = m;
    o.max_new_tokens = 30;
    o.sampling.temperature = 1.0f;
    o.sampling.top_p = 0.95f;
    o.sampling.seed = 42;
    auto a = Decode(em, prompt, o);
    auto b = Decode(em, prompt, o);
    ASSERT_TRUE(a.ok() && b.ok());
    EXPECT_EQ(a->tokens, b->tokens) << MethodName(m);
    o.sampling.seed = 43;
    auto c = Decode(em, prompt, o);
    ASSERT_TRUE(c.ok());
    EXPECT_NE(a->tokens, c->tokens) << MethodName(m);
  }
}

TEST_F(DecoderGreedyTest, AdaptiveUsesPolicyOrFallsBack) {
  EngineModels em{models_->target.get(), nullptr, models_->dflash.get(), models_->policy.get()};
  const auto prompt = Prompts(1, 96)[0];
  DecodeOptions o;
  o.method = Method::kDflashAdaptive;
  o.max_new_tokens = 20;
  auto r = Decode(em, prompt, o);
  ASSERT_TRUE(r.ok()) << r.status();
  // The policy's argmax candidate for this prompt's last-token logits.
  auto cache = models_->target->NewCache();
  model::SequenceInput in{cache.get(), prompt};
  auto out = models_->target->Forward(std::span<const model::SequenceInput>(&in, 1));
  at::Tensor row = (*out)[0].logits.select(0, 0).contiguous();
  auto pred = models_->policy->Predict(
      std::span<const float>(row.data_ptr<float>(), static_cast<size_t>(row.numel())));
  ASSERT_TRUE(pred.ok());
  EXPECT_EQ(r->stats.block_size, pred->block_size);
  EXPECT_FALSE(r->stats.policy_fallback);
  em.policy = nullptr;
  r = Decode(em, prompt, o);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->stats.policy_fallback);
  EXPECT_EQ(r->stats.block_size, 6);
  EXPECT_NE(r->stats.note.find("training block size"), std::string::npos);
}

TEST_F(DecoderGreedyTest, CostAwareAdaptiveMixesArRunsAndBlocksAndEqualsAr) {
  // A fresh cost model explores: AR runs and blocks of 2, 3, 4, 6 and the request's, in turn.
  BlockCostModel cost_model;
  EngineModels em{models_->target.get(), nullptr, models_->dflash.get(), nullptr};
  em.block_model = &cost_model;
  const auto prompt = Prompts(1, 96)[0];
  DecodeOptions ar;
  ar.max_new_tokens = 60;
  auto base = Decode(em, prompt, ar);
  ASSERT_TRUE(base.ok()) << base.status();
  DecodeOptions o = ar;
  o.method = Method::kDflashAdaptive;
  std::set<int32_t> blocks;
  auto r = Decode(em, prompt, o, [&](std::span<const int32_t>, const StepInfo& step) {
    if (step.step > 0) blocks.insert(step.block_size);
  });
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectSameAsAr(*models_->target, prompt, base->tokens, r->tokens, "cost-aware DFLASH_ADAPTIVE");
  EXPECT_TRUE(blocks.count(0)) << "no AR step";  // AR steps carry no block
  EXPECT_GE(blocks.size(), 4u);
  EXPECT_GT(cost_model.SpeculativeSteps(), 0);
}

TEST_F(DecoderGreedyTest, WarmUpMeasuresTheCandidatesCostsAndSharesNoAcceptance) {
  BlockCostModel cost_model;
  EngineModels em{models_->target.get(), nullptr, models_->dflash.get(), nullptr};
  em.block_model = &cost_model;
  auto r = WarmUp(em, nullptr, 64);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->tokens.size(), 64u);
  EXPECT_EQ(r->stats.method, Method::kDflashAdaptive);
  EXPECT_EQ(r->stats.lookup_steps, 0);
  // Its decisions explored: AR's pass and drafted blocks' passes are measured...
  EXPECT_GE(cost_model.NextDecision(), 16);
  EXPECT_GT(cost_model.StepMs(1, 1), 0);
  EXPECT_GT(cost_model.StepMs(1, 3), 0);
  // ... but its acceptance, on a prompt nobody sent, is not the machine's.
  double weight = 0;
  cost_model.AcceptedShare(0, 0, &weight);
  EXPECT_EQ(weight, 0);
  EXPECT_EQ(cost_model.SpeculativeSteps(), 0);
  // It equals AR on its prompt, as every DFLASH_ADAPTIVE request does.
  const auto prompt = WarmUpPrompt(nullptr, models_->target->config().vocab_size);
  ASSERT_TRUE(prompt.ok());
  DecodeOptions ar;
  ar.max_new_tokens = 64;
  auto base = Decode(em, *prompt, ar);
  ASSERT_TRUE(base.ok()) << base.status();
  ExpectSameAsAr(*models_->target, *prompt, base->tokens, r->tokens, "the warm-up");
}

TEST_F(DecoderGreedyTest, WarmUpWithoutADrafterHasNothingToChoose) {
  BlockCostModel cost_model;
  EngineModels em{models_->target.get(), models_->draft.get(), nullptr, nullptr};
  em.block_model = &cost_model;
  auto r = WarmUp(em, nullptr, 32);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition) << r.status();
  EXPECT_EQ(cost_model.StepMs(1, 1), 0);
}

TEST_F(DecoderGreedyTest, BadRequestsAreRejected) {
  EngineModels em{models_->target.get()};
  std::vector<int32_t> prompt = {1, 2, 3};
  DecodeOptions o;
  SPECDEC_EXPECT_STATUS(Decode(em, std::vector<int32_t>{}, o), absl::StatusCode::kInvalidArgument,
                        "prompt is empty");
  std::vector<int32_t> bad = {1, 97};
  SPECDEC_EXPECT_STATUS(Decode(em, bad, o), absl::StatusCode::kInvalidArgument, "97");
  o.method = Method::kDraftChain;
  SPECDEC_EXPECT_STATUS(Decode(em, prompt, o), absl::StatusCode::kFailedPrecondition,
                        "draft model");
  o.method = Method::kDflash;
  SPECDEC_EXPECT_STATUS(Decode(em, prompt, o), absl::StatusCode::kFailedPrecondition, "DFlash");
  o.method = Method::kAr;
  o.max_new_tokens = 600;
  SPECDEC_EXPECT_STATUS(Decode(em, prompt, o), absl::StatusCode::kInvalidArgument,
                        "maximum context");
  o.max_new_tokens = 5;
  o.sampling.top_p = 0.f;
  EXPECT_EQ(Decode(em, prompt, o).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(DecoderGreedyTest, TargetSessionRejectsMalformedVerifies) {
  sampling::SamplingParams sp{1.f, 0, 1.f, 3};
  TargetSession t(*models_->target, sp, {});
  std::vector<int32_t> prompt = {1, 2, 3};
  ASSERT_TRUE(t.Prefill(prompt).ok());
  const int64_t len = t.length();
  std::vector<int32_t> rows = {4, 5, 6};
  VerifyRequest req;
  req.tokens = rows;
  req.proposal = Proposal::kSampled;  // at T=1 the q rows are required
  SPECDEC_EXPECT_STATUS(t.Verify(req), absl::StatusCode::kInvalidArgument, "draft_probs");
  std::vector<int32_t> parents = {-1, 1, 0};
  req.tree_parents = parents;
  req.proposal = Proposal::kOneHot;
  SPECDEC_EXPECT_STATUS(t.Verify(req), absl::StatusCode::kInvalidArgument, "earlier row");
  std::vector<int32_t> bad = {4, 500};
  req.tokens = bad;
  req.tree_parents = {};
  EXPECT_EQ(t.Verify(req).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(t.length(), len);  // nothing was written
  req.tokens = rows;
  auto ok = t.Verify(req);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(t.length(), len + 1 + ok->result.num_accepted);
  EXPECT_EQ(ok->committed.back(), ok->result.next_token);
}

// Real pretrained weights: stories260K as target, self-drafting and a second small model
// (stories260K with its last layers removed is not a trained model, so the second drafter is
// a random model sharing the vocabulary).
TEST(DecoderStories260K, MethodsEqualArOnRealWeights) {
  const std::string gguf = std::string(SPECDEC_SHARED_DIR) + "/models/stories260K/stories260K.gguf";
  if (!std::filesystem::exists(gguf)) GTEST_SKIP() << "../shared/models/stories260K is absent";
  const std::string dir = std::filesystem::temp_directory_path() /
                          ("specdec_dec_stories_" + std::to_string(::getpid()));
  SPECDEC_ASSERT_OK(io::ConvertGgufToHf(gguf, dir));
  auto target = Transformer::Load(dir);
  ASSERT_TRUE(target.ok()) << target.status();
  auto dc = (*target)->config();
  dc.num_hidden_layers = 1;
  auto other = Transformer::FromTensors(dc, Transformer::RandomWeights(dc, 9, 0.2));
  ASSERT_TRUE(other.ok());
  for (const Transformer* draft : {target->get(), other->get()}) {
    EngineModels em{target->get(), draft};
    for (int p = 0; p < 6; ++p) {
      std::vector<int32_t> prompt = {1};
      for (int j = 0; j < p * 3; ++j) prompt.push_back(300 + (p * 13 + j * 7) % 200);
      DecodeOptions ar;
      ar.max_new_tokens = 60;
      auto base = Decode(em, prompt, ar);
      ASSERT_TRUE(base.ok());
      for (Method m : {Method::kDraftChain, Method::kDyspecTree}) {
        DecodeOptions o = ar;
        o.method = m;
        auto r = Decode(em, prompt, o);
        ASSERT_TRUE(r.ok()) << r.status();
        ExpectSameAsAr(**target, prompt, base->tokens, r->tokens,
                       std::string(MethodName(m)) + (draft == target->get() ? " self" : " other"));
        if (draft == target->get() && m == Method::kDraftChain) {
          EXPECT_EQ(r->stats.accepted_tokens, r->stats.drafted_tokens);
        }
      }
    }
  }
  testing_util::RemoveTree(dir);
}

}  // namespace
}  // namespace specdec::engine
