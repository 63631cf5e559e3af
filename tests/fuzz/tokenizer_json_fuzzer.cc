// tokenizer.json of arbitrary bytes: parsed or refused; an accepted tokenizer encodes and decodes.
#include <string_view>

#include "common/tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto tok = specdec::tokenizer::Tokenizer::FromJson(
      std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/tokenizer.json");
  if (!tok.ok()) return 0;
  auto ids = (*tok)->Encode("def f(x):\n    return x  # héllo ✓", false);
  if (ids.ok()) (void)(*tok)->Decode(*ids);
  return 0;
}
