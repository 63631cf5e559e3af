// TargetSession::VerifyBatch (continuous batching): several sessions verified in one ragged
// forward pass give the results each would get alone (chains, trees, features, sampling), a bad
// request fails alone and leaves its session untouched; RunBatch adds fresh sessions' prefills
// to that pass with the same guarantees; and CanShareBatch keeps sessions with
// different feature layers apart. DFlashDraftSession::DraftBlockBatch likewise equals drafting
// alone and isolates a bad request, and its features may arrive in any number of pieces.
#include "common/engine/target_session.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <optional>

#include "common/engine/draft_session.h"
#include "common/model/dflash_drafter.h"
#include "common/model/ops.h"
#include "common/model/transformer.h"
#include "common/util/status_matchers.h"

namespace specdec::engine {
namespace {

std::unique_ptr<model::Transformer> Target(int64_t max_positions = 128) {
  model::ModelConfig c;
  c.architecture = model::Architecture::kQwen3;
  c.qk_norm = true;
  c.vocab_size = 61;
  c.hidden_size = 32;
  c.intermediate_size = 64;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.max_position_embeddings = max_positions;
  c.tie_word_embeddings = true;
  return *model::Transformer::FromTensors(c, model::Transformer::RandomWeights(c, 5, 0.3));
}

struct Case {
  std::vector<int32_t> prompt, tokens, parents;
  sampling::SamplingParams sampling;
  bool features = false;
};

std::vector<Case> Cases() {
  std::vector<Case> cs(4);
  cs[0].prompt = {1, 2, 3};
  cs[0].tokens = {4, 5, 6, 7};  // chain
  cs[1].prompt = {9, 8, 7, 6, 5};
  cs[1].tokens = {10};  // plain AR step
  cs[2].prompt = {11, 12};
  cs[2].tokens = {13, 14, 15, 16, 17};
  cs[2].parents = {-1, 0, 0, 1, 1};  // tree
  cs[3].prompt = {20, 21, 22, 23};
  cs[3].tokens = {24, 25, 26};
  cs[3].sampling.temperature = 0.8f;  // one-hot proposals at T > 0: rejection sampling
  cs[3].sampling.seed = 17;
  for (auto& c : cs) c.features = true;
  return cs;
}

VerifyRequest Req(const Case& c) {
  VerifyRequest r;
  r.tokens = c.tokens;
  r.tree_parents = c.parents;
  r.proposal = Proposal::kOneHot;
  r.want_features = c.features;
  return r;
}

std::vector<std::unique_ptr<TargetSession>> Prefilled(const model::Transformer& t,
                                                      const std::vector<Case>& cs) {
  std::vector<std::unique_ptr<TargetSession>> out;
  for (const Case& c : cs) {
    out.push_back(std::make_unique<TargetSession>(t, c.sampling, std::vector<int64_t>{0, 2}));
    EXPECT_TRUE(out.back()->Prefill(c.prompt).ok());
  }
  return out;
}

// Each case's request on its session, all in one batched pass.
std::vector<absl::StatusOr<VerifyOutcome>> VerifyAllInOnePass(
    const std::vector<std::unique_ptr<TargetSession>>& sessions, const std::vector<Case>& cs) {
  std::vector<TargetSession*> ptrs;
  std::vector<VerifyRequest> reqs;
  for (size_t i = 0; i < cs.size(); ++i) {
    ptrs.push_back(sessions[i].get());
    reqs.push_back(Req(cs[i]));
  }
  return TargetSession::VerifyBatch(ptrs, reqs);
}

TEST(VerifyBatch, EqualsEachSessionVerifiedAlone) {
  auto target = Target();
  const auto cs = Cases();
  auto alone = Prefilled(*target, cs);
  auto batched = Prefilled(*target, cs);
  auto results = VerifyAllInOnePass(batched, cs);
  ASSERT_EQ(results.size(), cs.size());
  for (size_t i = 0; i < cs.size(); ++i) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(VerifyOutcome want, alone[i]->Verify(Req(cs[i])));
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    EXPECT_EQ(results[i]->committed, want.committed) << i;
    EXPECT_EQ(results[i]->result.num_accepted, want.result.num_accepted) << i;
    EXPECT_EQ(batched[i]->length(), alone[i]->length()) << i;
    ASSERT_TRUE(results[i]->features.defined()) << i;
    EXPECT_TRUE(at::allclose(results[i]->features, want.features, 1e-4, 1e-5)) << i;
    // The caches hold the same context: the next plain step agrees too.
    const int32_t next = want.committed.back();
    SPECDEC_ASSERT_OK_AND_ASSIGN(int32_t a, alone[i]->Step(next));
    SPECDEC_ASSERT_OK_AND_ASSIGN(int32_t b, batched[i]->Step(next));
    EXPECT_EQ(a, b) << i;
  }
}

// An AR step that keeps the features (DFLASH_ADAPTIVE's AR runs) returns the token and the
// features a verify of no draft returns, greedy and sampled with the same seed, step after step.
TEST(TargetSession, AStepKeepingFeaturesEqualsAVerifyOfNoDraft) {
  auto target = Target();
  for (float temperature : {0.f, 0.9f}) {
    Case c;
    c.prompt = {3, 1, 4, 1, 5};
    c.sampling.temperature = temperature;
    c.sampling.seed = 23;
    c.features = true;
    auto stepped = Prefilled(*target, {c});
    auto verified = Prefilled(*target, {c});
    int32_t last = 9;
    for (int i = 0; i < 6; ++i) {
      at::Tensor features;
      SPECDEC_ASSERT_OK_AND_ASSIGN(int32_t next, stepped[0]->Step(last, &features));
      c.tokens = {last};
      SPECDEC_ASSERT_OK_AND_ASSIGN(VerifyOutcome want, verified[0]->Verify(Req(c)));
      ASSERT_EQ(want.committed.size(), 1u);
      EXPECT_EQ(next, want.committed[0]) << temperature << " step " << i;
      ASSERT_TRUE(features.defined());
      EXPECT_EQ(features.sizes(), want.features.sizes());
      EXPECT_TRUE(at::equal(features, want.features)) << temperature << " step " << i;
      EXPECT_EQ(stepped[0]->length(), verified[0]->length());
      last = next;
    }
  }
}

TEST(VerifyBatch, Bf16RowsAreBitForBitThoseOfEachSessionAlone) {
  // Batch invariance: in bf16, with every product on the linear kernel, a session's logits and
  // features do not depend on the sessions batched with it.
  const auto cs = Cases();
  int64_t rows = 0;
  for (const Case& c : cs) rows += static_cast<int64_t>(c.tokens.size()) + 1;
  if (model::LinearKernelMaxRows() < rows) {
    GTEST_SKIP() << "on this CPU bf16 products of more than " << model::LinearKernelMaxRows()
                 << " rows run on oneDNN, whose result for a row depends on the row count";
  }
  model::ModelConfig c;
  c.architecture = model::Architecture::kQwen3;
  c.qk_norm = true;
  c.vocab_size = 64;  // every product's widths fit the kernel
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 128;
  c.tie_word_embeddings = true;
  model::LoadOptions bf16;
  bf16.dtype = at::kBFloat16;
  auto target =
      *model::Transformer::FromTensors(c, model::Transformer::RandomWeights(c, 7, 0.3), bf16);
  auto alone = Prefilled(*target, cs);
  auto batched = Prefilled(*target, cs);
  auto results = VerifyAllInOnePass(batched, cs);
  ASSERT_EQ(results.size(), cs.size());
  for (size_t i = 0; i < cs.size(); ++i) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(VerifyOutcome want, alone[i]->Verify(Req(cs[i])));
    ASSERT_TRUE(results[i].ok()) << i << ": " << results[i].status();
    EXPECT_EQ(results[i]->committed, want.committed) << i;
    ASSERT_TRUE(results[i]->features.defined()) << i;
    EXPECT_TRUE(at::equal(results[i]->features, want.features)) << i;
  }
}

