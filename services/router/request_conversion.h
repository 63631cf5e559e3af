// The router's one conversion between the client API (specdec.v1 Generate messages) and the
// engine's request and statistics types (common/engine/request.h).
#ifndef SPECDEC_SERVICES_ROUTER_REQUEST_CONVERSION_H_
#define SPECDEC_SERVICES_ROUTER_REQUEST_CONVERSION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/engine/request.h"
#include "common/engine/request_limits.h"
#include "specdec/v1/router.pb.h"

namespace specdec::tokenizer {
class Tokenizer;
}

namespace specdec::services {

engine::Method ToEngine(v1::Method method);
v1::Method ToProto(engine::Method method);

// What the router fills in where a request leaves a field unset, and what it checks against.
struct RequestDefaults {
  v1::Method method = v1::AR;
  int32_t max_new_tokens = 128;
  std::vector<int32_t> eos_token_ids;  // stop tokens unless ignore_eos
  engine::ModelLimits limits;
  std::vector<std::string> model_names;  // what GenerateRequest.model may name
};

inline constexpr size_t kMaxRequestIdBytes = 128;

// The prompt's token ids: token_ids as sent, or text (UTF-8, else INVALID_ARGUMENT) tokenized
// with `tokenizer` (null: text prompts are FAILED_PRECONDITION). Text longer than
// `max_text_bytes` (0 = no limit) is INVALID_ARGUMENT before any tokenization. Ids are checked by
// ConvertRequest.
absl::StatusOr<std::vector<int32_t>> PromptTokens(const v1::GenerateRequest& request,
                                                  const tokenizer::Tokenizer* tokenizer,
                                                  size_t max_text_bytes = 0);

// The longest text that can still fit `max_context` tokens: max_context x the longest token's
// bytes x 4 (normalizers may shrink text, NFKC up to 3 bytes into 1). Longer text cannot fit.
size_t MaxPromptBytes(const tokenizer::Tokenizer& tokenizer, int64_t max_context);

// The engine request of a Generate call, validated (request_limits.h): proto3's zeros read as
// the defaults, EOS added to the stop tokens unless ignore_eos. INVALID_ARGUMENT names the field;
// a `model` the router does not serve is NOT_FOUND.
absl::StatusOr<engine::DecodeOptions> ConvertRequest(const v1::GenerateRequest& request,
                                                     std::span<const int32_t> prompt,
                                                     const RequestDefaults& defaults);

// The statistics' wire form; estimated_speedup and in_flight_at_start are the router's to set.
v1::RequestStats ToProto(const engine::DecodeStats& stats);

// RequestStats.estimated_speedup: the tokens committed after the first times `ar_step_ms` (a
// one-token step's running mean), over the wall time from the first token to the end. That time,
// not the sum of the steps' own times: a run's steps that reach the router together (while it was
// streaming an earlier one) have almost no time of their own, and a short request then read
// several times faster than AR while it ran as AR. 0 where either time is unknown.
double EstimatedSpeedup(const engine::DecodeStats& stats, double ar_step_ms);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_REQUEST_CONVERSION_H_
