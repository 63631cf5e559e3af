// Conversion of a llama-architecture GGUF file (F32/F16/BF16 weights) into a Hugging Face
// checkpoint directory.
#ifndef SPECDEC_COMMON_IO_GGUF_TO_HF_H_
#define SPECDEC_COMMON_IO_GGUF_TO_HF_H_

#include <string>

#include "absl/status/status.h"

namespace specdec::io {

// Writes config.json, model.safetensors, tokenizer.json, tokenizer_config.json and
// generation_config.json into `out_dir` (created if missing). Q and K projection rows are
// permuted from GGUF's interleaved RoPE order to HF's rotate-half order; a missing `output`
// tensor (or one equal to the embedding) yields tie_word_embeddings. UNIMPLEMENTED for other
// architectures, tokenizer models or quantized tensors.
absl::Status ConvertGgufToHf(const std::string& gguf_path, const std::string& out_dir);

}  // namespace specdec::io

#endif  // SPECDEC_COMMON_IO_GGUF_TO_HF_H_
