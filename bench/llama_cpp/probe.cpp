// llama.cpp, driven the way specdec is measured and tested. Built against llama.h by
// fetch_build.sh; not part of the specdec build.
//
//   probe logits MODEL.gguf PROMPT VERIFY OUT.bin
//       float32 logits [rows = prompt + verify, vocab] of a prefill and of a verify chunk on top
//       of the cache, to OUT.bin (F32 KV cache, no flash attention, 1 thread): the fixtures of
//       tests/common/model/llama_cpp_reference_test.cc.
//   probe generate MODEL.gguf N PROMPT THREADS
//       greedy decoding of N tokens (EOS ignored, default KV cache) timed as `specdec generate`
//       reports it: prefill = the prompt's pass, decode = the other N - 1 tokens.
//   probe quantize TYPE N_PER_ROW IN.f32 OUT
//       ggml's own quantization of the float32 rows in IN.f32 (N_PER_ROW values each) to ggml type
//       TYPE (its number), written to OUT.q, and ggml's dequantization of those blocks to OUT.f32:
//       the fixtures of tests/common/io/gguf_dequantize_test.cc.
//
// PROMPT and VERIFY are comma-separated token ids, or "text:..." to tokenize with the model's
// tokenizer (the prompt with its BOS). stdout: one JSON object (ids, shape, timings).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"

