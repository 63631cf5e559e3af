// Measures what continuous batching buys on the target: n sessions verifying r rows each, run as
// one TargetSession::VerifyBatch pass against n separate Verify calls, for a grid of n and r.
// The ratio (batched / separate) is the cost of a batched pass relative to running its sessions
// one at a time; it is what the target service's scheduler and the router's load-aware
// speculation trade on. With --new-prompts K, each pass also prefills K fresh sessions' prompts
// (prompt-len tokens): "batched" is one TargetSession::RunBatch pass over the prompts and the n
// verifies, "separate" the K prefills alone followed by one VerifyBatch of the n sessions (what
// the target does with --batch-prefill=false).
//
//   specdec-batch-bench --target DIR [--prompt-len 128] [--batches 1,2,4,8,16] [--rows 1,4,17]
//       [--new-prompts 0] [--repeats 20] [--threads 1] [--batched-only] [--json FILE]
#include <c10/core/InferenceMode.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "absl/strings/str_split.h"
#include "common/engine/target_session.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"

using Clock = std::chrono::steady_clock;

namespace {
std::vector<int> ParseList(const std::string& s) {
  std::vector<int> out;
  for (absl::string_view p : absl::StrSplit(s, ',')) out.push_back(std::stoi(std::string(p)));
  return out;
}
double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}
}  // namespace

int main(int argc, char** argv) {
  std::string target_dir, batches_s = "1,2,4,8,16", rows_s = "1,4,17", json_path;
  int prompt_len = 128, repeats = 20, threads = 1, new_prompts = 0;
  bool grad_mode = false;
  std::string capture_s;
  CLI::App app{"specdec batched-verify benchmark (target continuous batching)"};
  app.add_option("--target", target_dir, "target checkpoint")->required();
  app.add_option("--prompt-len", prompt_len, "prompt tokens per session");
  app.add_option("--batches", batches_s, "sessions per pass, comma-separated");
  app.add_option("--rows", rows_s, "rows verified per session, comma-separated");
  app.add_option("--new-prompts", new_prompts,
                 "fresh prompts prefilled in each pass (batched) or before it (separate)");
  app.add_option("--repeats", repeats, "timed passes per cell (median reported)");
  app.add_option("--threads", threads, "compute threads");
  app.add_option("--json", json_path, "write results as JSON");
  app.add_option("--capture", capture_s,
                 "capture-layer ids (e.g. 1,5): sessions keep and return DFlash features");
  app.add_flag("--grad-mode", grad_mode, "run with autograd bookkeeping (not in inference mode)");
  bool batched_only = false;
  app.add_flag("--batched-only", batched_only,
               "time the batched passes only (separate ms reads 0), e.g. to profile them");
  CLI11_PARSE(app, argc, argv);
  std::optional<c10::InferenceMode> inference;
  if (!grad_mode) inference.emplace();
  using namespace specdec;
  model::ConfigureComputeThreads(threads);
  auto target = model::Transformer::Load(target_dir);
  if (!target.ok()) {
    std::cerr << target.status() << "\n";
    return 1;
  }
  const int vocab = static_cast<int>((*target)->config().vocab_size);
  const std::vector<int> batches = ParseList(batches_s), rows_list = ParseList(rows_s);
  std::vector<int64_t> capture;
  if (!capture_s.empty()) {
    for (int l : ParseList(capture_s)) capture.push_back(l);
  }
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> tok(4, vocab - 1);
  std::printf("%8s %5s %14s %15s %10s %18s\n", "sessions", "rows", "batched ms", "separate ms",
              "batched/sep", "batched ms/session");
  nlohmann::json out = nlohmann::json::array();
  for (int rows : rows_list) {
    for (int n : batches) {
      // Fresh sessions per cell so context lengths stay near prompt_len.
      std::vector<std::unique_ptr<engine::TargetSession>> sessions;
      for (int i = 0; i < std::max(n, 1); ++i) {
        sessions.push_back(
            std::make_unique<engine::TargetSession>(**target, sampling::SamplingParams{}, capture));
        std::vector<int32_t> prompt(prompt_len + 13 * i);  // ragged, as in service
        for (auto& t : prompt) t = tok(rng);
        if (auto p = sessions.back()->Prefill(prompt); !p.ok()) {
          std::cerr << p.status() << "\n";
          return 1;
        }
      }
      std::vector<std::vector<int32_t>> toks(n, std::vector<int32_t>(rows));
      std::vector<double> batched, separate;
      for (int rep = 0; rep < repeats + 2; ++rep) {
        std::vector<engine::VerifyRequest> reqs(n);
        std::vector<engine::TargetSession*> ptrs;
        for (int i = 0; i < n; ++i) {
          for (auto& t : toks[i]) t = tok(rng);
          reqs[i].tokens = toks[i];
          reqs[i].proposal = engine::Proposal::kOneHot;
          reqs[i].want_features = !capture.empty();
          ptrs.push_back(sessions[i].get());
        }
        // Fresh sessions and prompts for the prefills of this pass (both variants).
        std::vector<std::vector<int32_t>> prompts(new_prompts, std::vector<int32_t>(prompt_len));
        std::vector<std::unique_ptr<engine::TargetSession>> fresh_b, fresh_s;
        std::vector<engine::TargetSession*> fresh_ptrs;
        std::vector<std::span<const int32_t>> prompt_spans;
        for (auto& pr : prompts) {
          for (auto& t : pr) t = tok(rng);
          fresh_b.push_back(std::make_unique<engine::TargetSession>(
              **target, sampling::SamplingParams{}, capture));
          fresh_s.push_back(std::make_unique<engine::TargetSession>(
              **target, sampling::SamplingParams{}, capture));
          fresh_ptrs.push_back(fresh_b.back().get());
          prompt_spans.push_back(pr);
        }
        auto t0 = Clock::now();
        auto res = engine::TargetSession::RunBatch(fresh_ptrs, prompt_spans, ptrs, reqs);
        const double b = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        for (auto& r : res.verifies) {
          if (!r.ok()) {
            std::cerr << r.status() << "\n";
            return 1;
          }
        }
        for (auto& r : res.prefills) {
          if (!r.ok()) {
            std::cerr << r.status() << "\n";
            return 1;
          }
        }
        t0 = Clock::now();
        for (int k = 0; k < new_prompts && !batched_only; ++k) {
          if (auto r = fresh_s[k]->Prefill(prompts[k]); !r.ok()) {
            std::cerr << r.status() << "\n";
            return 1;
          }
        }
        if (batched_only) {
        } else if (new_prompts > 0) {
          for (auto& r : engine::TargetSession::VerifyBatch(ptrs, reqs)) {
            if (!r.ok()) {
              std::cerr << r.status() << "\n";
              return 1;
            }
          }
        } else {
          for (int i = 0; i < n; ++i) {
            if (auto r = sessions[i]->Verify(reqs[i]); !r.ok()) {
              std::cerr << r.status() << "\n";
              return 1;
            }
          }
        }
        const double s = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
        if (rep >= 2) {  // the first passes warm caches and allocators
          batched.push_back(b);
          separate.push_back(s);
        }
      }
      const double b = Median(batched), s = Median(separate);
      const double ratio = s > 0 ? b / s : 0.0;  // 0 with --batched-only
      std::printf("%8d %5d %14.3f %15.3f %10.2f %18.3f\n", n, rows, b, s, ratio, b / n);
      out.push_back({{"sessions", n},
                     {"rows", rows},
                     {"prompt_len", prompt_len},
                     {"new_prompts", new_prompts},
                     {"batched_ms", b},
                     {"separate_ms", s},
                     {"ratio", ratio}});
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}
