// The router's request validation on arbitrary GenerateRequest bytes: the prompt is tokenized and
// the request converted, or refused with a status.
#include <cstdlib>

#include "common/tokenizer/tokenizer.h"
#include "services/router/request_conversion.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto* tok = [] {
    auto t = specdec::tokenizer::Tokenizer::FromFile(
        std::string(SPECDEC_SOURCE_DIR) + "/models/specdec-pycode/target/tokenizer.json");
    if (!t.ok()) std::abort();
    return t->release();
  }();
  specdec::v1::GenerateRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  specdec::services::RequestDefaults defaults;
  defaults.eos_token_ids = {2};
  defaults.limits = {tok->vocab_size(), 2048};
  defaults.model_names = {"target"};
  auto prompt = specdec::services::PromptTokens(request, tok, 589824);
  if (!prompt.ok()) return 0;
  (void)specdec::services::ConvertRequest(request, *prompt, defaults);
  return 0;
}
