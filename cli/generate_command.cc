#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cli/commands.h"
#include "clients/cpp/client.h"
#include "common/engine/decoder.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"
#include "common/tokenizer/stream_decoder.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/status_macros.h"

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
  std::string router;   // generate through a running cluster instead of a local model
  std::string api_key;  // with --router: sent as "authorization: Bearer <key>"
  std::string tls_ca, tls_cert, tls_key;  // with --router: TLS to the router
  int timeout_ms = 120000;                // with --router: the request's deadline
  std::string method = "AR";              // with --router
  int block_size = 0;
  int draft_length = 0;
  std::vector<std::string> stop;  // stop strings
};

// "[specdec] steps by block: AR x3, 4 x20" on stderr (AR: steps that drafted nothing).
void PrintStepsByBlock(const std::map<int32_t, int64_t>& steps_by_block) {
  std::string blocks;
  for (const auto& [b, count] : steps_by_block) {
    absl::StrAppend(&blocks, blocks.empty() ? "" : ", ", b == 0 ? "AR" : absl::StrCat(b), " x",
                    count);
  }
  std::fprintf(stderr, "[specdec] steps by block: %s\n", blocks.c_str());
}

// Generation through the router's Generate API with the C++ SDK.
int RunRouterGenerate(const GenerateArgs& a) {
  auto connected = Client::Connect(a.router, a.api_key, {a.tls_ca, a.tls_cert, a.tls_key});
  if (!connected.ok()) {
    std::cerr << "specdec generate: " << connected.status().message() << "\n";
    return 1;
  }
  auto client = *std::move(connected);
  v1::GenerateRequest req;
  v1::Method method;
  if (!v1::Method_Parse(a.method, &method)) {
    std::cerr << "specdec generate: unknown --method '" << a.method
              << "' (AR, DRAFT_CHAIN, DYSPEC_TREE, DFLASH, DFLASH_ADAPTIVE, NGRAM)\n";
    return 2;
  }
  req.set_method(method);
  if (!a.prompt_ids.empty()) {
    for (absl::string_view part : absl::StrSplit(a.prompt_ids, ',', absl::SkipWhitespace())) {
      int32_t id;
      if (!absl::SimpleAtoi(part, &id)) {
        std::cerr << "specdec generate: --prompt-ids: '" << part << "' is not an integer\n";
        return 2;
      }
      req.mutable_token_ids()->add_ids(id);
    }
  } else if (!a.prompt.empty()) {
    req.set_text(a.prompt);
  } else {
    auto info = client->Info();
    if (!info.ok() || info->target().bos_token_id() < 0) {
      std::cerr << "specdec generate: cannot start from BOS (" << info.status()
                << "); give --prompt or --prompt-ids\n";
      return 2;
    }
    req.mutable_token_ids()->add_ids(info->target().bos_token_id());
  }
  req.set_max_new_tokens(a.max_new_tokens);
  req.mutable_sampling()->set_temperature(a.temperature);
  req.mutable_sampling()->set_top_k(a.top_k);
  req.mutable_sampling()->set_top_p(a.top_p);
  req.mutable_sampling()->set_seed(a.seed);
  req.set_ignore_eos(a.ignore_eos);
  req.set_return_text(true);
  req.set_block_size(a.block_size);
  req.set_draft_length(a.draft_length);
  for (const std::string& s : a.stop) req.add_stop(s);
  const auto t0 = std::chrono::steady_clock::now();
  size_t n = 0;
  std::vector<int32_t> ids;
  std::map<int32_t, int64_t> steps_by_block;  // 0: AR steps (nothing drafted)
  auto summary = client->GenerateStream(
      req,
      [&](const v1::TokenChunk& c) {
        if (c.has_step()) ++steps_by_block[c.step().drafted() > 0 ? c.step().block_size() : 0];
        n += c.token_ids_size();
        ids.insert(ids.end(), c.token_ids().begin(), c.token_ids().end());
        std::fwrite(c.text().data(), 1, c.text().size(), stdout);
        std::fflush(stdout);
      },
      a.timeout_ms);
  std::fputc('\n', stdout);
  if (a.print_ids) {
    std::cerr << "ids:";
    for (int32_t id : ids) std::cerr << ' ' << id;
    std::cerr << "\n";
  }
  if (!summary.ok()) {
    std::cerr << "specdec generate: " << summary.status() << "\n";
    return 1;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto& st = summary->stats();
  if (st.method() == v1::DFLASH || st.method() == v1::DFLASH_ADAPTIVE) {
    PrintStepsByBlock(steps_by_block);
  }
  std::fprintf(stderr,
               "[specdec] %s via %s: %zu tokens in %.3f s (%.1f tokens/s), tau %.2f, %lld target "
               "steps, block size %d%s%s\n",
               v1::Method_Name(st.method()).c_str(), a.router.c_str(), n, s, n / s, st.tau(),
               static_cast<long long>(st.verify_steps()), st.block_size(),
               st.note().empty() ? "" : "; ", st.note().c_str());
  return 0;
}

// The local prompt: --prompt-ids, --prompt encoded, or BOS. INVALID_ARGUMENT for a usage error.
absl::StatusOr<std::vector<int32_t>> LocalPrompt(const GenerateArgs& a,
                                                 const tokenizer::Tokenizer& tok,
                                                 const model::Transformer& model) {
  std::vector<int32_t> prompt;
  if (!a.prompt_ids.empty()) {
    for (absl::string_view part : absl::StrSplit(a.prompt_ids, ',', absl::SkipWhitespace())) {
      int32_t id;
      if (!absl::SimpleAtoi(part, &id)) {
        return absl::InvalidArgumentError(
            absl::StrCat("--prompt-ids: '", part, "' is not an integer"));
      }
      prompt.push_back(id);
    }
    if (auto s = tok.ValidateIds(prompt); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--prompt-ids: ", s.message()));
    }
  } else if (!a.prompt.empty()) {
    ASSIGN_OR_RETURN(prompt, tok.Encode(a.prompt, tok.add_bos_by_default()));
  } else {
    auto bos = tok.bos_id();
    if (!bos && model.config().bos_token_id) bos = model.config().bos_token_id;
    if (!bos) {
      return absl::InvalidArgumentError(
          "the tokenizer has no BOS token; give --prompt or --prompt-ids");
    }
    prompt.push_back(*bos);
  }
  if (prompt.empty()) return absl::InvalidArgumentError("the prompt encodes to no tokens");
  return prompt;
}

int RunGenerate(const GenerateArgs& a) {
  if (!a.router.empty()) return RunRouterGenerate(a);
  if (a.model_dir.empty()) {
    std::cerr << "specdec generate: give --model DIR (local) or --router ADDR (cluster)\n";
    return 2;
  }
  model::ConfigureComputeThreads(a.threads);
  auto model = model::Transformer::Load(a.model_dir, *model::LoadOptions::ForDtype(a.dtype));
  if (!model.ok()) {
    std::cerr << "specdec generate: " << model.status() << "\n";
    return 1;
  }
  auto tok = tokenizer::Tokenizer::FromFile(a.model_dir + "/tokenizer.json");
  if (!tok.ok()) {
    std::cerr << "specdec generate: " << tok.status() << "\n";
    return 1;
  }
  auto local_prompt = LocalPrompt(a, **tok, **model);
  if (!local_prompt.ok()) {
    std::cerr << "specdec generate: " << local_prompt.status().message() << "\n";
    return local_prompt.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  const std::vector<int32_t>& prompt = *local_prompt;

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
  opts.stop_strings = a.stop;
  // With stop strings the loop decodes the text (and ends it before a match); otherwise the
  // text is decoded here, primed with the prompt so the first piece is spaced as in context.
  tokenizer::StreamDecoder decoder(**tok);
  if (!a.prompt.empty() && a.stop.empty()) {
    for (int32_t id : prompt) decoder.Push(id);
  }
  engine::EngineModels models{model->get()};
  if (!a.stop.empty()) models.tokenizer = tok->get();
  auto result = engine::Decode(models, prompt, opts,
                               [&](std::span<const int32_t> ids, const engine::StepInfo& step) {
                                 std::string text = step.text;
                                 for (int32_t id : ids) {
                                   if (a.stop.empty() && !(*tok)->IsSpecial(id)) {
                                     text += decoder.Push(id);
                                   }
                                 }
                                 std::fwrite(text.data(), 1, text.size(), stdout);
                                 std::fflush(stdout);
                               });
  if (!result.ok()) {
    std::cerr << "\nspecdec generate: " << result.status() << "\n";
    return 1;
  }
  std::string rest = a.stop.empty() ? decoder.Flush() : std::string();
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
               prompt.size(), n, result->stopped ? " (stopped)" : "", result->stats.prefill_ms,
               decode_ms, decode_tps);
  return 0;
}

}  // namespace

void RegisterGenerateCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* cmd = app.add_subcommand(
      "generate",
      "Generate text: AR with a local model directory (HF layout), or any method through a "
      "running cluster (--router)");
  cmd->add_option("-m,--model", a->model_dir,
                  "model directory (config.json, *.safetensors, tokenizer.json)")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--router", a->router, "generate through a running cluster's router (host:port)");
  cmd->add_option("--api-key", a->api_key,
                  "with --router: the API key, when the router requires one")
      ->envname("SPECDEC_API_KEY");
  cmd->add_option("--tls-ca", a->tls_ca, "with --router: PEM CA of the router's TLS certificate");
  cmd->add_option("--tls-cert", a->tls_cert, "with --router: PEM client certificate (mTLS)");
  cmd->add_option("--tls-key", a->tls_key, "with --router: PEM key of --tls-cert");
  cmd->add_option("--method", a->method,
                  "with --router: AR, DRAFT_CHAIN, DYSPEC_TREE, DFLASH, DFLASH_ADAPTIVE or NGRAM");
  cmd->add_option("--block-size", a->block_size, "with --router: DFLASH block size (0 = default)");
  cmd->add_option("--draft-length", a->draft_length, "with --router: DRAFT_CHAIN K (0 = default)");
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
  cmd->add_option("--stop", a->stop, "stop string (repeatable): the text ends before it");
  cmd->add_flag("--print-ids", a->print_ids, "print the generated token ids to stderr");
  cmd->add_option("--timeout-ms", a->timeout_ms, "with --router: the request's deadline")
      ->check(CLI::PositiveNumber);
  cmd->callback([a, exit_code] { *exit_code = RunGenerate(*a); });
}

}  // namespace specdec::cli
