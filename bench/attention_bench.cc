// Times the fused attention kernel (common/model/attention_kernel.h) on synthetic sequences shaped
// like a model's passes: for every configuration (sessions x cached tokens x new rows), the float
// path (on the CPU's widest registers, and on AVX2 registers alone, which give the same bits), the
// pair path's portable loops and (where the CPU has AVX-512 BF16) its native functions, alternated
// round by round in one process so that the machine's drift hits all of them alike.
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

struct Shape {
  int layers = 8, heads = 4, kv_heads = 2, head_dim = 64;
};

// "sessions:cached:rows" triples, comma-separated; an empty string and a message on error.
std::vector<Config> ParseConfigs(const std::string& text, std::string* error) {
  std::vector<Config> configs;
  for (absl::string_view c : absl::StrSplit(text, ',')) {
    std::vector<std::string> f = absl::StrSplit(c, ':');
    Config cfg;
    if (f.size() != 3 || !absl::SimpleAtoi(f[0], &cfg.sessions) ||
        !absl::SimpleAtoi(f[1], &cfg.past) || !absl::SimpleAtoi(f[2], &cfg.rows)) {
      *error = "--configs: '" + std::string(c) + "' is not three integers sessions:cached:rows";
      return {};
    }
    if (cfg.sessions < 1 || cfg.past < 0 || cfg.rows < 1) {
      *error = "--configs: sessions and rows must be >= 1, cached >= 0";
      return {};
    }
    configs.push_back(cfg);
  }
  return configs;
}

