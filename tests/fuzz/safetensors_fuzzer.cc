// safetensors files of arbitrary bytes: Open validates or refuses; every accepted tensor's bytes
// are readable.
#include "common/io/safetensors.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto file =
      specdec::io::SafetensorsFile::Open(specdec::fuzz::InputAsFile(data, size, ".safetensors"));
  if (!file.ok()) return 0;
  for (const auto& [name, t] : (*file)->tensors()) {
    if (t.nbytes == 0) continue;
    specdec::fuzz::Touch(static_cast<uint8_t>(t.data[0]));
    specdec::fuzz::Touch(static_cast<uint8_t>(t.data[t.nbytes - 1]));
  }
  return 0;
}
