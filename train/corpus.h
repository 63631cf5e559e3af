// `specdec train corpus`: a text corpus from the files of installed Debian packages, split into
// train and held-out sets by file, with the packages' versions recorded.
#ifndef SPECDEC_TRAIN_CORPUS_H_
#define SPECDEC_TRAIN_CORPUS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace specdec::train {

struct CorpusOptions {
  std::vector<std::string> packages;    // e.g. "libpython3.11-stdlib"
  std::vector<std::string> extensions;  // kept file name endings, e.g. ".py"
  std::vector<std::string> exclude;     // path substrings to skip
  std::string out_dir;
  double heldout_fraction = 0.02;       // share of files held out
  int64_t max_file_bytes = 1 << 20;
  std::string dpkg_dir = "/var/lib/dpkg";
  uint64_t seed = 0;
};

struct CorpusStats {
  int64_t train_files = 0, heldout_files = 0, train_bytes = 0, heldout_bytes = 0;
  int64_t skipped_duplicate = 0, skipped_not_utf8 = 0, skipped_too_large = 0;
};

// Writes <out>/train.jsonl and <out>/heldout.jsonl ({"path", "text"} per line, sorted by path)
// and <out>/sources.json (packages, versions, copyright files, counts, options).
// FAILED_PRECONDITION naming the apt-get command when a package is not installed.
absl::StatusOr<CorpusStats> BuildCorpus(const CorpusOptions& options);

// The "text" fields of a .jsonl corpus file, in order.
absl::StatusOr<std::vector<std::string>> ReadCorpusTexts(const std::string& jsonl_path);

}  // namespace specdec::train

#endif  // SPECDEC_TRAIN_CORPUS_H_