// Every layer's sequences of `cfg`, filled with random bf16 values.
std::vector<Layer> MakeLayers(const Config& cfg, const Shape& sh, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.f, 1.f);
  auto filled = [&](size_t n) {
    std::vector<uint16_t> v(n);
    for (auto& e : v) e = specdec::model::FloatToBf16(normal(rng));
    return v;
  };
  const int64_t cap = cfg.past + cfg.rows;
  const size_t kv = static_cast<size_t>(sh.kv_heads) * sh.head_dim;
  const size_t qw = static_cast<size_t>(sh.heads) * sh.head_dim;
  std::vector<Layer> ls(sh.layers);
  for (Layer& l : ls) {
    for (int s = 0; s < cfg.sessions; ++s) {
      l.keys.push_back(filled(kv * cap));
      l.values.push_back(filled(kv * cap));
      l.new_keys.push_back(filled(kv * cfg.rows));
      l.new_values.push_back(filled(kv * cfg.rows));
      l.q.push_back(filled(qw * cfg.rows));
      l.out.emplace_back(qw * cfg.rows);
    }
    for (int s = 0; s < cfg.sessions; ++s) {
      AttentionSequence a;
      a.q = l.q[s].data();
      a.q_row_stride = static_cast<int64_t>(qw);
      a.out = l.out[s].data();
      a.out_row_stride = static_cast<int64_t>(qw);
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
  return ls;
}

// The paths, in the order they alternate.
enum Path { kFloat, kFloatAvx2, kPortablePairs, kNativePairs };

// One pass: every layer's attention on one path.
void Pass(std::vector<Layer>& ls, const Shape& sh, int path) {
  for (Layer& l : ls) {
    AttentionProblem p{l.seqs,
                       sh.heads,
                       sh.kv_heads,
                       sh.head_dim,
                       specdec::model::KernelDType::kBF16,
                       static_cast<float>(1.0 / std::sqrt(static_cast<double>(sh.head_dim))),
                       path >= kPortablePairs};
    const int64_t items = specdec::model::AttentionWorkItems(p);
    if (path == kPortablePairs) {
      specdec::model::RunAttentionPortable(p, 0, items);
    } else if (path == kFloatAvx2) {
      specdec::model::RunAttentionAvx2(p, 0, items);
    } else {
      specdec::model::RunAttention(p, 0, items);
    }
  }
}

// The paths alternated for `rounds` rounds: each path's median pass time per round.
std::vector<std::vector<double>> TimePaths(std::vector<Layer>& ls, const Shape& sh, int paths,
                                           int rounds, int repeats) {
  std::vector<std::vector<double>> medians(paths);
  for (int r = 0; r < rounds; ++r) {
    for (int path = 0; path < paths; ++path) {
      Pass(ls, sh, path);  // warm
      std::vector<double> t;
      for (int k = 0; k < repeats; ++k) {
        const auto t0 = Clock::now();
        Pass(ls, sh, path);
        t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      medians[path].push_back(Median(t));
    }
  }
  return medians;
}

}  // namespace

int main(int argc, char** argv) {
  std::string configs_s = "1:256:1,8:256:1,16:256:1,1:256:17,8:256:17,1:0:150", json_path;
  Shape sh;
  int rounds = 5, repeats = 50;
  CLI::App app{"specdec attention-kernel benchmark (float path against the pair path)"};
  app.add_option("--configs", configs_s,
                 "sessions:cached:rows triples, comma-separated (rows new rows per session)");
  app.add_option("--layers", sh.layers, "layers per pass (each with its own caches)");
  app.add_option("--heads", sh.heads, "query heads");
  app.add_option("--kv-heads", sh.kv_heads, "KV heads");
  app.add_option("--head-dim", sh.head_dim, "head size");
  app.add_option("--rounds", rounds, "alternated rounds of the paths (median reported)");
  app.add_option("--repeats", repeats, "timed passes per path and round (median taken)");
  app.add_option("--json", json_path, "write results as JSON");
  CLI11_PARSE(app, argc, argv);
  if (sh.layers < 1 || sh.heads < 1 || sh.kv_heads < 1 || sh.heads % sh.kv_heads != 0 ||
      sh.head_dim < 1 || rounds < 1 || repeats < 1) {
    std::cerr << "--layers, --rounds and --repeats must be >= 1, --heads a multiple of "
                 "--kv-heads\n";
    return 2;
  }
  std::string error;
  const std::vector<Config> configs = ParseConfigs(configs_s, &error);
  if (!error.empty()) {
    std::cerr << error << "\n";
    return 2;
  }
  const bool native = specdec::model::AttentionKernelNative();
  std::mt19937 rng(1);
  std::printf("%8s %6s %5s %10s %10s %12s %12s %11s %13s\n", "sessions", "cached", "rows",
              "float ms", "avx2 ms", "portable ms", "native ms", "avx2/float", "native/float");
  nlohmann::json out = nlohmann::json::array();
  for (const Config& cfg : configs) {
    std::vector<Layer> ls = MakeLayers(cfg, sh, rng);
    const std::vector<std::vector<double>> medians =
        TimePaths(ls, sh, native ? 4 : 3, rounds, repeats);
    const double f = Median(medians[kFloat]), f2 = Median(medians[kFloatAvx2]);
    const double po = Median(medians[kPortablePairs]);
    const double na = native ? Median(medians[kNativePairs]) : 0;
    std::printf("%8d %6d %5d %10.4f %10.4f %12.4f %12.4f %11.3f %13.3f\n", cfg.sessions, cfg.past,
                cfg.rows, f, f2, po, na, f2 / f, native ? na / f : 0.0);
    out.push_back({{"sessions", cfg.sessions},
                   {"cached", cfg.past},
                   {"rows", cfg.rows},
                   {"float_ms", f},
                   {"float_avx2_ms", f2},
                   {"pairs_portable_ms", po},
                   {"pairs_native_ms", native ? nlohmann::json(na) : nlohmann::json(nullptr)},
                   {"float_rounds_ms", medians[kFloat]},
                   {"float_avx2_rounds_ms", medians[kFloatAvx2]},
                   {"pairs_portable_rounds_ms", medians[kPortablePairs]},
                   {"pairs_native_rounds_ms",
                    native ? nlohmann::json(medians[kNativePairs]) : nlohmann::json(nullptr)}});
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << nlohmann::json{{"layers", sh.layers},     {"heads", sh.heads}, {"kv_heads", sh.kv_heads},
                        {"head_dim", sh.head_dim}, {"rounds", rounds},  {"repeats", repeats},
                        {"avx512_bf16", native},   {"results", out}}
             .dump(2)
      << "\n";
    if (!f) {
      std::cerr << "cannot write " << json_path << "\n";
      return 1;
    }
  }
  return 0;
}
