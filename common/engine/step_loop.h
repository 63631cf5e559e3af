// The speculative step loop of one request, written once: prefill, then plan -> draft -> verify
// -> commit until a stop, then the statistics (docs/design.md §1-2). It runs over two small
// interfaces, the target side and the drafter side, implemented in process over the engine's
// sessions (local_sides.h) and in the router over the services' gRPC streams; load awareness and
// block choice plug in as a planning hook, so the loop never depends on the router. Torch-free.
#ifndef SPECDEC_COMMON_ENGINE_STEP_LOOP_H_
#define SPECDEC_COMMON_ENGINE_STEP_LOOP_H_

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/lookup_weighing.h"
#include "common/engine/prompt_lookup.h"
#include "common/engine/request.h"
#include "common/engine/verify.h"

namespace specdec::tokenizer {
class Tokenizer;
}

namespace specdec::engine {

struct PrefillResult {
  int32_t first_token = -1;        // sampled from the last prompt position
  std::vector<float> last_logits;  // raw logits of the last prompt position, when asked for
  // A remote target's report (0 in process): the time the prefill waited in the target's queue,
  // and the round trip's time outside the target (round trip - queue - compute).
  double queue_ms = 0;
  double network_ms = 0;
};

// What the loop asks of a request's prefill.
struct PrefillAsk {
  bool logits = false;  // return the last prompt position's raw logits (DFLASH_ADAPTIVE's policy)
  // false: the request will not draft, so the target neither keeps its rows' features for a
  // drafter nor hosts a drafter for it.
  bool may_draft = true;
};

// What one target pass committed, as the target side reports it.
struct StepResult {
  std::vector<int32_t> committed;  // accepted draft tokens, then the correction/bonus token
  int32_t drafted = 0;             // draft rows verified after row 0 (0: an AR step)
  int32_t accepted = 0;            // of which accepted (tree: the accepted path's length)
  int32_t positions = 0;           // draft positions covered (chain: drafted; tree: its depth)
  double verify_ms = 0;            // target time of the step as the side saw it
  double draft_ms = 0;             // drafting time of the step (hosted drafting: the target's)
  double wall_ms = -1;             // the whole step's wall time; < 0: unknown
  int32_t batch_size = 1;          // sequences in the target pass that served the step
  // A remote target's report (0 in process): the step's wait in the target's queue, and its
  // round trip's time outside the target (round trip - queue - compute - hosted drafting).
  double queue_ms = 0;
  double network_ms = 0;
  // The passes behind the step, where the side knows them (a target's report; else 0): the
  // rows and compute time of the target's forward pass (all its sequences'), and the rows of the
  // drafter pass that drafted the step.
  int32_t pass_rows = 0;
  int32_t pass_prompt_rows = 0;  // of pass_rows, new requests' prompts that joined the pass
  double pass_ms = 0;
  int32_t draft_rows = 0;
  std::string draft_error;  // a hosted drafter failed on this step (it ran as AR)
  bool looked_up = false;   // a run's step whose draft came from prompt lookup (RunPlan::lookup)
  // A prompt-lookup step's matched suffix length (1 .. kLookupMaxMatch; 0: unknown or none): a
  // longer match is accepted more often, so the cost model keeps lookups' acceptance per length.
  int32_t lookup_match = 0;
};

// A drafter's proposal after the last committed token.
struct Draft {
  std::vector<int32_t> tokens;
  // Tree: the parent of each token (-1: a child of the last committed token). Empty: a chain.
  std::vector<int32_t> parents;
  // Sampled proposals at temperature > 0: the q rows the target's verify needs (verify.h).
  std::vector<float> probs;
  Proposal proposal = Proposal::kSampled;
  int32_t positions = 0;  // chain: tokens; tree: the deepest node's depth
  int32_t lookup_match = 0;  // a prompt-lookup draft: its matched suffix length (StepResult)
};

// How much a drafter proposes: a chain or block of `length` tokens, or a tree at most `length`
// deep with at most `tree_budget` nodes.
struct DraftShape {
  int32_t length = 0;
  int32_t tree_budget = 0;
};

// A run of steps the target takes on its own: single-row AR steps or, with block_size >= 2,
// blocks drafted by the drafter it hosts. Each step reaches the sink as it commits.
struct RunPlan {
  int32_t max_tokens = 1;  // the run commits at most this many tokens
  int32_t block_size = 0;  // >= 2: hosted drafting with blocks of this many rows
  double max_ms = 0;       // > 0: the run ends after the first step ending this long after it began
  bool features = false;   // keep the committed rows' features for the drafter side
  // lookup.max_tokens > 0: each step where the sequence the target holds repeats verifies a
  // prompt-lookup draft of this shape (prompt_lookup.h) one-hot, instead of a single row or a
  // hosted block (NGRAM's runs; DFLASH_ADAPTIVE's planned runs).
  LookupShape lookup;
  // Set: the run weighs each lookup draft of that shape itself and verifies the tokens
  // LookupWeighing::Tokens gives (none: the step's single row or hosted block), the weighing
  // taking every step of the run (LookupWeighing::AfterStep).
  std::optional<LookupWeighing> lookup_weighing;
  std::span<const int32_t> stop_token_ids;  // the run ends after committing one of these
};
// Takes one step of a run; false ends the run.
using StepSink = std::function<bool(StepResult&& step)>;

// The target side of one request. Not thread-safe: the loop's thread only.
class TargetSide {
 public:
  virtual ~TargetSide() = default;
  virtual absl::StatusOr<PrefillResult> Prefill(std::span<const int32_t> prompt,
                                                const PrefillAsk& ask) = 0;
  // Verifies `draft` after `last` (the last committed token) in one pass. `want_features`: the
  // drafter side needs the committed rows' features.
  virtual absl::StatusOr<StepResult> Verify(int32_t last, const Draft& draft,
                                            bool want_features) = 0;
  virtual absl::Status Run(int32_t last, const RunPlan& plan, const StepSink& sink) = 0;
  // The training block size of the DFlash drafter the target hosts for this request (known after
  // Prefill); 0 when it hosts none.
  virtual int32_t HostedBlockSize() const { return 0; }
};

// The drafter side of one request. Not thread-safe: the loop's thread only.
class DrafterSide {
 public:
  virtual ~DrafterSide() = default;
  // Opens the drafter's session on the prompt; called at the request's first speculative step.
  virtual absl::Status Open(std::span<const int32_t> prompt) = 0;
  virtual absl::StatusOr<Draft> Propose(int32_t last, const DraftShape& shape) = 0;
  // After a verify: the drafter keeps the committed path.
  virtual absl::Status Accept(const StepResult& step) = 0;
  // DFlash: the training block size B (the default block), and the target features it reads.
  virtual int32_t TrainedBlockSize() const { return 0; }
  virtual bool WantsFeatures() const { return false; }
};

// What DFLASH_ADAPTIVE's policy says of a request.
struct BlockChoice {
  int32_t block_size = 0;  // the request's block: the largest one its steps may draft
  // The predicted share of steps that accept each draft position (non-increasing); empty when
  // the policy predicts only the block.
  std::vector<float> acceptance;
  // The sampling temperature that acceptance was measured at (the policy's labels): the loop
  // hands the curve on only to requests of the same temperature class
  // (BlockCostModel::AcceptanceClass).
  float acceptance_temperature = 0;
};

// DFLASH_ADAPTIVE's block size from the target's raw last-prompt-position logits.
class BlockPolicy {
 public:
  virtual ~BlockPolicy() = default;
  virtual absl::StatusOr<BlockChoice> ChooseBlockSize(std::span<const float> last_logits) = 0;
};

// Where a step came from, for planning hooks that measure steps.
// kLookup: a DFLASH_ADAPTIVE step whose draft came from prompt lookup, not the drafter (its
// target pass is measured; its drafting and acceptance say nothing of the drafter's), taken
// before planning or inside a planned run.
// kLookupRun: a step of an NGRAM run, drafted by prompt lookup in the target (RunPlan).
enum class StepOrigin { kArRun, kTargetDraftedRun, kDrafted, kLookup, kLookupRun };

// The loop's state as a planning hook sees it.
struct LoopView {
  Method method = Method::kAr;
  int32_t tokens_left = 0;
  int32_t block_size = 0;  // DFLASH*: the request's block (0 until speculation starts)
  bool hosted = false;     // the target drafts (known after prefill)
  // DFLASH_ADAPTIVE: the policy's predicted acceptance per draft position (BlockChoice), empty
  // when it predicted none or predicted it for another temperature class.
  std::span<const float> predicted_acceptance;
  float temperature = 0;  // the request's sampling temperature
};

// What the next step of a request that may speculate does.
struct StepPlan {
  bool speculate = true;   // false: an AR run on the target
  int32_t run_tokens = 0;  // AR or target-drafted runs: the most tokens (the loop caps it)
  double run_max_ms = 0;   // their time bound; 0: none
};

// Optional planning of a request's steps (the router's load awareness). Called on the loop's
// thread; implementations that share state across requests synchronize it themselves.
class PlanningHook {
 public:
  virtual ~PlanningHook() = default;
  // Before the prefill of a request that could speculate: false runs the whole request without
  // a drafter (no features kept for one, no policy) as one planned run of AR steps, which
  // DFLASH_ADAPTIVE's lookups join where the run's weighing (WeighRunLookups; else
  // RunLookupShape) lets them (the drafter keeps losing at this request's temperature on this
  // machine). By default true.
  virtual bool Speculates(const LoopView& view) { return true; }
  // Before each step that could speculate; `plan` holds the default (speculate).
  virtual void PlanStep(const LoopView& view, StepPlan* plan) {}
  // The block of a speculative step or run, at most `block` (the request's).
  virtual int32_t ChooseBlock(const LoopView& view, int32_t block) { return block; }
  // DFLASH_ADAPTIVE found a prompt-lookup draft of `available` tokens by a suffix of `match`
  // tokens: how many of them the next step verifies (0: none; the step is planned as usual
  // instead). By default AdaptiveLookup's shape.
  virtual int32_t LookupTokens(const LoopView& view, int32_t available, int32_t match) {
    return AdaptiveLookupTokens(available, match);
  }
  // DFLASH_ADAPTIVE's next planned run, whose steps draft blocks of `run_block` rows (1: AR
  // steps): the lookup its steps draft where the sequence repeats, at most `most` tokens
  // (max_tokens 0: none). A prediction only: the run's lookups are observed as kLookup. By
  // default AdaptiveLookup's shape.
  virtual LookupShape RunLookupShape(const LoopView& view, int32_t run_block, int32_t most) {
    return AdaptiveLookup(most);
  }
  // The same run's lookups weighed by the run itself, step by step (RunPlan::lookup_weighing),
  // instead of a shape fixed for the whole run: then its steps look up suffixes down to 1 token
  // and verify what the weighing gives. By default nullopt (RunLookupShape).
  virtual std::optional<LookupWeighing> WeighRunLookups(const LoopView& view, int32_t run_block,
                                                        int32_t most) {
    return std::nullopt;
  }
  // After every step of a planned step or run (`first`: the first step of its run).
  virtual void Observe(const StepPlan& plan, StepOrigin origin, const StepResult& step,
                       bool first) {}
};

// What one committed step looked like, for streaming.
struct StepInfo {
  int64_t step = 0;        // 0 = prefill, then 1, 2, ... per verify pass
  int32_t drafted = 0;     // draft tokens proposed in this step
  int32_t accepted = 0;    // of which accepted
  int32_t positions = 0;   // draft positions covered
  int32_t block_size = 0;  // DFLASH*: block size of the step
  int32_t batch_size = 1;  // sequences in the target pass
  double draft_ms = 0;
  double verify_ms = 0;  // prefill time for step 0
  double network_ms = 0;  // StepResult::network_ms
  // The completion's text this step released, when the loop decodes text (LoopParts). The loop
  // ends with a text-only call (no tokens, step -1) for text held back to the end.
  std::string text;
};

// Called for every step with the tokens it added to the output (possibly none: a stop token).
using CommitCallback = std::function<void(std::span<const int32_t> tokens, const StepInfo& step)>;

// The sides and hooks of one request. `target` is required; a speculative method needs
// `drafter` unless the target drafts (a hosted drafter; NGRAM's lookup runs); without one it
// runs as AR, with drafter_fallback and `drafter_unavailable` as the note. `policy` is optional
// (DFLASH_ADAPTIVE then uses the training block size).
struct LoopParts {
  TargetSide* target = nullptr;
  DrafterSide* drafter = nullptr;
  BlockPolicy* policy = nullptr;
  PlanningHook* hook = nullptr;
  int64_t max_context = 0;
  absl::Status drafter_unavailable = absl::UnavailableError("no drafter");
  std::function<bool()> cancelled;  // polled before every step; true ends with CANCELLED
  CommitCallback on_commit;
  // Decodes the completion's text (StepInfo::text, DecodeResult::text) when `decode_text` or
  // stop strings ask for it; stop strings without a tokenizer are FAILED_PRECONDITION.
  const tokenizer::Tokenizer* tokenizer = nullptr;
  bool decode_text = false;
};

// Runs one validated request (request_limits.h) to its end. Errors of the target side end the
// request; errors of the drafter side and the policy degrade it (to AR, to the training block
// size) and say so in the statistics.
absl::StatusOr<DecodeResult> RunStepLoop(const LoopParts& parts, std::span<const int32_t> prompt,
                                         const DecodeOptions& options);

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_STEP_LOOP_H_
