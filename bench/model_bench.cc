// Measures the decoder's speed on this machine: AR tokens/s and the cost of a k-token forward
// (a speculative verify) relative to a 1-token step, for Qwen3-shaped random-weight models.
//
//   specdec-model-bench [--sizes 30M,100M] [--dtypes f32,bf16] [--context 200] [--reps 15]
//                       [--json out.json]
#include <ATen/ATen.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"

namespace specdec::model {
namespace {

ModelConfig ShapeFor(const std::string& size) {
  ModelConfig c;
  c.architecture = Architecture::kQwen3;
  c.qk_norm = true;
  c.vocab_size = 8192;
  c.num_key_value_heads = 4;
  c.head_dim = 64;
  c.max_position_embeddings = 4096;
  c.tie_word_embeddings = true;
  if (size == "7M") {
    c.hidden_size = 256;
    c.num_hidden_layers = 6;
    c.intermediate_size = 768;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
  } else if (size == "30M") {
    c.hidden_size = 512;
    c.num_hidden_layers = 8;
    c.intermediate_size = 1536;
    c.num_attention_heads = 8;
  } else {  // 100M
    c.hidden_size = 768;
    c.num_hidden_layers = 12;
    c.intermediate_size = 2688;
    c.num_attention_heads = 12;
  }
  return c;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median ms of a k-token forward on top of `context` cached tokens (the cache is rolled back
// after each repetition so every run sees the same context length).
double TimeForward(const Transformer& m, KvCache* cache, int64_t context, int k, int reps) {
  std::vector<int32_t> toks(k);
  for (int i = 0; i < k; ++i) toks[i] = (i * 37 + 11) % m.config().vocab_size;
  SequenceInput in;
  in.cache = cache;
  in.tokens = toks;
  in.logits = LogitsMode::kAll;
  std::vector<double> ms;
  for (int r = 0; r < reps + 2; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    auto out = m.Forward(std::span<const SequenceInput>(&in, 1));
    auto t1 = std::chrono::steady_clock::now();
    if (!out.ok()) {
      std::cerr << out.status() << "\n";
      std::exit(1);
    }
    (void)cache->Truncate(context);
    if (r >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return Median(ms);
}

}  // namespace
}  // namespace specdec::model

int main(int argc, char** argv) {
  using namespace specdec::model;
  CLI::App app{"specdec decoder speed benchmark (random Qwen3-shaped weights)"};
  std::string sizes = "30M,100M", dtypes = "f32,bf16", json_path;
  int64_t context = 200;
  int reps = 15, threads = 0;
  app.add_option("--sizes", sizes, "comma-separated model sizes: 7M, 30M, 100M");
  app.add_option("--dtypes", dtypes, "comma-separated: f32, bf16");
  app.add_option("--context", context, "tokens already in the KV cache");
  app.add_option("--reps", reps, "timed repetitions per point (median reported)");
  app.add_option("--threads", threads, "compute threads (0 = all cores)");
  app.add_option("--json", json_path, "write results as JSON here");
  CLI11_PARSE(app, argc, argv);
  const int used_threads = ConfigureComputeThreads(threads);

  const std::vector<int> ks = {1, 2, 4, 8, 16, 32};
  nlohmann::json results = nlohmann::json::array();
  std::printf("threads=%d context=%lld reps=%d (median ms per forward)\n", used_threads,
              static_cast<long long>(context), reps);
  std::printf("%-6s %-5s %8s %10s %10s", "model", "dtype", "params", "1-tok ms", "AR tok/s");
  for (int k : ks) std::printf("  k=%-2d x", k);
  std::printf("\n");
  for (const std::string& size : std::vector<std::string>(absl::StrSplit(sizes, ','))) {
    ModelConfig c = ShapeFor(size);
    auto weights = Transformer::RandomWeights(c, 7, 0.02);
    for (const std::string& dt : std::vector<std::string>(absl::StrSplit(dtypes, ','))) {
      LoadOptions opts;
      opts.dtype = dt == "bf16" ? at::kBFloat16 : at::kFloat;
      auto model = Transformer::FromTensors(c, weights, opts);
      if (!model.ok()) {
        std::cerr << model.status() << "\n";
        return 1;
      }
      auto cache = (*model)->NewCache();
      std::vector<int32_t> prompt(context);
      for (int64_t i = 0; i < context; ++i) prompt[i] = (i * 13 + 5) % c.vocab_size;
      SequenceInput in{cache.get(), prompt};
      if (auto s = (*model)->Forward(std::span<const SequenceInput>(&in, 1)); !s.ok()) {
        std::cerr << s.status() << "\n";
        return 1;
      }
      nlohmann::json row = {{"model", size},
                            {"dtype", dt},
                            {"params", c.NumParameters()},
                            {"context", context},
                            {"threads", used_threads}};
      double one = 0;
      std::vector<double> ratios;
      for (int k : ks) {
        double ms = TimeForward(**model, cache.get(), context, k, reps);
        if (k == 1) one = ms;
        ratios.push_back(ms / one);
        row["ms"][std::to_string(k)] = ms;
        row["ratio"][std::to_string(k)] = ms / one;
      }
      row["ar_tokens_per_s"] = 1000.0 / one;
      std::printf("%-6s %-5s %7.1fM %10.2f %10.1f", size.c_str(), dt.c_str(),
                  c.NumParameters() / 1e6, one, 1000.0 / one);
      for (double r : ratios) std::printf("  %6.2f", r);
      std::printf("\n");
      std::fflush(stdout);
      results.push_back(row);
    }
  }
  if (!json_path.empty()) {
    std::ofstream(json_path) << results.dump(2) << "\n";
    std::printf("wrote %s\n", json_path.c_str());
  }
  return 0;
}
