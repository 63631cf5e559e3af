// Conversion of a Hugging Face checkpoint directory (Llama or Qwen3 layout, F32/F16/BF16
// safetensors, a byte-level BPE tokenizer) into one GGUF file that llama.cpp loads.
#ifndef SPECDEC_COMMON_IO_HF_TO_GGUF_H_
#define SPECDEC_COMMON_IO_HF_TO_GGUF_H_

#include <string>

#include "absl/status/status.h"

namespace specdec::io {

// Writes `gguf_path` from `hf_dir` (config.json, model.safetensors or a sharded index,
// tokenizer.json, tokenizer_config.json), as llama.cpp's own converter lays such a model out:
//  - architecture "llama" (LlamaForCausalLM) or "qwen3" (Qwen3ForCausalLM), their hyperparameters
//    under "<arch>.*", tensors under GGUF names, weights in their dtype, 1-D tensors (norms) as
//    F32;
//  - llama's Q and K rows permuted from HF's rotate-half order to GGUF's interleaved pairs (Qwen3
//    keeps HF's order: llama.cpp runs its RoPE in NeoX mode);
//  - a tied head written once (no output.weight);
//  - Llama 3.1 rope scaling (rope_type "llama3") as llama.cpp's rope_freqs.weight, the factor each
//    rotary pair's frequency is divided by;
//  - the tokenizer as "gpt2" with llama.cpp's pre-tokenizer name, merges, token types, special
//    ids, add_bos_token and the chat template; ids beyond the tokenizer up to the embedding's rows
//    become "[PAD<id>]" unused tokens.
// NOT_FOUND for missing files or tensors; INVALID_ARGUMENT for malformed files or inconsistent
// shapes; UNIMPLEMENTED for other architectures, attention biases, other rope scalings, tensors
// without a GGUF name, and tokenizers ReadHfBpeTokenizer refuses.
struct GgufExportOptions {
  bool f32 = false;  // every tensor as F32 (exact from F16/BF16), as llama.cpp's --outtype f32
};
absl::Status ConvertHfToGguf(const std::string& hf_dir, const std::string& gguf_path,
                             const GgufExportOptions& options = {});

}  // namespace specdec::io

#endif  // SPECDEC_COMMON_IO_HF_TO_GGUF_H_
