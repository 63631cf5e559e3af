// The pack's tokenizer on arbitrary bytes: encoding never fails for text, and decoding the ids
// of valid UTF-8 text gives the text back.
#include <cstdlib>
#include <memory>
#include <string_view>

#include "common/tokenizer/tokenizer.h"
#include "common/tokenizer/utf8.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto* tok = [] {
    auto t = specdec::tokenizer::Tokenizer::FromFile(
        std::string(SPECDEC_SOURCE_DIR) + "/models/specdec-pycode/target/tokenizer.json");
    if (!t.ok()) std::abort();
    return t->release();
  }();
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto ids = tok->Encode(text, false);
  if (!ids.ok()) std::abort();  // any bytes encode
  const std::string back = tok->Decode(*ids, /*skip_special_tokens=*/false);
  if (specdec::tokenizer::IsValidUtf8(text) && back != text) std::abort();
  return 0;
}
