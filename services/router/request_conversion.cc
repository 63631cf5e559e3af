#include "services/router/request_conversion.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/utf8.h"
#include "common/util/status_macros.h"

namespace specdec::services {

engine::Method ToEngine(v1::Method method) {
  switch (method) {
    case v1::DRAFT_CHAIN:
      return engine::Method::kDraftChain;
    case v1::DYSPEC_TREE:
      return engine::Method::kDyspecTree;
    case v1::DFLASH:
      return engine::Method::kDflash;
    case v1::DFLASH_ADAPTIVE:
      return engine::Method::kDflashAdaptive;
    case v1::NGRAM:
      return engine::Method::kNgram;
    default:
      return engine::Method::kAr;
  }
}

v1::Method ToProto(engine::Method method) {
  switch (method) {
    case engine::Method::kAr:
      return v1::AR;
    case engine::Method::kDraftChain:
      return v1::DRAFT_CHAIN;
    case engine::Method::kDyspecTree:
      return v1::DYSPEC_TREE;
    case engine::Method::kDflash:
      return v1::DFLASH;
    case engine::Method::kDflashAdaptive:
      return v1::DFLASH_ADAPTIVE;
    case engine::Method::kNgram:
      return v1::NGRAM;
  }
  return v1::METHOD_UNSPECIFIED;
}

absl::StatusOr<std::vector<int32_t>> PromptTokens(const v1::GenerateRequest& request,
                                                  const tokenizer::Tokenizer* tokenizer,
                                                  size_t max_text_bytes) {
  if (request.has_token_ids()) {
    return std::vector<int32_t>(request.token_ids().ids().begin(), request.token_ids().ids().end());
  }
  if (!request.has_text()) {
    return absl::InvalidArgumentError("the prompt is empty: set text or token_ids");
  }
  if (max_text_bytes > 0 && request.text().size() > max_text_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("text has ", request.text().size(), " bytes; at most ", max_text_bytes,
                     " can fit the model's context: shorten the prompt"));
  }
  if (!tokenizer::IsValidUtf8(request.text())) {
    return absl::InvalidArgumentError("text is not valid UTF-8");
  }
  if (tokenizer == nullptr) {
    return absl::FailedPreconditionError(
        "text prompts need the router's tokenizer (--tokenizer); send token_ids instead");
  }
  return tokenizer->Encode(request.text(), tokenizer->add_bos_by_default());
}

size_t MaxPromptBytes(const tokenizer::Tokenizer& tokenizer, int64_t max_context) {
  size_t longest = 1;
  for (int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    longest = std::max(longest, tokenizer.IdToPiece(id).size());
  }
  return static_cast<size_t>(std::max<int64_t>(max_context, 1)) * longest * 4;
}

namespace {

absl::Status CheckNames(const v1::GenerateRequest& request, const RequestDefaults& defaults) {
  if (request.request_id().size() > kMaxRequestIdBytes ||
      !tokenizer::IsValidUtf8(request.request_id())) {
    return absl::InvalidArgumentError(
        absl::StrCat("request_id must be at most ", kMaxRequestIdBytes, " bytes of UTF-8"));
  }
  if (!tokenizer::IsValidUtf8(request.model())) {
    return absl::InvalidArgumentError("model is not valid UTF-8");
  }
  if (request.model().empty()) return absl::OkStatus();
  for (const std::string& name : defaults.model_names) {
    if (request.model() == name) return absl::OkStatus();
  }
  return absl::NotFoundError(absl::StrCat("model '", request.model(),
                                          "' is not served here; it serves '",
                                          absl::StrJoin(defaults.model_names, "' or '"), "'"));
}

}  // namespace

absl::StatusOr<engine::DecodeOptions> ConvertRequest(const v1::GenerateRequest& request,
                                                     std::span<const int32_t> prompt,
                                                     const RequestDefaults& defaults) {
  RETURN_IF_ERROR(CheckNames(request, defaults));
  if (!v1::Method_IsValid(request.method())) {
    return absl::InvalidArgumentError(absl::StrCat("unknown method ", request.method()));
  }
  engine::DecodeOptions o;
  o.method =
      ToEngine(request.method() == v1::METHOD_UNSPECIFIED ? defaults.method : request.method());
  o.max_new_tokens =
      request.max_new_tokens() == 0 ? defaults.max_new_tokens : request.max_new_tokens();
  const v1::SamplingParams& s = request.sampling();
  o.sampling = {s.temperature(), s.top_k(), s.top_p() == 0.f ? 1.f : s.top_p(), s.seed()};
  o.stop_token_ids.assign(request.stop_token_ids().begin(), request.stop_token_ids().end());
  o.stop_strings.assign(request.stop().begin(), request.stop().end());
  if (!request.ignore_eos()) {
    o.stop_token_ids.insert(o.stop_token_ids.end(), defaults.eos_token_ids.begin(),
                            defaults.eos_token_ids.end());
  }
  if (request.draft_length() != 0) o.draft_length = request.draft_length();
  if (request.tree_budget() != 0) o.tree_budget = request.tree_budget();
  if (request.tree_max_depth() != 0) o.tree_max_depth = request.tree_max_depth();
  o.tree_threshold = request.tree_threshold();
  o.block_size = request.block_size();
  if (o.max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens must be >= 1 (0: the default), got ", o.max_new_tokens));
  }
  RETURN_IF_ERROR(engine::ValidateDecodeRequest(prompt, o, defaults.limits));
  return o;
}

double EstimatedSpeedup(const engine::DecodeStats& stats, double ar_step_ms) {
  const double decode_wall_ms = stats.total_ms - stats.ttft_ms;
  if (ar_step_ms <= 0 || decode_wall_ms <= 0 || stats.committed_tokens <= 0) return 0;
  return static_cast<double>(stats.committed_tokens) * ar_step_ms / decode_wall_ms;
}

v1::RequestStats ToProto(const engine::DecodeStats& s) {
  v1::RequestStats p;
  p.set_method(ToProto(s.method));
  p.set_verify_steps(s.verify_steps);
  p.set_drafted_tokens(s.drafted_tokens);
  p.set_accepted_tokens(s.accepted_tokens);
  p.set_committed_tokens(s.committed_tokens);
  p.set_tau(s.tau());
  for (int64_t n : s.accepted_per_position) p.add_accepted_per_position(n);
  for (int64_t n : s.drafted_per_position) p.add_drafted_per_position(n);
  p.set_block_size(s.block_size);
  p.set_block_size_from_policy(s.block_size_from_policy);
  p.set_policy_fallback(s.policy_fallback);
  p.set_drafter_fallback(s.drafter_fallback);
  p.set_target_drafted(s.target_drafted);
  p.set_load_aware_ar_steps(s.planned_ar_steps);
  p.set_load_aware_ar(s.planned_ar_steps > 0 && s.drafted_tokens == 0);
  p.set_note(s.note);
  p.set_ttft_ms(s.ttft_ms);
  p.set_mean_itl_ms(s.mean_itl_ms);
  v1::StageTimings* t = p.mutable_timings();
  t->set_prefill_ms(s.prefill_ms);
  t->set_policy_ms(s.policy_ms);
  t->set_draft_ms(s.draft_ms);
  t->set_verify_ms(s.verify_ms);
  t->set_total_ms(s.total_ms);
  t->set_network_ms(s.network_ms);
  t->set_queue_ms(s.queue_ms);
  return p;
}

}  // namespace specdec::services
