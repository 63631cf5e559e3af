// Conversion of a llama- or qwen3-architecture GGUF file (F32/F16/BF16, Q8_0, Q6_K, Q5 or Q4
// weights) into a Hugging Face checkpoint directory; hf_to_gguf.h is the other direction.
#ifndef SPECDEC_COMMON_IO_GGUF_TO_HF_H_
#define SPECDEC_COMMON_IO_GGUF_TO_HF_H_

#include <string>

#include "absl/status/status.h"

namespace specdec::io {

// Converts a llama- or qwen3-architecture GGUF file with F32/F16/BF16 weights, or weights of the
// block types of gguf_dequantize.h (Q8_0, Q6_K, Q5_K, Q5_0, Q5_1, Q4_K, Q4_0, Q4_1), into a Hugging
// Face checkpoint directory: writes model.safetensors, config.json, tokenizer.json,
// tokenizer_config.json and generation_config.json into `out_dir` (created if missing; existing
// files are replaced).
//  - Tensors keep their dtype, except 1-D F32 tensors (norms), which take the embedding's F16 or
//    BF16 where every value converts exactly, and block-type tensors, which become F32 holding
//    exactly the values ggml dequantizes them to (a bf16 load halves their memory again). HF
//    shape = reversed GGUF ne. llama's Q and K projection rows are permuted from GGUF's
//    interleaved RoPE order to HF's rotate-half order (per head: HF row j < hd/2 is GGUF row 2j,
//    HF row j >= hd/2 is GGUF row 2(j - hd/2) + 1); qwen3's are already in HF's order.
//  - Tokenizers: 'llama' (SentencePiece) and 'gpt2' (byte-level BPE with a pre-tokenizer that
//    gguf_bpe_vocab.h names).
//  - A missing `output.weight`, or one byte-identical to `token_embd.weight`, gives
//    tie_word_embeddings = true and no lm_head.weight.
//  - config.json vocab_size is the embedding's row count (>= the number of tokenizer tokens;
//    equal for every file llama.cpp writes unpadded); torch_dtype follows the embedding's type.
// NOT_FOUND if the file or a required key/tensor is missing; INVALID_ARGUMENT for a malformed file
// or inconsistent hyperparameters; UNIMPLEMENTED for other architectures, tokenizer models other
// than "llama" (SentencePiece), other quantized types (Q2_K, Q3_K, I-quants), partial rotary
// dimensions, or tensors without an HF llama equivalent.
//  - With options.bf16, every tensor is written as BF16 instead (torch_dtype bfloat16): the F32,
//    F16 or dequantized values rounded to nearest even, the values a bf16 load of the default
//    output computes with, in half the bytes of F32 (a Q4_K_M file of a 7B model becomes about
//    14 GB instead of 28). Only the BF16 tensors are held until written.
struct GgufImportOptions {
  bool bf16 = false;
};
absl::Status ConvertGgufToHf(const std::string& gguf_path, const std::string& out_dir,
                             const GgufImportOptions& options = {});

}  // namespace specdec::io

#endif  // SPECDEC_COMMON_IO_GGUF_TO_HF_H_