TEST(VerifyBatch, ABadRequestFailsAloneAndLeavesItsSessionUntouched) {
  auto target = Target();
  auto cs = Cases();
  cs[1].tokens = {10, 99};  // 99 is outside the vocabulary
  auto sessions = Prefilled(*target, cs);
  const int64_t before = sessions[1]->length();
  std::vector<TargetSession*> ptrs;
  std::vector<VerifyRequest> reqs;
  for (size_t i = 0; i < cs.size(); ++i) {
    ptrs.push_back(sessions[i].get());
    reqs.push_back(Req(cs[i]));
  }
  auto results = TargetSession::VerifyBatch(ptrs, reqs);
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(results[1].status().message().find("99"), absl::string_view::npos);
  EXPECT_EQ(sessions[1]->length(), before);
  for (size_t i : {0u, 2u, 3u}) EXPECT_TRUE(results[i].ok()) << i << results[i].status();
}

TEST(VerifyBatch, SessionsWithDifferentFeatureLayersDoNotShareABatch) {
  auto target = Target();
  TargetSession a(*target, {}, {0, 2}), b(*target, {}, {1}), c(*target, {}, {0, 2});
  VerifyRequest with, without;
  with.want_features = true;
  EXPECT_FALSE(TargetSession::CanShareBatch(a, with, b, with));
  EXPECT_TRUE(TargetSession::CanShareBatch(a, with, c, with));
  EXPECT_TRUE(TargetSession::CanShareBatch(a, with, b, without));
  EXPECT_FALSE(TargetSession::CanShareBatch(a, with, a, with));  // one session, one op per pass
}

