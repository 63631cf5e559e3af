#include "train/data_command.h"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <thread>

#include "absl/status/status.h"
#include "common/tokenizer/tokenizer.h"
#include "common/util/status_macros.h"
#include "train/bpe_trainer.h"
#include "train/corpus.h"
#include "train/token_file.h"

namespace specdec::train {
namespace {

void Report(const char* name, const absl::Status& status, int* exit_code) {
  if (!status.ok()) {
    std::cerr << "specdec train " << name << ": " << status << "\n";
    *exit_code = 1;
  }
}

absl::Status RunTokenizer(const std::string& corpus, const std::string& out_dir,
                          const BpeTrainerOptions& options, int64_t max_bytes) {
  ASSIGN_OR_RETURN(std::vector<std::string> texts, ReadCorpusTexts(corpus));
  if (max_bytes > 0) {
    int64_t total = 0;
    size_t keep = 0;
    while (keep < texts.size() && total < max_bytes) total += texts[keep++].size();
    texts.resize(keep);
  }
  const auto t0 = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(BpeTokenizerFiles files, TrainByteLevelBpe(texts, options));
  std::filesystem::create_directories(out_dir);
  std::ofstream(out_dir + "/tokenizer.json") << files.tokenizer_json;
  std::ofstream(out_dir + "/tokenizer_config.json") << files.tokenizer_config_json;
  // Check that what we wrote loads and round-trips.
  ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::FromFile(out_dir + "/tokenizer.json"));
  ASSIGN_OR_RETURN(auto ids, tok->Encode(texts.front(), false));
  if (tok->Decode(ids, false) != texts.front()) {
    return absl::InternalError("the trained tokenizer does not round-trip its own training text");
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::cerr << "tokenizer: " << files.num_merges << " merges, vocabulary " << tok->vocab_size()
            << ", " << secs << " s; wrote " << out_dir << "\n";
  return absl::OkStatus();
}

absl::Status RunTokenize(const std::string& corpus, const std::string& tokenizer_dir,
                         const std::string& out, int threads) {
  ASSIGN_OR_RETURN(std::vector<std::string> texts, ReadCorpusTexts(corpus));
  ASSIGN_OR_RETURN(auto tok, tokenizer::Tokenizer::FromFile(tokenizer_dir + "/tokenizer.json"));
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ASSIGN_OR_RETURN(std::vector<int32_t> ids, TokenizeDocuments(*tok, texts, threads));
  RETURN_IF_ERROR(WriteTokenFile(out, ids));
  int64_t bytes = 0;
  for (const auto& t : texts) bytes += static_cast<int64_t>(t.size());
  std::cerr << "tokenize: " << texts.size() << " documents, " << bytes << " bytes -> "
            << ids.size() << " tokens (" << static_cast<double>(ids.size()) / bytes
            << " tokens/byte); wrote " << out << "\n";
  return absl::OkStatus();
}

}  // namespace

void RegisterDataSubcommands(CLI::App& parent, int* exit_code) {
  auto c = std::make_shared<CorpusOptions>();
  auto* corpus = parent.add_subcommand(
      "corpus", "Build a text corpus (train/held-out by file) from installed Debian packages");
  corpus->add_option("--package", c->packages, "Debian package (repeatable)")->required();
  corpus->add_option("--ext", c->extensions, "kept file ending, e.g. .py (repeatable)")->required();
  corpus->add_option("--exclude", c->exclude, "skip paths containing this (repeatable)");
  corpus->add_option("--out", c->out_dir, "output directory")->required();
  corpus->add_option("--heldout", c->heldout_fraction, "held-out share of files")
      ->capture_default_str();
  corpus->add_option("--max-file-bytes", c->max_file_bytes, "skip larger files")
      ->capture_default_str();
  corpus->add_option("--dpkg-dir", c->dpkg_dir, "dpkg database")->capture_default_str();
  corpus->add_option("--seed", c->seed, "split seed")->capture_default_str();
  corpus->callback([c, exit_code] {
    auto stats = BuildCorpus(*c);
    Report("corpus", stats.status(), exit_code);
    if (stats.ok()) {
      std::cerr << "corpus: " << stats->train_files << " train files (" << stats->train_bytes
                << " bytes), " << stats->heldout_files << " held-out files ("
                << stats->heldout_bytes << " bytes); wrote " << c->out_dir << "\n";
    }
  });

  struct TokArgs {
    std::string corpus, out;
    BpeTrainerOptions options;
    int64_t max_bytes = 0;
  };
  auto t = std::make_shared<TokArgs>();
  auto* tokcmd = parent.add_subcommand("tokenizer", "Train a byte-level BPE tokenizer.json");
  tokcmd->add_option("--corpus", t->corpus, "corpus .jsonl")->required();
  tokcmd->add_option("--out", t->out, "output directory")->required();
  tokcmd->add_option("--vocab-size", t->options.vocab_size, "vocabulary size")
      ->capture_default_str();
  tokcmd->add_option("--min-frequency", t->options.min_pair_frequency, "least pair count merged")
      ->capture_default_str();
  tokcmd->add_option("--max-bytes", t->max_bytes, "train on the first N bytes (0 = all)")
      ->capture_default_str();
  tokcmd->callback([t, exit_code] {
    Report("tokenizer", RunTokenizer(t->corpus, t->out, t->options, t->max_bytes), exit_code);
  });

  struct EncArgs {
    std::string corpus, tokenizer, out;
    int threads = 0;
  };
  auto e = std::make_shared<EncArgs>();
  auto* enc = parent.add_subcommand("tokenize", "Encode a corpus .jsonl into a token file");
  enc->add_option("--corpus", e->corpus, "corpus .jsonl")->required();
  enc->add_option("--tokenizer", e->tokenizer, "directory with tokenizer.json")->required();
  enc->add_option("--out", e->out, "output token file")->required();
  enc->add_option("--threads", e->threads, "threads (0 = all)")->capture_default_str();
  enc->callback([e, exit_code] {
    Report("tokenize", RunTokenize(e->corpus, e->tokenizer, e->out, e->threads), exit_code);
  });
}

}  // namespace specdec::train
