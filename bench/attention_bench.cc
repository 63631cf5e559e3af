// Times the fused attention kernel (common/model/attention_kernel.h) on synthetic sequences shaped
// like a model's passes: for every configuration (sessions x cached tokens x new rows), the float
// path, the pair path's portable loops and (where the CPU has AVX-512 BF16) its native functions,
// alternated round by round in one process so that the machine's drift hits all three alike.
// Each layer has its own caches, as in a model, so a pass reads as much KV memory as a real one.
//
//   specdec-attention-bench [--configs 1:256:1,8:256:1,1:256:17,8:256:17,1:0:150] [--layers 8]
//       [--heads 4] [--kv-heads 2] [--head-dim 64] [--rounds 5] [--repeats 50] [--json FILE]
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/model/attention_kernel.h"
#include "common/model/vec16.h"

using Clock = std::chrono::steady_clock;
using specdec::model::AttentionProblem;
using specdec::model::AttentionSequence;

namespace {

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Config {
  int sessions = 1, past = 0, rows = 1;
};

// One layer's worth of sequences: caches, new rows, queries and outputs (bf16 bits).
struct Layer {
  std::vector<std::vector<uint16_t>> keys, values, new_keys, new_values, q, out;
  std::vector<AttentionSequence> seqs;
};

}  // namespace

