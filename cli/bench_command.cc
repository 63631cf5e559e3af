// `specdec bench`: runs decoding methods over prompt sets in one run, interleaved with AR, and
// reports acceptance length, throughput and speedup per method and dataset (table, JSON, PNG).
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "cli/datasets.h"
#include "cli/repetition.h"
#include "cli/speedup_interval.h"
#include "common/engine/decoder.h"
#include "common/engine/warm_up.h"
#include "common/model/block_pilot.h"
#include "common/model/dflash_drafter.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace specdec::cli {
namespace {

struct BenchArgs {
  std::string target, draft, dflash, policy;
  bool self_draft = false;
  std::vector<std::string> prompt_files;
  std::string methods = "AR,DRAFT_CHAIN,DYSPEC_TREE,DFLASH,DFLASH_ADAPTIVE";
  int max_prompts = 10;
  int max_new_tokens = 64;
  int max_prompt_tokens = 512;
  float temperature = 0.f;
  float top_p = 1.f;
  uint64_t seed = 1;
  int draft_length = 4;
  int tree_budget = 16;
  int tree_max_depth = 8;
  float tree_threshold = 0.f;
  int block_size = 0;
  std::vector<int> block_sizes;  // DFLASH runs once per block size (each a row of its own)
  std::string compare_policy;    // DFLASH_ADAPTIVE runs with this policy too ("... policy 2")
  bool no_adaptive_lookup = false;
  int warmup_tokens = engine::kDefaultWarmUpTokens;
  int threads = 0;
  std::string dtype = "auto", device = "cpu";
  std::string json_path, png_path, samples_path;
};

struct Agg {
  int prompts = 0;
  int64_t tokens = 0, steps = 0, committed = 0, drafted = 0, accepted = 0;
  double total_ms = 0, ar_ms = 0;  // method time and AR time on the same prompts
  double prefill_ms = 0, policy_ms = 0, draft_ms = 0, verify_ms = 0;  // the method's time by phase
  int matches_ar = 0;              // greedy outputs identical to AR
  std::vector<int64_t> acc_pos, draft_pos;
  std::map<int, int> block_sizes;
  std::vector<double> prompt_ar_ms, prompt_ms;  // each prompt's AR and method time
  double tau_sum = 0;    // mean of per-request tau
  NgramRepetition rep8;  // repeated 8-grams of the generated tokens
};

int Fail(const absl::Status& s) {
  std::cerr << "specdec bench: " << s << "\n";
  return 1;
}

// Writes `text` to `path`; on failure says which file could not be written.
bool WriteFile(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
  f.close();
  if (!f) {
    std::cerr << "specdec bench: cannot write " << path << "\n";
    return false;
  }
  std::printf("wrote %s\n", path.c_str());
  return true;
}

void WritePlot(const std::map<std::pair<std::string, std::string>, Agg>& aggs,
               const std::string& png) {
  const std::string dat = png + ".dat", gp = png + ".gp";
  {
    std::ofstream d(dat);
    for (const auto& [key, a] : aggs) {
      const double speedup = a.total_ms > 0 ? a.ar_ms / a.total_ms : 0;
      const double tau = a.steps > 0 ? static_cast<double>(a.committed) / a.steps : 0;
      d << '"' << key.first << "\\n" << key.second << "\" " << speedup << ' ' << tau << '\n';
    }
  }
  std::ofstream g(gp);
  g << "set terminal png size 1100,520 noenhanced\nset output '" << png << "'\n"
    << "set key outside right top\n"
    << "set style data histograms\nset style histogram clustered gap 1\n"
    << "set style fill solid 0.8 border -1\nset boxwidth 0.9\nset grid ytics\n"
    << "set xtics font ',8'\nset title 'specdec bench: speedup vs AR and acceptance length'\n"
    << "plot '" << dat << "' using 2:xtic(1) title 'speedup vs AR', '' using 3 title 'tau'\n";
  g.close();
  const std::string cmd = "gnuplot '" + gp + "' 2>/dev/null";
  if (std::system(cmd.c_str()) == 0) {
    std::printf("wrote %s\n", png.c_str());
  } else {
    std::printf("gnuplot is not installed; plot data in %s\n", dat.c_str());
  }
}

using AggMap = std::map<std::pair<std::string, std::string>, Agg>;

// The models of a run, loaded once; `em` points into them.
struct BenchModels {
  std::unique_ptr<model::Transformer> target, draft;
  std::unique_ptr<model::DFlashDrafter> dflash;
  std::unique_ptr<model::BlockPilot> policy, policy2;
  std::unique_ptr<tokenizer::Tokenizer> tok;
  engine::EngineModels em;
  engine::EngineModels em2;  // em with --compare-policy's policy
};

// One row's way of decoding: a method, its block size, and which policy it asks.
struct Variant {
  engine::Method method = engine::Method::kAr;
  int block_size = 0;  // 0: --block-size
  bool second_policy = false;
  std::string name;
};

// What a run accumulates over its prompts.
struct BenchTotals {
  AggMap aggs;                                       // by (dataset, method)
  nlohmann::json samples = nlohmann::json::array();  // completions, for --samples
  int rotation = 0;                                  // which method runs first next
};

// Loads the target, its tokenizer and the optional draft model, DFlash drafter and policy.
absl::Status LoadBenchModels(const BenchArgs& a, BenchModels& m) {
  auto lo = model::LoadOptions::ForDtype(a.dtype);
  if (!lo.ok()) return lo.status();
  auto device = model::LoadOptions::ParseDevice(a.device);
  if (!device.ok()) return device.status();
  lo->device = *device;
  auto target = model::Transformer::Load(a.target, *lo);
  if (!target.ok()) return target.status();
  m.target = *std::move(target);
  auto tok = tokenizer::Tokenizer::FromFile(a.target + "/tokenizer.json");
  if (!tok.ok()) return tok.status();
  m.tok = *std::move(tok);
  m.em = engine::EngineModels{m.target.get()};
  if (!a.draft.empty()) {
    auto d = model::Transformer::Load(a.draft, *lo);
    if (!d.ok()) return d.status();
    m.draft = *std::move(d);
    m.em.draft_lm = m.draft.get();
  } else if (a.self_draft) {
    m.em.draft_lm = m.target.get();
  }
  if (!a.dflash.empty()) {
    auto d = model::DFlashDrafter::Load(a.dflash, *m.target);
    if (!d.ok()) return d.status();
    m.dflash = *std::move(d);
    m.em.dflash = m.dflash.get();
  }
  if (!a.policy.empty()) {
    auto p = model::BlockPilot::Load(a.policy);
    if (!p.ok()) return p.status();
    m.policy = *std::move(p);
    m.em.policy = m.policy.get();
  }
  m.em2 = m.em;
  if (!a.compare_policy.empty()) {
    auto p = model::BlockPilot::Load(a.compare_policy);
    if (!p.ok()) return p.status();
    m.policy2 = *std::move(p);
    m.em2.policy = m.policy2.get();
  }
  return absl::OkStatus();
}

// The methods of `names` to compare with AR (which always runs), skipping, with a note, those
// whose model is not loaded.
absl::StatusOr<std::vector<Variant>> SelectVariants(const BenchArgs& a,
                                                    const engine::EngineModels& em) {
  std::vector<Variant> variants;
  const std::string& names = a.methods;
  for (absl::string_view name : absl::StrSplit(names, ',', absl::SkipWhitespace())) {
    auto m = engine::ParseMethod(std::string(name));
    if (!m.ok()) return m.status();
    if (absl::Status s = engine::CheckModelsServe(em, *m); !s.ok()) {
      std::printf("skipping %s: %s\n", engine::MethodName(*m), std::string(s.message()).c_str());
      continue;
    }
    const std::string method_name = engine::MethodName(*m);
    if (*m == engine::Method::kAr) continue;
    if (*m == engine::Method::kDflash && !a.block_sizes.empty()) {
      for (int b : a.block_sizes)
        variants.push_back({*m, b, false, absl::StrCat(method_name, " b=", b)});
      continue;
    }
    variants.push_back({*m, 0, false, method_name});
    if (*m == engine::Method::kDflashAdaptive && !a.compare_policy.empty()) {
      variants.push_back({*m, 0, true, method_name + " policy 2"});
    }
  }
  return variants;
}

engine::DecodeOptions BenchDecodeOptions(const BenchArgs& a) {
  engine::DecodeOptions o;
  o.max_new_tokens = a.max_new_tokens;
  o.sampling = {a.temperature, 0, a.top_p, a.seed};
  o.draft_length = a.draft_length;
  o.tree_budget = a.tree_budget;
  o.tree_max_depth = a.tree_max_depth;
  o.tree_threshold = a.tree_threshold;
  o.block_size = a.block_size;
  o.adaptive_lookup = !a.no_adaptive_lookup;
  return o;
}

// Adds one request's result `r` to `g`; `ar` is AR's result on the same prompt.
void AddResult(const engine::DecodeResult& r, const engine::DecodeResult& ar, Agg& g) {
  ++g.prompts;
  g.tokens += static_cast<int64_t>(r.tokens.size());
  g.steps += r.stats.verify_steps;
  g.committed += r.stats.committed_tokens;
  g.drafted += r.stats.drafted_tokens;
  g.accepted += r.stats.accepted_tokens;
  g.total_ms += r.stats.total_ms;
  g.ar_ms += ar.stats.total_ms;
  g.prompt_ms.push_back(r.stats.total_ms);
  g.prompt_ar_ms.push_back(ar.stats.total_ms);
  g.prefill_ms += r.stats.prefill_ms;
  g.policy_ms += r.stats.policy_ms;
  g.draft_ms += r.stats.draft_ms;
  g.verify_ms += r.stats.verify_ms;
  g.matches_ar += r.tokens == ar.tokens;
  g.tau_sum += r.stats.tau();
  if (g.acc_pos.size() < r.stats.accepted_per_position.size()) {
    g.acc_pos.resize(r.stats.accepted_per_position.size());
    g.draft_pos.resize(r.stats.drafted_per_position.size());
  }
  for (size_t i = 0; i < r.stats.accepted_per_position.size(); ++i) {
    g.acc_pos[i] += r.stats.accepted_per_position[i];
    g.draft_pos[i] += r.stats.drafted_per_position[i];
  }
  if (r.stats.block_size > 0) ++g.block_sizes[r.stats.block_size];
  g.rep8 += CountRepeatedNgrams(r.tokens, 8);
}

// Runs AR and every method on prompt `p` and adds the results to `totals`.
absl::Status BenchPrompt(const BenchArgs& a, const BenchModels& models,
                         const std::vector<Variant>& variants, const Prompt& p,
                         BenchTotals& totals) {
  const tokenizer::Tokenizer& tok = *models.tok;
  auto ids = tok.Encode(p.text, tok.add_bos_by_default());
  if (!ids.ok()) return ids.status();
  if (static_cast<int>(ids->size()) > a.max_prompt_tokens) {
    ids->erase(ids->begin(), ids->end() - a.max_prompt_tokens);  // keep the prompt's tail
  }
  engine::DecodeOptions o = BenchDecodeOptions(a);
  // AR and every variant on this prompt, in a rotating order so no variant always runs first.
  std::vector<Variant> order = {Variant{engine::Method::kAr, 0, false, "AR"}};
  order.insert(order.end(), variants.begin(), variants.end());
  std::rotate(order.begin(), order.begin() + (totals.rotation++ % order.size()), order.end());
  std::map<std::string, engine::DecodeResult> results;
  for (const Variant& v : order) {
    o.method = v.method;
    o.block_size = v.block_size > 0 ? v.block_size : a.block_size;
    auto r = engine::Decode(v.second_policy ? models.em2 : models.em, *ids, o);
    if (!r.ok()) return r.status();
    results[v.name] = *std::move(r);
  }
  const engine::DecodeResult& ar = results["AR"];
  for (auto& [name, r] : results) {
    AddResult(r, ar, totals.aggs[{p.dataset, name}]);
    if (!a.samples_path.empty()) {
      totals.samples.push_back({{"dataset", p.dataset},
                                {"method", name},
                                {"prompt", p.text},
                                {"completion", tok.Decode(r.tokens)},
                                {"repeated_8gram_share", CountRepeatedNgrams(r.tokens, 8).share()},
                                {"total_ms", r.stats.total_ms},
                                {"prefill_ms", r.stats.prefill_ms},
                                {"decode_ms", r.stats.decode_ms},
                                {"verify_steps", r.stats.verify_steps},
                                {"drafted_tokens", r.stats.drafted_tokens},
                                {"accepted_tokens", r.stats.accepted_tokens},
                                {"lookup_steps", r.stats.lookup_steps},
                                {"block_size", r.stats.block_size},
                                {"speculation_skipped", r.stats.speculation_skipped}});
    }
  }
  std::fprintf(stderr, ".");
  return absl::OkStatus();
}

// Prints the table row of one (dataset, method) and returns it as JSON.
nlohmann::json ReportAgg(const std::pair<std::string, std::string>& key, const Agg& g) {
  const double tps = g.total_ms > 0 ? 1000.0 * g.tokens / g.total_ms : 0;
  const double tau = g.steps > 0 ? static_cast<double>(g.committed) / g.steps : 0;
  const SpeedupInterval ci = BootstrapSpeedup(g.prompt_ar_ms, g.prompt_ms);
  const double speedup = ci.speedup;
  std::vector<std::string> pos;
  std::vector<double> rates;
  for (size_t i = 0; i < g.acc_pos.size(); ++i) {
    const double r = g.draft_pos[i] ? static_cast<double>(g.acc_pos[i]) / g.draft_pos[i] : 0;
    rates.push_back(r);
    if (i < 8) pos.push_back(absl::StrCat(static_cast<int>(100 * r + 0.5)));
  }
  std::vector<std::string> bs;
  for (const auto& [b, n] : g.block_sizes) bs.push_back(absl::StrCat(b, ":", n));
  std::printf(
      "%-12s %-24s %4d %6lld %8.1f %6.2f %8.2f %4.2f-%-4.2f %8.2f %3d/%-2d %5.3f  %-28s %s\n",
      key.first.c_str(), key.second.c_str(), g.prompts, static_cast<long long>(g.tokens), tps, tau,
      speedup, ci.low, ci.high, tau > 0 ? speedup / tau : 0, g.matches_ar, g.prompts,
      g.rep8.share(), absl::StrJoin(pos, " ").c_str(), absl::StrJoin(bs, " ").c_str());
  nlohmann::json bsj = nlohmann::json::object();
  for (const auto& [b, n] : g.block_sizes) bsj[std::to_string(b)] = n;
  return {{"dataset", key.first},
          {"method", key.second},
          {"prompts", g.prompts},
          {"tokens", g.tokens},
          {"tokens_per_s", tps},
          {"tau", tau},
          {"mean_request_tau", g.prompts ? g.tau_sum / g.prompts : 0},
          {"speedup_vs_ar", speedup},
          {"speedup_ci95", {ci.low, ci.high}},
          {"speedup_over_tau", tau > 0 ? speedup / tau : 0},
          {"matches_ar", g.matches_ar},
          {"repeated_8gram_share", g.rep8.share()},
          {"drafted_tokens", g.drafted},
          {"accepted_tokens", g.accepted},
          {"acceptance_by_position", rates},
          {"block_sizes", bsj},
          {"method_ms", g.total_ms},
          {"ar_ms", g.ar_ms},
          {"prefill_ms", g.prefill_ms},
          {"policy_ms_per_request", g.prompts > 0 ? g.policy_ms / g.prompts : 0},
          {"draft_ms_per_step", g.steps > 0 ? g.draft_ms / g.steps : 0},
          {"verify_ms_per_step", g.steps > 0 ? g.verify_ms / g.steps : 0}};
}

// Prints the results table and returns its rows as JSON.
nlohmann::json ReportResults(const BenchArgs& a, const AggMap& aggs) {
  std::printf("target %s, %d threads, T=%.2f, max_new_tokens %d\n", a.target.c_str(),
              model::ConfigureComputeThreads(a.threads), a.temperature, a.max_new_tokens);
  std::printf("%-12s %-24s %4s %6s %8s %6s %8s %-9s %8s %6s %5s  %-28s %s\n", "dataset", "method",
              "n", "tokens", "tok/s", "tau", "speedup", "95% CI", "spd/tau", "=AR", "rep8",
              "accept rate by position", "block sizes");
  nlohmann::json rows = nlohmann::json::array();
  for (const auto& [key, g] : aggs) rows.push_back(ReportAgg(key, g));
  return rows;
}

// Writes the --json, --samples and --png files asked for; the exit code.
int WriteBenchFiles(const BenchArgs& a, const nlohmann::json& rows, const BenchTotals& totals) {
  if (!a.json_path.empty()) {
    nlohmann::json out = {{"target", a.target},
                          {"temperature", a.temperature},
                          {"max_new_tokens", a.max_new_tokens},
                          {"results", rows}};
    if (!WriteFile(a.json_path, out.dump(2) + "\n")) return 1;
  }
  if (!a.samples_path.empty()) {
    // A completion cut at the token limit may end inside a UTF-8 sequence: such bytes are written
    // as U+FFFD instead of failing the dump.
    const std::string text =
        totals.samples.dump(2, ' ', false, nlohmann::json::error_handler_t::replace);
    if (!WriteFile(a.samples_path, text + "\n")) return 1;
  }
  if (!a.png_path.empty()) WritePlot(totals.aggs, a.png_path);
  return 0;
}

// Where DFLASH_ADAPTIVE is compared, the untimed warm-up request that the router runs before it
// serves, so that the block choice starts from this machine's measured pass costs in process too.
absl::Status WarmUpBlockChoice(const BenchArgs& a, const BenchModels& models,
                               const std::vector<Variant>& variants) {
  const bool adaptive = std::any_of(variants.begin(), variants.end(), [](const Variant& v) {
    return v.method == engine::Method::kDflashAdaptive && v.block_size == 0;
  });
  if (!adaptive || a.warmup_tokens <= 0 || a.block_size > 0) return absl::OkStatus();
  auto r = engine::WarmUp(models.em, models.tok.get(), a.warmup_tokens);
  if (!r.ok()) return r.status();
  std::printf("warm-up: %zu tokens, tau %.2f, %.0f ms\n", r->tokens.size(), r->stats.tau(),
              r->stats.total_ms);
  return absl::OkStatus();
}

int RunBench(const BenchArgs& a) {
  model::ConfigureComputeThreads(a.threads);
  BenchModels models;
  if (absl::Status s = LoadBenchModels(a, models); !s.ok()) return Fail(s);
  auto variants = SelectVariants(a, models.em);
  if (!variants.ok()) return Fail(variants.status());

  if (absl::Status s = WarmUpBlockChoice(a, models, *variants); !s.ok()) return Fail(s);

  BenchTotals totals;
  for (const std::string& file : a.prompt_files) {
    auto prompts = LoadPrompts(file, a.max_prompts);
    if (!prompts.ok()) return Fail(prompts.status());
    for (const Prompt& p : *prompts) {
      if (absl::Status s = BenchPrompt(a, models, *variants, p, totals); !s.ok()) return Fail(s);
    }
  }
  std::fprintf(stderr, "\n");

  const nlohmann::json rows = ReportResults(a, totals.aggs);
  return WriteBenchFiles(a, rows, totals);
}

}  // namespace

void RegisterBenchCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench", "Compare decoding methods against AR on prompt sets, in one interleaved run");
  cmd->add_option("--target", a->target, "target model directory")->required();
  cmd->add_option("--draft", a->draft, "small AR draft model directory (DRAFT_CHAIN, DYSPEC_TREE)");
  cmd->add_flag("--self-draft", a->self_draft, "use the target as its own draft model");
  cmd->add_option("--dflash", a->dflash, "DFlash drafter directory");
  cmd->add_option("--policy", a->policy, "BlockPilot policy directory");
  cmd->add_option("--prompts", a->prompt_files,
                  "prompt files: .jsonl/.jsonl.gz (HumanEval, GSM8K, MBPP, MT-Bench) or text "
                  "with blank-line-separated prompts")
      ->required();
  cmd->add_option("--methods", a->methods, "comma-separated methods (AR always runs)");
  cmd->add_option("--max-prompts", a->max_prompts, "prompts per file (0 = all)");
  cmd->add_option("-n,--max-new-tokens", a->max_new_tokens, "tokens per request");
  cmd->add_option("--max-prompt-tokens", a->max_prompt_tokens, "keep the tail of longer prompts");
  cmd->add_option("-t,--temperature", a->temperature, "0 = greedy");
  cmd->add_option("--top-p", a->top_p, "nucleus sampling");
  cmd->add_option("--seed", a->seed, "sampling seed");
  cmd->add_option("--draft-length", a->draft_length, "DRAFT_CHAIN K");
  cmd->add_option("--tree-budget", a->tree_budget, "DYSPEC_TREE nodes per step");
  cmd->add_option("--tree-max-depth", a->tree_max_depth, "DYSPEC_TREE depth");
  cmd->add_option("--tree-threshold", a->tree_threshold, "DYSPEC_TREE threshold variant (> 0)");
  cmd->add_option("--block-size", a->block_size, "DFLASH block size (0 = training size)");
  cmd->add_option("--block-sizes", a->block_sizes,
                  "DFLASH once per block size, each its own row (e.g. 2,3,4,8,16)")
      ->delimiter(',');
  cmd->add_option("--compare-policy", a->compare_policy,
                  "a second BlockPilot: DFLASH_ADAPTIVE also runs with it (\"policy 2\" rows)");
  cmd->add_flag("--no-adaptive-lookup", a->no_adaptive_lookup,
                "DFLASH_ADAPTIVE never drafts by prompt lookup (the drafter drafts every step)");
  cmd->add_option("--warmup-tokens", a->warmup_tokens,
                  "before the timed requests, one untimed DFLASH_ADAPTIVE request of this many "
                  "tokens measures the passes' costs for the block choice, as the router does "
                  "(0: none; the first requests explore)");
  cmd->add_option("--threads", a->threads, "compute threads (0 = all cores)");
  cmd->add_option("--dtype", a->dtype, "compute dtype: auto (the checkpoint's), f32 or bf16");
  cmd->add_option("--device", a->device, "cpu, cuda or cuda:N (a CUDA-enabled libtorch)");
  cmd->add_option("--json", a->json_path, "write results as JSON");
  cmd->add_option("--png", a->png_path, "write a speedup/tau plot (gnuplot)");
  cmd->add_option("--samples", a->samples_path,
                  "write every prompt's completion per method as JSON (text and repeated 8-grams)");
  cmd->callback([a, exit_code] { *exit_code = RunBench(*a); });
}

}  // namespace specdec::cli
