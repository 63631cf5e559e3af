// Options and statistics of one generation request, shared by every decoding method.
#ifndef SPECDEC_COMMON_ENGINE_REQUEST_H_
#define SPECDEC_COMMON_ENGINE_REQUEST_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "common/sampling/sampler.h"

namespace specdec::engine {

enum class Method { kAr, kDraftChain, kDyspecTree, kDflash, kDflashAdaptive, kNgram };

const char* MethodName(Method m);
absl::StatusOr<Method> ParseMethod(std::string_view name);  // "AR", "DRAFT_CHAIN", ... (any case)
// DFLASH or DFLASH_ADAPTIVE: the methods that draft with the DFlash block drafter.
inline bool IsDflash(Method m) { return m == Method::kDflash || m == Method::kDflashAdaptive; }
inline constexpr Method kAllMethods[] = {
    Method::kAr,     Method::kDraftChain,     Method::kDyspecTree,
    Method::kDflash, Method::kDflashAdaptive, Method::kNgram};

struct DecodeOptions {
  Method method = Method::kAr;
  int32_t max_new_tokens = 128;
  sampling::SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;  // generation ends at one of these (not included)
  // Generation ends when the completion's text contains one of these; the text ends before it
  // (needs the loop's tokenizer).
  std::vector<std::string> stop_strings;
  int32_t draft_length = 4;    // DRAFT_CHAIN, NGRAM: K draft tokens per step
  int32_t tree_budget = 16;    // DYSPEC_TREE: draft nodes per step (excluding the root)
  int32_t tree_max_depth = 8;  // DYSPEC_TREE: deepest node
  float tree_threshold = 0.f;  // DYSPEC_TREE: > 0 selects the layer-wise threshold variant
  int32_t block_size = 0;      // DFLASH: 0 = the drafter's training block size
  // DFLASH_ADAPTIVE: a step whose sequence's last tokens occurred before drafts their earlier
  // continuation (prompt lookup, as NGRAM does) instead of running the drafter.
  bool adaptive_lookup = true;
};

// Per-request statistics (docs/design.md §5), filled by the step loop for the in-process engine
// and the router alike: tau = committed tokens per target verify pass, including the
// correction/bonus token.
struct DecodeStats {
  Method method = Method::kAr;
  int64_t verify_steps = 0;                    // target forward passes after prefill
  int64_t drafted_tokens = 0;                  // draft tokens proposed to the target
  int64_t accepted_tokens = 0;                 // draft tokens accepted
  int64_t committed_tokens = 0;                // tokens produced after the prefill's first token
  std::vector<int64_t> accepted_per_position;  // [i]: steps whose draft position i was accepted
  std::vector<int64_t> drafted_per_position;   // [i]: steps that drafted position i
  int32_t block_size = 0;                      // DFLASH*: block size used
  bool block_size_from_policy = false;         // DFLASH_ADAPTIVE: the policy chose block_size
  bool policy_fallback = false;                // DFLASH_ADAPTIVE without a usable policy
  bool drafter_fallback = false;               // the drafter failed; the rest ran as AR
  bool speculation_skipped = false;            // a planning hook ran the request as AR (Speculates)
  bool target_drafted = false;                 // blocks drafted by the target's hosted drafter
  int32_t hosted_draft_failures = 0;           // hosted-drafter steps that ran as AR instead
  int32_t planned_ar_steps = 0;                // steps a planning hook ran as AR (load awareness)
  int32_t lookup_steps = 0;                    // DFLASH_ADAPTIVE: steps drafted by prompt lookup
  std::string note;  // human-readable remark (e.g. why a fallback happened)
  double prefill_ms = 0, policy_ms = 0, draft_ms = 0, verify_ms = 0, total_ms = 0;
  // Remote targets only (0 in process): time in the target's queue, and the target round trips'
  // time outside the target (StepResult), summed over the prefill and every step.
  double queue_ms = 0, network_ms = 0;
  double decode_ms = 0;    // wall time of the steps after prefill (drafting and verifying)
  double ttft_ms = 0;      // from the start of the request to its first token
  double mean_itl_ms = 0;  // mean time between committed tokens after the first

  double tau() const {
    return verify_steps == 0 ? 0.0 : static_cast<double>(committed_tokens) / verify_steps;
  }
};

struct DecodeResult {
  std::vector<int32_t> tokens;  // generated tokens; a stop token is not included
  bool stopped = false;         // ended by a stop token or string (else by the length)
  int32_t stop_token = -1;      // the stop token that ended it
  std::string stop_string;      // the stop string that ended it
  std::string text;             // the completion's text, when the loop decoded it
  DecodeStats stats;
};

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_REQUEST_H_
