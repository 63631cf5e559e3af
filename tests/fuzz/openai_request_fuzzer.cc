// OpenAI request bodies of arbitrary bytes, and chat messages rendered with the real Qwen3 and
// Llama 3 templates: parsed, or refused with a status.
#include <cstdlib>

#include "common/chat/chat_template.h"
#include "common/tokenizer/tokenizer.h"
#include "services/router/openai_request.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto* tok = [] {
    auto t = specdec::tokenizer::Tokenizer::FromFile(
        std::string(SPECDEC_SOURCE_DIR) + "/models/specdec-pycode/target/tokenizer.json");
    if (!t.ok()) std::abort();
    return t->release();
  }();
  static const auto* templates = [] {
    auto* v = new std::vector<specdec::chat::ChatTemplate>;
    for (const char* name : {"qwen3", "llama3"}) {
      auto t = specdec::chat::ChatTemplate::FromString(
          specdec::fuzz::ReadSourceFile(std::string("tests/data/chat_templates/") + name +
                                        ".jinja"),
          "<|begin_of_text|>", "<|end_of_text|>");
      if (!t.ok()) std::abort();
      v->push_back(*std::move(t));
    }
    return v;
  }();
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  (void)specdec::services::ParseCompletionRequest(body, 16);
  for (const auto& t : *templates) {
    (void)specdec::services::ParseChatRequest(body, &t, tok, 128, 589824);
  }
  return 0;
}
