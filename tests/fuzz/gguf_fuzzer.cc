// GGUF files of arbitrary bytes: Open validates or refuses; an accepted file answers its getters
// and its readable tensors' bytes are in the file.
#include "common/io/gguf.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file = specdec::io::GgufFile::Open(specdec::fuzz::InputAsFile(data, size, ".gguf"));
  if (!file.ok()) return 0;
  for (const std::string& key : (*file)->Keys()) {
    (void)(*file)->GetInt(key);
    (void)(*file)->GetFloat(key);
    (void)(*file)->GetString(key);
    (void)(*file)->GetStringArray(key);
    (void)(*file)->GetIntArray(key);
  }
  volatile uint8_t sink = 0;
  for (const std::string& name : (*file)->tensor_names()) {
    auto t = (*file)->Tensor(name);
    if (t.ok() && t->nbytes > 0) sink ^= static_cast<uint8_t>(t->data[t->nbytes - 1]);
  }
  return 0;
}
