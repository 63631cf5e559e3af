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

enum class Method { kAr, kDraftChain, kDyspecTree, kDflash, kDflashAdaptive };

const char* MethodName(Method m);
absl::StatusOr<Method> ParseMethod(std::string_view name);  // "AR", "DRAFT_CHAIN", ... (any case)

struct DecodeOptions {
  Method method = Method::kAr;
  int32_t max_new_tokens = 128;
  sampling::SamplingParams sampling;
  std::vector<int32_t> stop_token_ids;  // generation ends after emitting one of these
  int32_t draft_length = 4;             // DRAFT_CHAIN: K draft tokens per step
  int32_t tree_budget = 16;             // DYSPEC_TREE: draft nodes per step (excluding the root)
  int32_t tree_max_depth = 8;           // DYSPEC_TREE: deepest node
  float tree_threshold = 0.f;           // DYSPEC_TREE: > 0 selects the layer-wise threshold variant
  int32_t block_size = 0;               // DFLASH: 0 = the drafter's training block size
};

// Per-request statistics (DESIGN §5): tau = committed tokens per target verify pass, including the
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
  bool policy_fallback = false;                // DFLASH_ADAPTIVE without a usable policy
  std::string note;  // human-readable remark (e.g. why a fallback happened)
  double prefill_ms = 0, policy_ms = 0, draft_ms = 0, verify_ms = 0, total_ms = 0;

  double tau() const {
    return verify_steps == 0 ? 0.0 : static_cast<double>(committed_tokens) / verify_steps;
  }
};

struct DecodeResult {
  std::vector<int32_t> tokens;  // generated tokens (a stop token is included when hit)
  bool stopped = false;
  DecodeStats stats;
};

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_REQUEST_H_
