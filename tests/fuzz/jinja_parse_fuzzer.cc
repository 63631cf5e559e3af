// Chat template sources of arbitrary bytes: parsed into a template, or refused with a status.
#include <string>

#include "common/chat/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)specdec::chat::ChatTemplate::FromString(
      std::string(reinterpret_cast<const char*>(data), size), "<s>", "</s>");
  return 0;
}