int main(int argc, char** argv) {
  std::string configs_s = "1:256:1,8:256:1,16:256:1,1:256:17,8:256:17,1:0:150", json_path;
  int layers = 8, heads = 4, kv_heads = 2, head_dim = 64, rounds = 5, repeats = 50;
  CLI::App app{"specdec attention-kernel benchmark (float path against the pair path)"};
  app.add_option("--configs", configs_s,
                 "sessions:cached:rows triples, comma-separated (rows new rows per session)");
  app.add_option("--layers", layers, "layers per pass (each with its own caches)");
  app.add_option("--heads", heads, "query heads");
  app.add_option("--kv-heads", kv_heads, "KV heads");
  app.add_option("--head-dim", head_dim, "head size");
  app.add_option("--rounds", rounds, "alternated rounds of the paths (median reported)");
  app.add_option("--repeats", repeats, "timed passes per path and round (median taken)");
  app.add_option("--json", json_path, "write results as JSON");
  CLI11_PARSE(app, argc, argv);
  if (layers < 1 || heads < 1 || kv_heads < 1 || heads % kv_heads != 0 || head_dim < 1 ||
      rounds < 1 || repeats < 1) {
    std::cerr << "--layers, --rounds and --repeats must be >= 1, --heads a multiple of "
                 "--kv-heads\n";
    return 2;
  }
  std::vector<Config> configs;
  for (absl::string_view c : absl::StrSplit(configs_s, ',')) {
    std::vector<std::string> f = absl::StrSplit(c, ':');
    if (f.size() != 3) {
      std::cerr << "--configs: '" << c << "' is not sessions:cached:rows\n";
      return 2;
    }
    Config cfg;
    if (!absl::SimpleAtoi(f[0], &cfg.sessions) || !absl::SimpleAtoi(f[1], &cfg.past) ||
        !absl::SimpleAtoi(f[2], &cfg.rows)) {
      std::cerr << "--configs: '" << c << "' is not three integers sessions:cached:rows\n";
      return 2;
    }
    if (cfg.sessions < 1 || cfg.past < 0 || cfg.rows < 1) {
      std::cerr << "--configs: sessions and rows must be >= 1, cached >= 0\n";
      return 2;
    }
    configs.push_back(cfg);
  }
  const bool native = specdec::model::AttentionKernelNative();
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  auto fill = [&](std::vector<uint16_t>& v, size_t n) {
    v.resize(n);
    for (auto& e : v) e = specdec::model::FloatToBf16(normal(rng));
  };
  std::printf("%8s %6s %5s %10s %12s %12s %14s\n", "sessions", "cached", "rows", "float ms",
              "portable ms", "native ms", "native/float");
  nlohmann::json out = nlohmann::json::array();
  for (const Config& cfg : configs) {
    const int64_t cap = cfg.past + cfg.rows;
    std::vector<Layer> ls(layers);
    for (Layer& l : ls) {
      for (int s = 0; s < cfg.sessions; ++s) {
        l.keys.emplace_back();
        fill(l.keys.back(), static_cast<size_t>(kv_heads) * cap * head_dim);
        l.values.emplace_back();
        fill(l.values.back(), static_cast<size_t>(kv_heads) * cap * head_dim);
        l.new_keys.emplace_back();
        fill(l.new_keys.back(), static_cast<size_t>(cfg.rows) * kv_heads * head_dim);
        l.new_values.emplace_back();
        fill(l.new_values.back(), static_cast<size_t>(cfg.rows) * kv_heads * head_dim);
        l.q.emplace_back();
        fill(l.q.back(), static_cast<size_t>(cfg.rows) * heads * head_dim);
        l.out.emplace_back(static_cast<size_t>(cfg.rows) * heads * head_dim);
      }
      for (int s = 0; s < cfg.sessions; ++s) {
        AttentionSequence a;
        a.q = l.q[s].data();
        a.q_row_stride = heads * head_dim;
        a.out = l.out[s].data();
        a.out_row_stride = heads * head_dim;
        a.new_keys = l.new_keys[s].data();
        a.new_values = l.new_values[s].data();
        a.keys = l.keys[s].data();
        a.values = l.values[s].data();
        a.capacity = cap;
        a.past = cfg.past;
        a.n = cfg.rows;
        l.seqs.push_back(a);
      }
    }
    // One pass: every layer's attention on one path (0 float, 1 portable pairs, 2 native pairs).
    auto pass = [&](int path) {
      for (Layer& l : ls) {
        AttentionProblem p{l.seqs,
                           heads,
                           kv_heads,
                           head_dim,
                           specdec::model::KernelDType::kBF16,
                           static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))),
                           path != 0};
        const int64_t items = specdec::model::AttentionWorkItems(p);
        if (path == 1) {
          specdec::model::RunAttentionPortable(p, 0, items);
        } else {
          specdec::model::RunAttention(p, 0, items);
        }
      }
    };
    const int paths = native ? 3 : 2;
    std::vector<std::vector<double>> medians(paths);
    for (int r = 0; r < rounds; ++r) {
      for (int path = 0; path < paths; ++path) {
        pass(path);  // warm
        std::vector<double> t;
        for (int k = 0; k < repeats; ++k) {
          const auto t0 = Clock::now();
          pass(path);
          t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
        }
        medians[path].push_back(Median(t));
      }
    }
    const double f = Median(medians[0]), po = Median(medians[1]);
    const double na = native ? Median(medians[2]) : 0;
    std::printf("%8d %6d %5d %10.4f %12.4f %12.4f %14.3f\n", cfg.sessions, cfg.past, cfg.rows, f,
                po, na, native ? na / f : 0.0);
    out.push_back({{"sessions", cfg.sessions},
                   {"cached", cfg.past},
                   {"rows", cfg.rows},
                   {"float_ms", f},
                   {"pairs_portable_ms", po},
                   {"pairs_native_ms", native ? nlohmann::json(na) : nlohmann::json(nullptr)},
                   {"float_rounds_ms", medians[0]},
                   {"pairs_portable_rounds_ms", medians[1]},
                   {"pairs_native_rounds_ms",
                    native ? nlohmann::json(medians[2]) : nlohmann::json(nullptr)}});
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << nlohmann::json{{"layers", layers},      {"heads", heads},   {"kv_heads", kv_heads},
                        {"head_dim", head_dim},  {"rounds", rounds}, {"repeats", repeats},
                        {"avx512_bf16", native}, {"results", out}}
             .dump(2)
      << "\n";
    if (!f) {
      std::cerr << "cannot write " << json_path << "\n";
      return 1;
    }
  }
  return 0;
}
