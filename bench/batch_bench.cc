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
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <span>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_split.h"
#include "common/engine/target_session.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"
#include "common/util/status_macros.h"

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

// What every cell shares: the target, the capture layers and the pass's shape.
struct BenchSetup {
  const specdec::model::Transformer* target = nullptr;
  std::vector<int64_t> capture;
  int prompt_len = 128, new_prompts = 0, repeats = 20;
  bool batched_only = false;
};

// n sessions, each prefilled with a random prompt of prompt_len + 13 i tokens (ragged, as in the
// service).
absl::StatusOr<std::vector<std::unique_ptr<specdec::engine::TargetSession>>> PrefilledSessions(
    const BenchSetup& b, int n, std::mt19937& rng, std::uniform_int_distribution<int>& tok) {
  std::vector<std::unique_ptr<specdec::engine::TargetSession>> sessions;
  for (int i = 0; i < std::max(n, 1); ++i) {
    sessions.push_back(std::make_unique<specdec::engine::TargetSession>(
        *b.target, specdec::sampling::SamplingParams{}, b.capture));
    std::vector<int32_t> prompt(b.prompt_len + 13 * i);
    for (auto& t : prompt) t = tok(rng);
    if (auto p = sessions.back()->Prefill(prompt); !p.ok()) return p.status();
  }
  return sessions;
}

// The first error among `results`, else OK.
template <typename Results>
absl::Status FirstError(const Results& results) {
  for (const auto& r : results) {
    if (!r.ok()) return r.status();
  }
  return absl::OkStatus();
}

// One pass each way over `sessions` verifying `rows` random tokens each (plus new_prompts fresh
// prefills): the batched pass's and the separate calls' milliseconds.
absl::StatusOr<std::pair<double, double>> TimePass(
    const BenchSetup& b, std::vector<std::unique_ptr<specdec::engine::TargetSession>>& sessions,
    int n, int rows, std::mt19937& rng, std::uniform_int_distribution<int>& tok) {
  using specdec::engine::TargetSession;
  std::vector<std::vector<int32_t>> toks(n, std::vector<int32_t>(rows));
  std::vector<specdec::engine::VerifyRequest> reqs(n);
  std::vector<TargetSession*> ptrs;
  for (int i = 0; i < n; ++i) {
    for (auto& t : toks[i]) t = tok(rng);
    reqs[i].tokens = toks[i];
    reqs[i].proposal = specdec::engine::Proposal::kOneHot;
    reqs[i].want_features = !b.capture.empty();
    ptrs.push_back(sessions[i].get());
  }
  // Fresh sessions and prompts for the prefills of this pass (both variants).
  std::vector<std::vector<int32_t>> prompts(b.new_prompts, std::vector<int32_t>(b.prompt_len));
  std::vector<std::unique_ptr<TargetSession>> fresh_b, fresh_s;
  std::vector<TargetSession*> fresh_ptrs;
  std::vector<std::span<const int32_t>> prompt_spans;
  for (auto& pr : prompts) {
    for (auto& t : pr) t = tok(rng);
    fresh_b.push_back(
        std::make_unique<TargetSession>(*b.target, specdec::sampling::SamplingParams{}, b.capture));
    fresh_s.push_back(
        std::make_unique<TargetSession>(*b.target, specdec::sampling::SamplingParams{}, b.capture));
    fresh_ptrs.push_back(fresh_b.back().get());
    prompt_spans.push_back(pr);
  }
  auto t0 = Clock::now();
  auto res = TargetSession::RunBatch(fresh_ptrs, prompt_spans, ptrs, reqs);
  const double batched = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  RETURN_IF_ERROR(FirstError(res.verifies));
  RETURN_IF_ERROR(FirstError(res.prefills));
  t0 = Clock::now();
  if (!b.batched_only) {
    for (int k = 0; k < b.new_prompts; ++k)
      RETURN_IF_ERROR(fresh_s[k]->Prefill(prompts[k]).status());
    if (b.new_prompts > 0) {
      RETURN_IF_ERROR(FirstError(TargetSession::VerifyBatch(ptrs, reqs)));
    } else {
      for (int i = 0; i < n; ++i) RETURN_IF_ERROR(sessions[i]->Verify(reqs[i]).status());
    }
  }
  const double separate =
      b.batched_only ? 0 : std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  return std::make_pair(batched, separate);
}

