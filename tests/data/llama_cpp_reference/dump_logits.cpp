// llama.cpp's logits for a prompt and a verify chunk on top of its cache, the same two passes
// tests/common/model/llama_cpp_reference_test.cc runs in specdec. Built against llama.h by
// make_fixtures.sh; not part of the specdec build.
//
//   dump_logits MODEL.gguf PROMPT VERIFY OUT.bin
//
// PROMPT and VERIFY are comma-separated token ids, or "text:..." to tokenize with the model's own
// tokenizer (the prompt with its BOS, the verify chunk without). OUT.bin receives float32
// logits [rows = prompt + verify, vocab]; stdout one JSON object with the ids and the shape.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "llama.h"

namespace {

std::vector<llama_token> Tokens(const llama_vocab* vocab, const std::string& arg, bool bos) {
  std::vector<llama_token> out;
  if (arg.rfind("text:", 0) == 0) {
    const std::string text = arg.substr(5);
    const int n = -llama_tokenize(vocab, text.c_str(), text.size(), nullptr, 0, bos, false);
    out.resize(n);
    llama_tokenize(vocab, text.c_str(), text.size(), out.data(), n, bos, false);
    return out;
  }
  size_t pos = 0;
  while (pos < arg.size()) {
    const size_t comma = arg.find(',', pos);
    out.push_back(std::atoi(arg.substr(pos, comma - pos).c_str()));
    pos = comma == std::string::npos ? arg.size() : comma + 1;
  }
  return out;
}

// Decodes `tokens` at positions from `pos` with logits for every row, appended to `logits`.
bool Decode(llama_context* ctx, std::vector<llama_token>& tokens, int pos, int vocab,
            std::vector<float>& logits) {
  llama_batch batch = llama_batch_init(static_cast<int>(tokens.size()), 0, 1);
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch.token[i] = tokens[i];
    batch.pos[i] = pos + static_cast<int>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = 1;
  }
  batch.n_tokens = static_cast<int>(tokens.size());
  const bool ok = llama_decode(ctx, batch) == 0;
  for (size_t i = 0; ok && i < tokens.size(); ++i) {
    const float* row = llama_get_logits_ith(ctx, static_cast<int>(i));
    logits.insert(logits.end(), row, row + vocab);
  }
  llama_batch_free(batch);
  return ok;
}

void PrintIds(const char* key, const std::vector<llama_token>& ids) {
  std::printf("\"%s\": [", key);
  for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? ", " : "", ids[i]);
  std::printf("]");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: dump_logits MODEL.gguf PROMPT VERIFY OUT.bin\n");
    return 2;
  }
  ggml_backend_load_all();
  llama_model* model = llama_model_load_from_file(argv[1], llama_model_default_params());
  if (model == nullptr) return 1;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  std::vector<llama_token> prompt = Tokens(vocab, argv[2], true);
  std::vector<llama_token> verify = Tokens(vocab, argv[3], false);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 256;
  cp.n_batch = cp.n_ubatch = 256;
  cp.n_threads = cp.n_threads_batch = 1;
  cp.type_k = cp.type_v = GGML_TYPE_F32;  // the default F16 cache would round K and V
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  std::vector<float> logits;
  if (ctx == nullptr || !Decode(ctx, prompt, 0, n_vocab, logits) ||
      !Decode(ctx, verify, static_cast<int>(prompt.size()), n_vocab, logits)) {
    std::fprintf(stderr, "dump_logits: decode failed\n");
    return 1;
  }
  FILE* out = std::fopen(argv[4], "wb");
  if (out == nullptr ||
      std::fwrite(logits.data(), sizeof(float), logits.size(), out) != logits.size()) {
    return 1;
  }
  std::fclose(out);
  std::printf("{");
  PrintIds("prompt_ids", prompt);
  std::printf(", ");
  PrintIds("verify_ids", verify);
  std::printf(", \"rows\": %zu, \"vocab\": %d}\n", prompt.size() + verify.size(), n_vocab);
  llama_free(ctx);
  llama_model_free(model);
  return 0;
}
