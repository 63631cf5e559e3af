#include "cli/datasets.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace specdec::cli {
namespace {

absl::StatusOr<std::string> ReadAll(const std::string& path) {
  if (!std::filesystem::exists(path)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such prompt file"));
  }
  if (absl::EndsWith(path, ".gz")) {
    // gzip is part of every Debian system; shelling out avoids a zlib dependency.
    const std::string cmd = absl::StrCat("gzip -dc '", path, "'");
    FILE* p = ::popen(cmd.c_str(), "r");
    if (p == nullptr) return absl::InternalError(absl::StrCat(path, ": cannot run gzip"));
    std::string out;
    char buf[65536];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
    if (::pclose(p) != 0) return absl::InvalidArgumentError(absl::StrCat(path, ": not valid gzip"));
    return out;
  }
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

absl::StatusOr<std::vector<Prompt>> LoadPrompts(const std::string& path, int limit) {
  auto text = ReadAll(path);
  if (!text.ok()) return text.status();
  const std::string dataset = std::filesystem::path(path).parent_path().filename().string();
  std::vector<Prompt> out;
  auto full = [&] { return limit > 0 && static_cast<int>(out.size()) >= limit; };
  if (absl::StrContains(path, ".jsonl")) {
    std::istringstream lines(*text);
    std::string line;
    int n = 0;
    while (!full() && std::getline(lines, line)) {
      ++n;
      if (line.find_first_not_of(" \r\t") == std::string::npos) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded() || !j.is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": line ", n, " is not a JSON object"));
      }
      Prompt p;
      p.dataset = dataset;
      p.id = j.contains("task_id")       ? j["task_id"].dump()
             : j.contains("question_id") ? j["question_id"].dump()
                                         : std::to_string(n);
      for (const char* f : {"prompt", "question", "text"}) {
        if (j.contains(f) && j[f].is_string()) {
          p.text = j[f].get<std::string>();
          break;
        }
      }
      if (p.text.empty() && j.contains("turns") && j["turns"].is_array() && !j["turns"].empty() &&
          j["turns"][0].is_string()) {
        p.text = j["turns"][0].get<std::string>();
      }
      if (p.text.empty()) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": line ", n, " has none of the fields prompt, question, text, turns"));
      }
      out.push_back(std::move(p));
    }
  } else {
    std::istringstream lines(*text);
    std::string line, cur;
    int n = 0;
    auto flush = [&] {
      if (!cur.empty() && !full()) out.push_back({dataset, std::to_string(++n), cur});
      cur.clear();
    };
    while (std::getline(lines, line)) {
      if (line.find_first_not_of(" \r\t") == std::string::npos) {
        flush();
      } else {
        cur += cur.empty() ? line : "\n" + line;
      }
    }
    flush();
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(path, ": no prompts found"));
  return out;
}

}  // namespace specdec::cli