// One cell (n sessions, rows each): the medians over `repeats` passes after two warm-up passes.
absl::StatusOr<std::pair<double, double>> TimeCell(const BenchSetup& b, int n, int rows,
                                                   std::mt19937& rng,
                                                   std::uniform_int_distribution<int>& tok) {
  // Fresh sessions per cell so context lengths stay near prompt_len.
  ASSIGN_OR_RETURN(auto sessions, PrefilledSessions(b, n, rng, tok));
  std::vector<double> batched, separate;
  for (int rep = 0; rep < b.repeats + 2; ++rep) {
    ASSIGN_OR_RETURN(auto times, TimePass(b, sessions, n, rows, rng, tok));
    if (rep >= 2) {  // the first passes warm caches and allocators
      batched.push_back(times.first);
      separate.push_back(times.second);
    }
  }
  return std::make_pair(Median(batched), Median(separate));
}

}  // namespace

int main(int argc, char** argv) {
  std::string target_dir, batches_s = "1,2,4,8,16", rows_s = "1,4,17", json_path;
  BenchSetup setup;
  int threads = 1;
  bool grad_mode = false;
  std::string capture_s;
  CLI::App app{"specdec batched-verify benchmark (target continuous batching)"};
  app.add_option("--target", target_dir, "target checkpoint")->required();
  app.add_option("--prompt-len", setup.prompt_len, "prompt tokens per session");
  app.add_option("--batches", batches_s, "sessions per pass, comma-separated");
  app.add_option("--rows", rows_s, "rows verified per session, comma-separated");
  app.add_option("--new-prompts", setup.new_prompts,
                 "fresh prompts prefilled in each pass (batched) or before it (separate)");
  app.add_option("--repeats", setup.repeats, "timed passes per cell (median reported)");
  app.add_option("--threads", threads, "compute threads");
  app.add_option("--json", json_path, "write results as JSON");
  app.add_option("--capture", capture_s,
                 "capture-layer ids (e.g. 1,5): sessions keep and return DFlash features");
  app.add_flag("--grad-mode", grad_mode, "run with autograd bookkeeping (not in inference mode)");
  app.add_flag("--batched-only", setup.batched_only,
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
  setup.target = target->get();
  const int vocab = static_cast<int>((*target)->config().vocab_size);
  const std::vector<int> batches = ParseList(batches_s), rows_list = ParseList(rows_s);
  if (!capture_s.empty()) {
    for (int l : ParseList(capture_s)) setup.capture.push_back(l);
  }
  std::mt19937 rng(1);
  std::uniform_int_distribution<int> tok(4, vocab - 1);
  std::printf("%8s %5s %14s %15s %10s %18s\n", "sessions", "rows", "batched ms", "separate ms",
              "batched/sep", "batched ms/session");
  nlohmann::json out = nlohmann::json::array();
  for (int rows : rows_list) {
    for (int n : batches) {
      auto cell = TimeCell(setup, n, rows, rng, tok);
      if (!cell.ok()) {
        std::cerr << cell.status() << "\n";
        return 1;
      }
      const auto [b, s] = *cell;
      const double ratio = s > 0 ? b / s : 0.0;  // 0 with --batched-only
      std::printf("%8d %5d %14.3f %15.3f %10.2f %18.3f\n", n, rows, b, s, ratio, b / n);
      out.push_back({{"sessions", n},
                     {"rows", rows},
                     {"prompt_len", setup.prompt_len},
                     {"new_prompts", setup.new_prompts},
                     {"batched_ms", b},
                     {"separate_ms", s},
                     {"ratio", ratio}});
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << out.dump(2) << "\n";
  return 0;
}
