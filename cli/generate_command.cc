#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "common/engine/decoder.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"
#include "common/tokenizer/stream_decoder.h"
#include "common/tokenizer/tokenizer.h"

namespace specdec::cli {
namespace {

struct GenerateArgs {
  std::string model_dir;
  std::string prompt;
  std::string prompt_ids;
  int max_new_tokens = 128;
  float temperature = 0.f;
  int top_k = 0;
  float top_p = 1.f;
  uint64_t seed = 0;
  int threads = 0;
  std::string dtype = "auto";
  bool ignore_eos = false;
  bool print_ids = false;
};

int RunGenerate(const GenerateArgs& a) {
  model::ConfigureComputeThreads(a.threads);
  model::LoadOptions load;
  if (a.dtype == "f32") load.dtype = at::kFloat;
  if (a.dtype == "bf16") load.dtype = at::kBFloat16;
  auto model = model::Transformer::Load(a.model_dir, load);
  if (!model.ok()) {
    std::cerr << "specdec generate: " << model.status() << "\n";
    return 1;
  }
  auto tok = tokenizer::Tokenizer::FromFile(a.model_dir + "/tokenizer.json");
  if (!tok.ok()) {
    std::cerr << "specdec generate: " << tok.status() << "\n";
    return 1;
  }
  std::vector<int32_t> prompt;
  if (!a.prompt_ids.empty()) {
    for (absl::string_view part : absl::StrSplit(a.prompt_ids, ',', absl::SkipWhitespace())) {
      int32_t id;
      if (!absl::SimpleAtoi(part, &id)) {
        std::cerr << "specdec generate: --prompt-ids: '" << part << "' is not an integer\n";
        return 2;
      }
      prompt.push_back(id);
    }
    if (auto s = (*tok)->ValidateIds(prompt); !s.ok()) {
      std::cerr << "specdec generate: --prompt-ids: " << s << "\n";
      return 2;
    }
  } else if (!a.prompt.empty()) {
    auto ids = (*tok)->Encode(a.prompt, (*tok)->add_bos_by_default());
    if (!ids.ok()) {
      std::cerr << "specdec generate: " << ids.status() << "\n";
      return 1;
    }
    prompt = *std::move(ids);
  } else {
    auto bos = (*tok)->bos_id();
    if (!bos && (*model)->config().bos_token_id) bos = (*model)->config().bos_token_id;
    if (!bos) {
      std::cerr << "specdec generate: the tokenizer has no BOS token; give --prompt or "
                   "--prompt-ids\n";
      return 2;
    }
    prompt.push_back(*bos);
  }
  if (prompt.empty()) {
    std::cerr << "specdec generate: the prompt encodes to no tokens\n";
    return 2;
  }

  engine::DecodeOptions opts;
  opts.method = engine::Method::kAr;
  opts.max_new_tokens = a.max_new_tokens;
  opts.sampling.temperature = a.temperature;
  opts.sampling.top_k = a.top_k;
  opts.sampling.top_p = a.top_p;
  opts.sampling.seed = a.seed;
  if (!a.ignore_eos) {
    opts.stop_token_ids = (*model)->config().eos_token_ids;
    if (auto eos = (*tok)->eos_id()) opts.stop_token_ids.push_back(*eos);
  }
  tokenizer::StreamDecoder decoder(**tok);
  if (!a.prompt.empty()) {
    // Prime the decoder with the prompt so the first generated piece is spaced correctly.
    for (int32_t id : prompt) decoder.Push(id);
  }
  engine::EngineModels models{model->get()};
  auto result = engine::Decode(models, prompt, opts,
                               [&](std::span<const int32_t> ids, const engine::StepInfo&) {
                                 for (int32_t id : ids) {
                                   if ((*tok)->IsSpecial(id)) continue;
                                   std::string piece = decoder.Push(id);
                                   std::fwrite(piece.data(), 1, piece.size(), stdout);
                                 }
                                 std::fflush(stdout);
                               });
  if (!result.ok()) {
    std::cerr << "\nspecdec generate: " << result.status() << "\n";
    return 1;
  }
  std::string rest = decoder.Flush();
  std::fwrite(rest.data(), 1, rest.size(), stdout);
  std::fputc('\n', stdout);
  std::fflush(stdout);
  if (a.print_ids) {
    std::cerr << "ids:";
    for (int32_t id : result->tokens) std::cerr << ' ' << id;
    std::cerr << "\n";
  }
  const size_t n = result->tokens.size();
  const double decode_ms = result->stats.verify_ms;
  const double decode_tps = n > 1 && decode_ms > 0 ? 1000.0 * (n - 1) / decode_ms : 0.0;
  std::fprintf(stderr,
               "[specdec] prompt %zu tokens, generated %zu tokens%s; prefill %.1f ms, decode "
               "%.1f ms (%.1f tokens/s)\n",
               prompt.size(), n, result->stopped ? " (stop token)" : "", result->stats.prefill_ms,
               decode_ms, decode_tps);
  return 0;
}

}  // namespace

void RegisterGenerateCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate", "Generate text autoregressively with a local model directory (HF layout)");
  cmd->add_option("-m,--model", a->model_dir,
                  "model directory (config.json, *.safetensors, "
                  "tokenizer.json)")
      ->required()
      ->check(CLI::ExistingDirectory);
  auto* p = cmd->add_option("-p,--prompt", a->prompt, "prompt text (default: start from BOS)");
  cmd->add_option("--prompt-ids", a->prompt_ids, "prompt as comma-separated token ids")
      ->excludes(p);
  cmd->add_option("-n,--max-new-tokens", a->max_new_tokens, "tokens to generate")
      ->check(CLI::Range(0, 1 << 20));
  cmd->add_option("-t,--temperature", a->temperature, "0 = greedy")->check(CLI::Range(0.0, 100.0));
  cmd->add_option("--top-k", a->top_k, "0 = off")->check(CLI::NonNegativeNumber);
  cmd->add_option("--top-p", a->top_p, "1 = off")->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--seed", a->seed, "sampling seed");
  cmd->add_option("--threads", a->threads, "compute threads (0 = all cores)");
  cmd->add_option("--dtype", a->dtype, "compute dtype")
      ->check(CLI::IsMember({"auto", "f32", "bf16"}));
  cmd->add_flag("--ignore-eos", a->ignore_eos, "do not stop at the end-of-sequence token");
  cmd->add_flag("--print-ids", a->print_ids, "print the generated token ids to stderr");
  cmd->callback([a, exit_code] { *exit_code = RunGenerate(*a); });
}

}  // namespace specdec::cli
