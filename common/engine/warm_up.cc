#include "common/engine/warm_up.h"

#include <algorithm>

#include "common/tokenizer/tokenizer.h"

namespace specdec::engine {
namespace {

constexpr char kWarmUpPromptText[] =
    "def fibonacci(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n";

}  // namespace

absl::StatusOr<std::vector<int32_t>> WarmUpPrompt(const tokenizer::Tokenizer* tokenizer,
                                                  int32_t vocab_size) {
  if (tokenizer != nullptr) {
    return tokenizer->Encode(kWarmUpPromptText, tokenizer->add_bos_by_default());
  }
  std::vector<int32_t> ids;
  for (int32_t id = 1; id <= 16; ++id) ids.push_back(id % std::max<int32_t>(1, vocab_size));
  return ids;
}

void MakeWarmUp(int32_t max_new_tokens, DecodeOptions& options) {
  options.method = Method::kDflashAdaptive;
  options.block_size = 0;
  options.max_new_tokens = max_new_tokens;
  options.sampling.temperature = 0;
  options.stop_token_ids.clear();
  options.stop_strings.clear();
  options.adaptive_lookup = false;
}

}  // namespace specdec::engine
