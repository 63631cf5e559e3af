// Measures what the cluster costs over the in-process engine: the same prompts and methods run
// through a live router and through engine::Decode in this process, interleaved, and the ratio
// of their throughputs plus the per-step RPC overhead are printed (and written as JSON).
//
//   specdec-cluster-bench --router 127.0.0.1:50050 --target DIR [--draft DIR] [--dflash DIR]
//       [--policy DIR] --prompts FILE [--methods AR,DRAFT_CHAIN] [-n 64] [--max-prompts 8]
//       [--warmup 2]
//
// The first `--warmup` prompts run through both sides and are not counted: the first requests
// of a fresh cluster pay for channel and stream set-up, lazily created sessions and cold caches,
// which is start-up cost, not per-request overhead.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/datasets.h"
#include "clients/cpp/client.h"
#include "common/engine/decoder.h"
#include "common/model/block_pilot.h"
#include "common/model/dflash_drafter.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/status_macros.h"

using Clock = std::chrono::steady_clock;

namespace {

using namespace specdec;

// The in-process side: the cluster's models, loaded here.
struct LocalModels {
  std::unique_ptr<model::Transformer> target, draft;
  std::unique_ptr<model::DFlashDrafter> dflash;
  std::unique_ptr<model::BlockPilot> policy;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  engine::EngineModels em;
};

absl::StatusOr<LocalModels> LoadLocal(const std::string& target_dir, const std::string& draft_dir,
                                      const std::string& dflash_dir,
                                      const std::string& policy_dir) {
  LocalModels m;
  ASSIGN_OR_RETURN(m.target, model::Transformer::Load(target_dir));
  ASSIGN_OR_RETURN(m.tok, tokenizer::Tokenizer::FromFile(target_dir + "/tokenizer.json"));
  m.em.target = m.target.get();
  if (!draft_dir.empty()) {
    ASSIGN_OR_RETURN(m.draft, model::Transformer::Load(draft_dir));
    m.em.draft_lm = m.draft.get();
  }
  if (!dflash_dir.empty()) {
    ASSIGN_OR_RETURN(m.dflash, model::DFlashDrafter::Load(dflash_dir, *m.target));
    m.em.dflash = m.dflash.get();
  }
  if (!policy_dir.empty()) {
    ASSIGN_OR_RETURN(m.policy, model::BlockPilot::Load(policy_dir));
    m.em.policy = m.policy.get();
  }
  return m;
}

// One method's sums over the counted prompts.
struct Agg {
  double local_ms = 0, cluster_ms = 0;
  int64_t tokens = 0, steps = 0, local_steps = 0;
  double local_draft_ms = 0, local_verify_ms = 0, cluster_draft_ms = 0, cluster_verify_ms = 0;
  int equal = 0, n = 0;
};

// One prompt with method `m` in process, then through the router; added to `a` when counted.
absl::Status RunPrompt(const LocalModels& lm, Client& client, std::span<const int32_t> ids,
                       const std::string& m, int n, bool counted, Agg& a) {
  auto method = engine::ParseMethod(m);
  v1::Method wm;
  if (!method.ok() || !v1::Method_Parse(m, &wm)) {
    return absl::InvalidArgumentError(absl::StrCat("unknown method ", m));
  }
  engine::DecodeOptions o;
  o.method = *method;
  o.max_new_tokens = n;
  auto t0 = Clock::now();
  ASSIGN_OR_RETURN(auto local, engine::Decode(lm.em, ids, o));
  const double local_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  v1::GenerateRequest req;
  for (int32_t t : ids) req.mutable_token_ids()->add_ids(t);
  req.set_method(wm);
  req.set_max_new_tokens(n);
  req.set_ignore_eos(true);
  t0 = Clock::now();
  ASSIGN_OR_RETURN(auto remote, client.Generate(req));
  const double cluster_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  if (!counted) return absl::OkStatus();
  a.local_ms += local_ms;
  a.cluster_ms += cluster_ms;
  a.tokens += static_cast<int64_t>(remote.tokens.size());
  a.steps += remote.summary.stats().verify_steps() + 1;
  a.local_steps += local.stats.verify_steps + 1;
  a.local_draft_ms += local.stats.draft_ms;
  a.local_verify_ms += local.stats.verify_ms;
  a.cluster_draft_ms += remote.summary.stats().timings().draft_ms();
  a.cluster_verify_ms += remote.summary.stats().timings().verify_ms();
  // Greedy outputs agree unless the local run stopped at EOS earlier (the cluster ignores it).
  const size_t k = std::min(local.tokens.size(), remote.tokens.size());
  a.equal += std::equal(local.tokens.begin(), local.tokens.begin() + k, remote.tokens.begin());
  ++a.n;
  return absl::OkStatus();
}

// The table, and its rows as JSON.
nlohmann::json Report(const std::map<std::string, Agg>& aggs) {
  std::printf("%-16s %4s %12s %12s %14s %16s %22s %22s %6s\n", "method", "n", "local tok/s",
              "cluster tok/s", "cluster/local", "RPC ms per step", "draft ms/step l|c",
              "verify ms/step l|c", "=");
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [m, a] : aggs) {
    const double lt = 1000.0 * a.tokens / a.local_ms, ct = 1000.0 * a.tokens / a.cluster_ms;
    const double per_step = (a.cluster_ms - a.local_ms) / std::max<int64_t>(1, a.steps);
    const double ls = std::max<int64_t>(1, a.local_steps), cs = std::max<int64_t>(1, a.steps);
    std::printf("%-16s %4d %12.1f %12.1f %14.2f %16.3f %10.3f|%-11.3f %10.3f|%-11.3f %3d/%d\n",
                m.c_str(), a.n, lt, ct, ct / lt, per_step, a.local_draft_ms / ls,
                a.cluster_draft_ms / cs, a.local_verify_ms / ls, a.cluster_verify_ms / cs, a.equal,
                a.n);
    rows.push_back({{"method", m},
                    {"prompts", a.n},
                    {"local_tokens_per_s", lt},
                    {"cluster_tokens_per_s", ct},
                    {"ratio", ct / lt},
                    {"rpc_ms_per_step", per_step},
                    {"local_draft_ms_per_step", a.local_draft_ms / ls},
                    {"cluster_draft_ms_per_step", a.cluster_draft_ms / cs},
                    {"local_verify_ms_per_step", a.local_verify_ms / ls},
                    {"cluster_verify_ms_per_step", a.cluster_verify_ms / cs}});
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  std::string router, target_dir, draft_dir, dflash_dir, policy_dir, prompts_file, json_path;
  std::string methods = "AR,DRAFT_CHAIN";
  int n = 64, max_prompts = 8, threads = 0, warmup = 2;
  CLI::App app{"specdec cluster overhead benchmark (router vs in-process engine)"};
  app.add_option("--router", router, "router address")->required();
  app.add_option("--target", target_dir, "target checkpoint (same as the cluster's)")->required();
  app.add_option("--draft", draft_dir, "AR draft model (same as the cluster's)");
  app.add_option("--dflash", dflash_dir, "DFlash drafter (same as the cluster's)");
  app.add_option("--policy", policy_dir, "BlockPilot policy (same as the cluster's)");
  app.add_option("--prompts", prompts_file, "prompt file (jsonl/jsonl.gz or text)")->required();
  app.add_option("--methods", methods, "comma-separated methods");
  app.add_option("-n", n, "new tokens per request");
  app.add_option("--max-prompts", max_prompts, "prompts to run");
  app.add_option("--threads", threads, "in-process compute threads");
  app.add_option("--json", json_path, "write results as JSON");
  app.add_option("--warmup", warmup, "leading prompts run on both sides but not counted");
  CLI11_PARSE(app, argc, argv);
  model::ConfigureComputeThreads(threads);
  auto local = LoadLocal(target_dir, draft_dir, dflash_dir, policy_dir);
  if (!local.ok()) {
    std::cerr << local.status() << "\n";
    return 1;
  }
  auto prompts = cli::LoadPrompts(prompts_file, max_prompts + std::max(0, warmup));
  if (!prompts.ok()) {
    std::cerr << prompts.status() << "\n";
    return 1;
  }
  auto client = Client::Connect(router);
  std::map<std::string, Agg> aggs;
  int prompt_index = 0;
  for (const auto& p : *prompts) {
    const bool counted = prompt_index++ >= warmup;
    auto ids = local->tok->Encode(p.text, local->tok->add_bos_by_default());
    if (!ids.ok()) continue;
    for (const std::string& m : std::vector<std::string>(absl::StrSplit(methods, ','))) {
      if (absl::Status s = RunPrompt(*local, *client, *ids, m, n, counted, aggs[m]); !s.ok()) {
        std::cerr << m << ": " << s << "\n";
        return 1;
      }
    }
  }
  const nlohmann::json rows = Report(aggs);
  if (!json_path.empty()) std::ofstream(json_path) << rows.dump(2) << "\n";
  return 0;
}
