#include "train/corpus.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "common/tokenizer/utf8.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace specdec::train {
namespace {

namespace fs = std::filesystem;

uint64_t Fnv1a(std::string_view s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ (seed * 0x9e3779b97f4a7c15ull);
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// "Version:" of `package` in the dpkg status file, or empty when it is not installed.
std::string InstalledVersion(const std::string& status_text, const std::string& package) {
  std::istringstream in(status_text);
  std::string line, current, version, state;
  auto done = [&]() { return current == package && state.find("installed") != std::string::npos; };
  while (std::getline(in, line)) {
    if (line.empty()) {
      if (done()) return version;
      current.clear();
      version.clear();
      state.clear();
    } else if (line.rfind("Package: ", 0) == 0) {
      current = line.substr(9);
    } else if (line.rfind("Version: ", 0) == 0) {
      version = line.substr(9);
    } else if (line.rfind("Status: ", 0) == 0) {
      state = line.substr(8);
    }
  }
  return done() ? version : "";
}

absl::StatusOr<std::string> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Doc {
  std::string path, text;
};

// The files `list` (a dpkg .list file's text) names that BuildCorpus takes: a wanted extension,
// no excluded part, a regular file and not a link; sorted.
std::vector<std::string> WantedFiles(const CorpusOptions& o, const std::string& list) {
  std::vector<std::string> files;
  std::istringstream in(list);
  for (std::string f; std::getline(in, f);) {
    const bool ext_ok = std::any_of(o.extensions.begin(), o.extensions.end(), [&](const auto& e) {
      return f.size() >= e.size() && f.compare(f.size() - e.size(), e.size(), e) == 0;
    });
    const bool excluded = std::any_of(o.exclude.begin(), o.exclude.end(), [&](const auto& x) {
      return f.find(x) != std::string::npos;
    });
    std::error_code ec;
    if (ext_ok && !excluded && fs::is_regular_file(f, ec) && !fs::is_symlink(f, ec)) {
      files.push_back(f);
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The split of every document read so far.
struct Split {
  std::vector<Doc> train, heldout;
  std::set<uint64_t> seen;  // hashes of the texts kept (duplicates are skipped)
};

// Reads installed package `pkg`'s wanted files into `split` (counting what it skips in
// `stats`) and returns its entry of sources.json.
absl::StatusOr<nlohmann::json> CollectPackage(const CorpusOptions& o, const std::string& pkg,
                                              const std::string& status_text, Split& split,
                                              CorpusStats& stats) {
  const std::string version = InstalledVersion(status_text, pkg);
  std::string list_path;
  for (const std::string& name : {pkg + ".list", pkg + ":amd64.list", pkg + ":all.list"}) {
    if (fs::exists(o.dpkg_dir + "/info/" + name)) list_path = o.dpkg_dir + "/info/" + name;
  }
  if (version.empty() || list_path.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat("package '", pkg, "' is not installed; run: apt-get install -y ", pkg));
  }
  ASSIGN_OR_RETURN(std::string list, ReadAll(list_path));
  int64_t kept = 0, bytes = 0;
  for (const std::string& f : WantedFiles(o, list)) {
    std::error_code ec;
    if (static_cast<int64_t>(fs::file_size(f, ec)) > o.max_file_bytes) {
      ++stats.skipped_too_large;
      continue;
    }
    auto text = ReadAll(f);
    if (!text.ok() || text->empty()) continue;
    if (!tokenizer::IsValidUtf8(*text)) {
      ++stats.skipped_not_utf8;
      continue;
    }
    if (!split.seen.insert(Fnv1a(*text, 0)).second) {
      ++stats.skipped_duplicate;
      continue;
    }
    const bool held =
        static_cast<double>(Fnv1a(f, o.seed + 1) % 1000000) / 1e6 < o.heldout_fraction;
    (held ? split.heldout : split.train).push_back({f, *text});
    ++kept;
    bytes += static_cast<int64_t>(text->size());
  }
  const std::string copyright = "/usr/share/doc/" + pkg + "/copyright";
  return nlohmann::json{{"package", pkg},
                        {"version", version},
                        {"copyright", fs::exists(copyright) ? copyright : ""},
                        {"files", kept},
                        {"bytes", bytes}};
}

// Writes `docs`, sorted by path, as JSON lines {"path", "text"} to `path`, counting them.
absl::Status WriteDocs(const std::string& path, std::vector<Doc>& docs, int64_t* n_files,
                       int64_t* n_bytes) {
  std::sort(docs.begin(), docs.end(), [](const Doc& a, const Doc& b) { return a.path < b.path; });
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot write"));
  for (const Doc& d : docs) {
    out << nlohmann::json({{"path", d.path}, {"text", d.text}}).dump() << "\n";
    ++*n_files;
    *n_bytes += static_cast<int64_t>(d.text.size());
  }
  return out ? absl::OkStatus() : absl::DataLossError(path + ": write failed");
}

}  // namespace

absl::StatusOr<CorpusStats> BuildCorpus(const CorpusOptions& o) {
  if (o.packages.empty() || o.extensions.empty() || o.out_dir.empty()) {
    return absl::InvalidArgumentError("packages, extensions and an output directory are required");
  }
  if (o.heldout_fraction < 0 || o.heldout_fraction >= 1) {
    return absl::InvalidArgumentError("heldout_fraction must be in [0, 1)");
  }
  ASSIGN_OR_RETURN(std::string status_text, ReadAll(o.dpkg_dir + "/status"));
  Split split;
  CorpusStats stats;
  nlohmann::json sources = nlohmann::json::array();
  for (const std::string& pkg : o.packages) {
    ASSIGN_OR_RETURN(nlohmann::json source, CollectPackage(o, pkg, status_text, split, stats));
    sources.push_back(std::move(source));
  }
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  RETURN_IF_ERROR(
      WriteDocs(o.out_dir + "/train.jsonl", split.train, &stats.train_files, &stats.train_bytes));
  RETURN_IF_ERROR(WriteDocs(o.out_dir + "/heldout.jsonl", split.heldout, &stats.heldout_files,
                            &stats.heldout_bytes));
  nlohmann::json summary = {
      {"sources", sources},
      {"extensions", o.extensions},
      {"exclude", o.exclude},
      {"heldout_fraction", o.heldout_fraction},
      {"max_file_bytes", o.max_file_bytes},
      {"seed", o.seed},
      {"train", {{"files", stats.train_files}, {"bytes", stats.train_bytes}}},
      {"heldout", {{"files", stats.heldout_files}, {"bytes", stats.heldout_bytes}}},
      {"skipped",
       {{"duplicate", stats.skipped_duplicate},
        {"not_utf8", stats.skipped_not_utf8},
        {"too_large", stats.skipped_too_large}}}};
  std::ofstream(o.out_dir + "/sources.json") << summary.dump(2) << "\n";
  return stats;
}

absl::StatusOr<std::vector<std::string>> ReadCorpusTexts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open corpus file"));
  std::vector<std::string> out;
  int64_t line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("text") || !j["text"].is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": expected {\"path\": ..., \"text\": ...}"));
    }
    out.push_back(j["text"].get<std::string>());
  }
  return out;
}

}  // namespace specdec::train
