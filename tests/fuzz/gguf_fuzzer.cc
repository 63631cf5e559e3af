// GGUF files of arbitrary bytes: Open validates or refuses; an accepted file answers its getters,
// its readable tensors' bytes are in the file, and its quantized tensors dequantize within them.
#include <vector>

#include "common/io/gguf.h"
#include "common/io/gguf_dequantize.h"
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
  for (const std::string& name : (*file)->tensor_names()) {
    auto t = (*file)->Tensor(name);
    if (!t.ok() || t->nbytes == 0) continue;
    specdec::fuzz::Touch(static_cast<uint8_t>(t->data[t->nbytes - 1]));
    if (!specdec::io::IsDequantizable(t->ggml_type)) continue;
    int64_t values = 1;
    for (int64_t ne : t->ne) values *= ne;
    if (values > (1 << 20)) continue;  // the blocks are in the file: at most 64 KiB of them
    std::vector<float> out(static_cast<size_t>(values));
    // Every quantized tensor the reader hands out is whole blocks of its type, and decodes.
    if (!specdec::io::Dequantize(t->ggml_type, {t->data, t->nbytes}, out).ok()) __builtin_trap();
    specdec::fuzz::Touch(static_cast<uint8_t>(out.back() > 0));
  }
  return 0;
}