TEST(RunBatch, PrefillsJoinTheVerifyPassAndEqualEachAlone) {
  auto target = Target();
  const auto cs = Cases();
  // Sessions 0 and 1 are prefilled beforehand and verify in the pass; 2 and 3 prefill in it (one
  // with feature layers, one without: the pass captures them, only the one that wants gets them).
  auto alone = Prefilled(*target, cs);
  auto batched = Prefilled(*target, {cs[0], cs[1]});
  std::vector<std::unique_ptr<TargetSession>> fresh;
  fresh.push_back(
      std::make_unique<TargetSession>(*target, cs[2].sampling, std::vector<int64_t>{0, 2}));
  fresh.push_back(std::make_unique<TargetSession>(*target, cs[3].sampling, std::vector<int64_t>{}));
  TargetSession plain(*target, cs[3].sampling, {});
  SPECDEC_ASSERT_OK_AND_ASSIGN(PrefillOutcome plain_want, plain.Prefill(cs[3].prompt));
  std::vector<TargetSession*> pptrs = {fresh[0].get(), fresh[1].get()};
  std::vector<std::span<const int32_t>> prompts = {cs[2].prompt, cs[3].prompt};
  std::vector<TargetSession*> vptrs = {batched[0].get(), batched[1].get()};
  std::vector<VerifyRequest> reqs = {Req(cs[0]), Req(cs[1])};
  auto r = TargetSession::RunBatch(pptrs, prompts, vptrs, reqs);
  ASSERT_EQ(r.prefills.size(), 2u);
  ASSERT_EQ(r.verifies.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(VerifyOutcome want, alone[i]->Verify(Req(cs[i])));
    ASSERT_TRUE(r.verifies[i].ok()) << i << ": " << r.verifies[i].status();
    EXPECT_EQ(r.verifies[i]->committed, want.committed) << i;
    EXPECT_TRUE(at::allclose(r.verifies[i]->features, want.features, 1e-4, 1e-5)) << i;
  }
  // The prefill with feature layers equals session 2's own prefill (from Prefilled): same
  // context length, first token, last logits and features.
  TargetSession again(*target, cs[2].sampling, {0, 2});
  SPECDEC_ASSERT_OK_AND_ASSIGN(PrefillOutcome want2, again.Prefill(cs[2].prompt));
  ASSERT_TRUE(r.prefills[0].ok()) << r.prefills[0].status();
  EXPECT_EQ(r.prefills[0]->first_token, want2.first_token);
  EXPECT_TRUE(at::allclose(r.prefills[0]->last_logits, want2.last_logits, 1e-4, 1e-5));
  ASSERT_TRUE(r.prefills[0]->features.defined());
  EXPECT_TRUE(at::allclose(r.prefills[0]->features, want2.features, 1e-4, 1e-5));
  EXPECT_EQ(fresh[0]->length(), static_cast<int64_t>(cs[2].prompt.size()));
  ASSERT_TRUE(r.prefills[1].ok()) << r.prefills[1].status();
  EXPECT_EQ(r.prefills[1]->first_token, plain_want.first_token);
  EXPECT_TRUE(at::allclose(r.prefills[1]->last_logits, plain_want.last_logits, 1e-4, 1e-5));
  EXPECT_FALSE(r.prefills[1]->features.defined());
  // The batched prefills left the same caches: their next steps (and verifies) agree.
  for (size_t k = 0; k < 2; ++k) {
    const Case& c = cs[2 + k];
    TargetSession* mine = fresh[k].get();
    TargetSession* ref = k == 0 ? alone[2].get() : &plain;
    VerifyRequest v = Req(c);
    v.want_features = false;
    SPECDEC_ASSERT_OK_AND_ASSIGN(VerifyOutcome a, ref->Verify(v));
    SPECDEC_ASSERT_OK_AND_ASSIGN(VerifyOutcome b, mine->Verify(v));
    EXPECT_EQ(a.committed, b.committed) << k;
  }
}

