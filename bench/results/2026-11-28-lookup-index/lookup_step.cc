// Per-step cost of a lookup: a scan of the whole sequence (as LookupDraft searched before the
// index, written out here) against LookupHistory (the committed token appended, then a draft),
// over 2,000 steps after prompts of random tokens. Build and run from the repository root:
//   g++ -O2 -std=c++20 -I. bench/results/2026-11-28-lookup-index/lookup_step.cc \
//     build/common/engine/libspecdec_engine_core.a build/common/sampling/libspecdec_sampling.a \
//     build/common/tokenizer/libspecdec_tokenizer.a \
//     -labsl_strings -labsl_str_format_internal -labsl_status -labsl_raw_hash_set -labsl_hash \
//     -labsl_city -labsl_low_level_hash -o /tmp/lookup_step && /tmp/lookup_step
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include "common/engine/prompt_lookup.h"
using namespace specdec::engine;
using V = std::vector<int32_t>;
V Scan(const V& tokens, int32_t max_n, int32_t min_n, int32_t length, int32_t min_length) {
  const int64_t size = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min<int64_t>(max_n, size - 1); n >= min_n; --n) {
    for (int64_t start = size - n - std::max(1, min_length); start >= 0; --start) {
      if (!std::equal(tokens.end() - n, tokens.end(), tokens.begin() + start)) continue;
      const int64_t from = start + n;
      const int64_t take = std::min<int64_t>(length, size - from);
      return V(tokens.begin() + from, tokens.begin() + from + take);
    }
  }
  return {};
}
int main() {
  for (int len : {300, 1000, 4000, 16000, 30000}) {
    for (int shape = 0; shape < 2; ++shape) {
      const int min_n = shape == 0 ? 1 : 2, min_len = shape == 0 ? 1 : 2;
      std::mt19937 rng(1);
      V prompt(len);
      for (auto& t : prompt) t = 4 + rng() % 4000;
      const int steps = 2000;
      V next(steps);
      for (auto& t : next) t = 4 + rng() % 4000;
      double sink = 0;
      V seq = prompt;
      auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) {
        seq.push_back(next[i]);
        sink += Scan(seq, 3, min_n, 4, min_len).size();
      }
      auto t1 = std::chrono::steady_clock::now();
      LookupHistory h(prompt);
      const LookupShape s{4, min_n, min_len};
      auto t2 = std::chrono::steady_clock::now();
      sink += h.Draft(s, 100, 1 << 20).size();  // the first lookup indexes the prompt
      auto t3 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) {
        h.Append(next[i]);
        sink += h.Draft(s, 100, 1 << 20).size();
      }
      auto t4 = std::chrono::steady_clock::now();
      auto us = [&](auto a, auto b, int n) {
        return std::chrono::duration<double, std::micro>(b - a).count() / n;
      };
      printf(
          "context %5d..%5d, min_match %d: scan %7.2f us/step; index: %8.1f us to index the "
          "prompt, then %5.2f us/step (%g)\n",
          len, len + steps, min_n, us(t0, t1, steps), us(t2, t3, 1), us(t3, t4, steps), sink);
    }
  }
}