namespace {

using Clock = std::chrono::steady_clock;

double MsSince(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

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

// Decodes `tokens` at positions from `pos`; with `all_logits` every row's logits are appended to
// `logits`, else only the last row's.
bool Decode(llama_context* ctx, const std::vector<llama_token>& tokens, int pos, int vocab,
            bool all_logits, std::vector<float>& logits) {
  llama_batch batch = llama_batch_init(static_cast<int>(tokens.size()), 0, 1);
  for (size_t i = 0; i < tokens.size(); ++i) {
    batch.token[i] = tokens[i];
    batch.pos[i] = pos + static_cast<int>(i);
    batch.n_seq_id[i] = 1;
    batch.seq_id[i][0] = 0;
    batch.logits[i] = all_logits || i + 1 == tokens.size();
  }
  batch.n_tokens = static_cast<int>(tokens.size());
  const bool ok = llama_decode(ctx, batch) == 0;
  const size_t first = all_logits ? 0 : tokens.size() - 1;
  for (size_t i = first; ok && i < tokens.size(); ++i) {
    const float* row = llama_get_logits_ith(ctx, static_cast<int>(i));
    logits.insert(logits.end(), row, row + vocab);
  }
  llama_batch_free(batch);
  return ok;
}

void PrintIds(const char* key, const std::vector<llama_token>& ids) {
  std::printf("\"%s\": [", key);
  for (size_t i = 0; i < ids.size(); ++i) std::printf("%s%d", i ? ", " : "", ids[i]);
  std::printf("], ");
}

int Logits(llama_model* model, const llama_vocab* vocab, char** argv) {
  const int n_vocab = llama_vocab_n_tokens(vocab);
  const std::vector<llama_token> prompt = Tokens(vocab, argv[3], true);
  const std::vector<llama_token> verify = Tokens(vocab, argv[4], false);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = cp.n_batch = cp.n_ubatch = 256;
  cp.n_threads = cp.n_threads_batch = 1;
  cp.type_k = cp.type_v = GGML_TYPE_F32;  // the default F16 cache would round K and V
  cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context* ctx = llama_init_from_model(model, cp);
  std::vector<float> logits;
  if (ctx == nullptr || !Decode(ctx, prompt, 0, n_vocab, true, logits) ||
      !Decode(ctx, verify, static_cast<int>(prompt.size()), n_vocab, true, logits)) {
    std::fprintf(stderr, "probe: decode failed\n");
    return 1;
  }
  FILE* out = std::fopen(argv[5], "wb");
  if (out == nullptr ||
      std::fwrite(logits.data(), sizeof(float), logits.size(), out) != logits.size()) {
    return 1;
  }
  std::fclose(out);
  std::printf("{");
  PrintIds("prompt_ids", prompt);
  PrintIds("verify_ids", verify);
  std::printf("\"rows\": %zu, \"vocab\": %d}\n", prompt.size() + verify.size(), n_vocab);
  llama_free(ctx);
  return 0;
}

int Generate(llama_model* model, const llama_vocab* vocab, char** argv) {
  const int n_vocab = llama_vocab_n_tokens(vocab);
  const int n = std::atoi(argv[3]);
  const std::vector<llama_token> prompt = Tokens(vocab, argv[4], true);
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = static_cast<uint32_t>(prompt.size() + n + 8);
  cp.n_batch = cp.n_ubatch = std::max<uint32_t>(static_cast<uint32_t>(prompt.size()), 1);
  cp.n_threads = cp.n_threads_batch = std::atoi(argv[5]);
  llama_context* ctx = llama_init_from_model(model, cp);
  if (ctx == nullptr || n < 1) return 1;
  std::vector<float> logits;
  std::vector<llama_token> out;
  float min_gap = 1e30f;
  double prefill_ms = 0;
  const auto t0 = Clock::now();
  auto t_decode = t0;
  for (int i = 0; i < n; ++i) {
    logits.clear();
    const bool ok = i == 0 ? Decode(ctx, prompt, 0, n_vocab, false, logits)
                           : Decode(ctx, {out.back()}, static_cast<int>(prompt.size()) + i - 1,
                                    n_vocab, false, logits);
    if (!ok) return 1;
    const auto top = std::max_element(logits.begin(), logits.end());
    const float best = *top;
    *top = -1e30f;
    min_gap = std::min(min_gap, best - *std::max_element(logits.begin(), logits.end()));
    out.push_back(static_cast<llama_token>(top - logits.begin()));
    if (i == 0) {
      prefill_ms = MsSince(t0);
      t_decode = Clock::now();
    }
  }
  const double decode_ms = MsSince(t_decode);
  std::printf("{");
  PrintIds("prompt_ids", prompt);
  PrintIds("ids", out);
  std::printf(
      "\"min_gap\": %.6f, \"prefill_ms\": %.3f, \"decode_ms\": %.3f, "
      "\"decode_tokens_per_s\": %.2f}\n",
      min_gap, prefill_ms, decode_ms, n > 1 ? (n - 1) * 1000.0 / decode_ms : 0.0);
  llama_free(ctx);
  return 0;
}

// ggml_quantize_chunk and the type's to_float, on the rows of a raw float32 file.
int Quantize(char** argv) {
  const auto type = static_cast<ggml_type>(std::atoi(argv[2]));
  const int64_t per_row = std::atoll(argv[3]);
  std::vector<float> in;
  if (FILE* f = std::fopen(argv[4], "rb")) {
    float v;
    while (std::fread(&v, sizeof v, 1, f) == 1) in.push_back(v);
    std::fclose(f);
  }
  if (per_row <= 0 || in.empty() || in.size() % per_row != 0) return 1;
  const int64_t rows = static_cast<int64_t>(in.size()) / per_row;
  std::vector<char> q(ggml_row_size(type, per_row) * rows);
  const size_t bytes = ggml_quantize_chunk(type, in.data(), q.data(), 0, rows, per_row, nullptr);
  std::vector<float> back(in.size());
  ggml_get_type_traits(type)->to_float(q.data(), back.data(), static_cast<int64_t>(in.size()));
  const std::string out = argv[5];
  FILE* fq = std::fopen((out + ".q").c_str(), "wb");
  FILE* ff = std::fopen((out + ".f32").c_str(), "wb");
  if (fq == nullptr || ff == nullptr) return 1;
  std::fwrite(q.data(), 1, bytes, fq);
  std::fwrite(back.data(), sizeof(float), back.size(), ff);
  std::fclose(fq);
  std::fclose(ff);
  std::printf("{\"type\": \"%s\", \"rows\": %lld, \"bytes\": %zu}\n", ggml_type_name(type),
              static_cast<long long>(rows), bytes);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 6 && std::strcmp(argv[1], "quantize") == 0) return Quantize(argv);
  const bool logits = argc == 6 && std::strcmp(argv[1], "logits") == 0;
  const bool generate = argc == 6 && std::strcmp(argv[1], "generate") == 0;
  if (!logits && !generate) {
    std::fprintf(stderr,
                 "usage: probe logits MODEL.gguf PROMPT VERIFY OUT.bin\n"
                 "       probe generate MODEL.gguf N PROMPT THREADS\n"
                 "       probe quantize TYPE N_PER_ROW IN.f32 OUT\n");
    return 2;
  }
  llama_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
  ggml_backend_load_all();
  llama_model* model = llama_model_load_from_file(argv[2], llama_model_default_params());
  if (model == nullptr) return 1;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int rc = logits ? Logits(model, vocab, argv) : Generate(model, vocab, argv);
  llama_model_free(model);
  return rc;
}