// Chunked prefill: a prompt run in parts, beside other sessions' verifies, ends with the outcome
// of the whole prompt at once (first token, last logits and every row's features, bit for bit);
// until its last part the session refuses verifies and any other prompt.
TEST(RunBatch, APromptInPartsEndsAsTheWholePromptAtOnce) {
  auto target = Target();
  const auto cs = Cases();
  const std::vector<int32_t> prompt = {3, 14, 15, 9, 26, 5, 35, 8, 9, 7, 9, 32, 38, 4, 6};
  TargetSession whole(*target, cs[3].sampling, {0, 2});
  SPECDEC_ASSERT_OK_AND_ASSIGN(PrefillOutcome want, whole.Prefill(prompt));
  auto others = Prefilled(*target, {cs[0], cs[1]});
  TargetSession parted(*target, cs[3].sampling, {0, 2});
  TargetSession* pptr = &parted;
  const std::span<const int32_t> prompts[] = {prompt};
  int64_t length = 0;
  std::optional<PrefillOutcome> last;
  for (int64_t rows : {4, 1, 6, 100}) {
    std::vector<TargetSession*> vptrs = {others[0].get()};
    std::vector<VerifyRequest> reqs = {Req(cs[0])};
    reqs[0].tokens = std::span<const int32_t>(cs[0].tokens).first(1);  // an AR step beside it
    const int64_t part_rows[] = {rows};
    auto r = TargetSession::RunBatch({&pptr, 1}, prompts, vptrs, reqs, part_rows);
    ASSERT_TRUE(r.prefills[0].ok()) << r.prefills[0].status();
    ASSERT_TRUE(r.verifies[0].ok()) << r.verifies[0].status();
    length = std::min<int64_t>(length + rows, static_cast<int64_t>(prompt.size()));
    EXPECT_EQ(parted.length(), length);
    if (r.prefills[0]->complete) {
      last = *r.prefills[0];
      break;
    }
    EXPECT_EQ(r.prefills[0]->first_token, -1);
    SPECDEC_EXPECT_STATUS(parted.Verify(Req(cs[1])), absl::StatusCode::kFailedPrecondition,
                          "still being prefilled");
    const std::vector<int32_t> other = {1, 2};
    const std::span<const int32_t> wrong[] = {other};
    auto bad = TargetSession::RunBatch({&pptr, 1}, wrong, {}, {});
    SPECDEC_EXPECT_STATUS(bad.prefills[0], absl::StatusCode::kFailedPrecondition,
                          "its rest was expected");
  }
  ASSERT_TRUE(last.has_value());
  EXPECT_EQ(last->first_token, want.first_token);
  EXPECT_TRUE(last->last_logits.equal(want.last_logits));
  ASSERT_TRUE(last->features.defined());
  EXPECT_TRUE(last->features.equal(want.features));
  // The same caches: the next verifies agree.
  SPECDEC_ASSERT_OK_AND_ASSIGN(VerifyOutcome a, whole.Verify(Req(cs[3])));
  SPECDEC_ASSERT_OK_AND_ASSIGN(VerifyOutcome b, parted.Verify(Req(cs[3])));
  EXPECT_EQ(a.committed, b.committed);
  EXPECT_TRUE(a.features.equal(b.features));
}

