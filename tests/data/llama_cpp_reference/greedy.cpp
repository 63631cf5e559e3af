// Greedy decoding with llama.cpp, to compare a GGUF export's completions with
// `specdec generate --ignore-eos --print-ids`: prints the prompt ids, the generated ids (EOS
// ignored) and the smallest top-2 logit gap met. Built like dump_logits.cpp (make_fixtures.sh):
//   g++ -O2 -std=c++17 greedy.cpp -I $LLAMA/include -I $LLAMA/ggml/include -L $LLAMA/build/bin \
//     -lllama -lggml -lggml-base -Wl,-rpath,$LLAMA/build/bin -o greedy
//   greedy MODEL.gguf N PROMPT
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "llama.h"
int main(int argc, char** argv) {
  if (argc < 4) {
    fprintf(stderr, "usage: greedy model.gguf n prompt\n");
    return 1;
  }
  ggml_backend_load_all();
  llama_model_params mp = llama_model_default_params();
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 2;
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_predict = atoi(argv[2]);
  std::string prompt = argv[3];
  int n = -llama_tokenize(vocab, prompt.c_str(), prompt.size(), nullptr, 0, true, true);
  std::vector<llama_token> toks(n);
  llama_tokenize(vocab, prompt.c_str(), prompt.size(), toks.data(), n, true, true);
  printf("prompt_ids:");
  for (auto t : toks) printf(" %d", t);
  printf("\n");
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = n + n_predict + 8;
  cp.n_batch = n;
  cp.n_threads = 2;
  cp.n_threads_batch = 2;
  llama_context* ctx = llama_init_from_model(model, cp);
  const int nv = llama_vocab_n_tokens(vocab);
  llama_batch batch = llama_batch_get_one(toks.data(), toks.size());
  std::vector<llama_token> out;
  std::vector<float> gaps;
  llama_token next;
  for (int i = 0; i < n_predict; ++i) {
    if (llama_decode(ctx, batch)) return 3;
    const float* l = llama_get_logits_ith(ctx, -1);
    std::vector<int> idx(nv);
    for (int k = 0; k < nv; ++k) idx[k] = k;
    std::partial_sort(idx.begin(), idx.begin() + 2, idx.end(),
                      [&](int a, int b) { return l[a] > l[b]; });
    next = idx[0];
    gaps.push_back(l[idx[0]] - l[idx[1]]);
    out.push_back(next);
    batch = llama_batch_get_one(&next, 1);
  }
  printf("ids:");
  for (auto t : out) printf(" %d", t);
  printf("\n");
  printf("min_gap: %.6f\n", *std::min_element(gaps.begin(), gaps.end()));
  return 0;
}