TEST(RunBatch, ABadPromptFailsAloneAndTheRestRuns) {
  auto target = Target();
  const auto cs = Cases();
  auto verifying = Prefilled(*target, {cs[0]});
  TargetSession bad(*target, {}, {}), used(*target, {}, {}), good(*target, {}, {});
  ASSERT_TRUE(used.Prefill(cs[1].prompt).ok());
  const std::vector<int32_t> out_of_vocab = {1, 2, 61};
  std::vector<TargetSession*> pptrs = {&bad, &used, &good};
  std::vector<std::span<const int32_t>> prompts = {out_of_vocab, cs[1].prompt, cs[2].prompt};
  std::vector<TargetSession*> vptrs = {verifying[0].get()};
  std::vector<VerifyRequest> reqs = {Req(cs[0])};
  auto r = TargetSession::RunBatch(pptrs, prompts, vptrs, reqs);
  EXPECT_EQ(r.prefills[0].status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.prefills[0].status().message().find("61"), absl::string_view::npos);
  EXPECT_EQ(bad.length(), 0);
  EXPECT_EQ(r.prefills[1].status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(used.length(), static_cast<int64_t>(cs[1].prompt.size()));
  EXPECT_TRUE(r.prefills[2].ok()) << r.prefills[2].status();
  EXPECT_EQ(good.length(), static_cast<int64_t>(cs[2].prompt.size()));
  EXPECT_TRUE(r.verifies[0].ok()) << r.verifies[0].status();
}

// A one-layer DFlash drafter on the target's layers 0 and 2 (features 2 x 32 wide).
std::unique_ptr<model::DFlashDrafter> Drafter(const model::Transformer& target) {
  model::DFlashConfig fc;
  fc.layers = target.config();
  fc.layers.num_hidden_layers = 1;
  fc.block_size = 5;
  fc.mask_token_id = 60;
  fc.target_layer_ids = {0, 2};
  return *model::DFlashDrafter::FromTensors(fc, model::DFlashDrafter::RandomWeights(fc, 32, 7, 0.3),
                                            target);
}

TEST(DraftBlockBatch, EqualsEachSessionDraftingAlone) {
  auto target = Target();
  auto drafter = Drafter(*target);
  const int64_t width = 2 * 32;  // two captured layers of hidden size 32
  at::manual_seed(3);
  std::vector<at::Tensor> ctx = {at::randn({4, width}), at::randn({2, width}),
                                 at::randn({6, width}), at::randn({3, width})};
  const std::vector<int32_t> lasts = {5, 17, 33, 2};
  std::vector<int32_t> sizes = {5, 3, 8, 5};
  std::vector<std::unique_ptr<DFlashDraftSession>> alone, batched;
  std::vector<DFlashDraftSession*> ptrs;
  for (size_t i = 0; i < ctx.size(); ++i) {
    alone.push_back(std::make_unique<DFlashDraftSession>(*drafter));
    batched.push_back(std::make_unique<DFlashDraftSession>(*drafter));
    alone[i]->Extend(ctx[i]);
    batched[i]->Extend(ctx[i]);
    ptrs.push_back(batched[i].get());
  }
  // Two rounds: the second drafts on top of the context the first one cached.
  for (int round = 0; round < 2; ++round) {
    auto results = DFlashDraftSession::DraftBlockBatch(ptrs, lasts, sizes);
    for (size_t i = 0; i < ctx.size(); ++i) {
      SPECDEC_ASSERT_OK_AND_ASSIGN(auto want, alone[i]->DraftBlock(lasts[i], sizes[i]));
      ASSERT_TRUE(results[i].ok()) << results[i].status();
      EXPECT_EQ(*results[i], want) << "round " << round << " session " << i;
      EXPECT_EQ(batched[i]->context_length(), alone[i]->context_length());
      alone[i]->Extend(ctx[i].narrow(0, 0, 1));
      batched[i]->Extend(ctx[i].narrow(0, 0, 1));
    }
  }
  sizes[1] = 1;  // invalid: the batch is rejected, every session drafts alone
  auto results = DFlashDraftSession::DraftBlockBatch(ptrs, lasts, sizes);
  EXPECT_EQ(results[1].status().code(), absl::StatusCode::kInvalidArgument);
  for (size_t i : {0u, 2u, 3u}) {
    SPECDEC_ASSERT_OK_AND_ASSIGN(auto want, alone[i]->DraftBlock(lasts[i], sizes[i]));
    ASSERT_TRUE(results[i].ok()) << results[i].status();
    EXPECT_EQ(*results[i], want) << i;
  }
}

// Features arriving in many pieces (one row per AR step, views, a non-contiguous tensor, more
// rows than the buffer keeps) draft exactly what one Extend of all of them drafts; a rejected
// draft keeps them pending.
TEST(DFlashDraftSession, PiecewiseExtendEqualsOneExtend) {
  auto target = Target(512);
  auto drafter = Drafter(*target);
  const int64_t width = 2 * 32;  // two captured layers of hidden size 32
  at::manual_seed(4);
  const at::Tensor first = at::randn({300, width}), second = at::randn({45, width});
  DFlashDraftSession whole(*drafter), pieces(*drafter);
  whole.Extend(first);
  for (int64_t i = 0; i < 40; ++i) pieces.Extend(first.narrow(0, i, 1));
  pieces.Extend(first.narrow(0, 40, 60).t().contiguous().t());  // column-major rows
  pieces.Extend(at::Tensor());                                  // nothing: ignored
  pieces.Extend(first.narrow(0, 100, 200));
  EXPECT_EQ(pieces.DraftBlock(7, 1).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(pieces.context_length(), 0);
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto want, whole.DraftBlock(7, 5));
  SPECDEC_ASSERT_OK_AND_ASSIGN(auto got, pieces.DraftBlock(7, 5));
  EXPECT_EQ(got, want);
  EXPECT_EQ(pieces.context_length(), 300);
  whole.Extend(second);
  for (int64_t i = 0; i < 45; i += 5) pieces.Extend(second.narrow(0, i, 5));
  SPECDEC_ASSERT_OK_AND_ASSIGN(want, whole.DraftBlock(want.back(), 4));
  SPECDEC_ASSERT_OK_AND_ASSIGN(got, pieces.DraftBlock(got.back(), 4));
  EXPECT_EQ(got, want);
  EXPECT_EQ(pieces.context_length(), 345);
}

}  // namespace
}  // namespace specdec::engine
