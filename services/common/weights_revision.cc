#include "services/common/weights_revision.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace specdec::services {
namespace {

// Mixes 8-byte words into `h` (the tail zero-padded); every word changes every later state.
uint64_t Mix(uint64_t h, const char* data, size_t n) {
  for (size_t i = 0; i < n; i += 8) {
    uint64_t w = 0;
    std::memcpy(&w, data + i, std::min<size_t>(8, n - i));
    h ^= w;
    h *= 0x9E3779B97F4A7C15ull;
    h ^= h >> 29;
  }
  return h;
}

}  // namespace

absl::StatusOr<std::string> WeightsRevision(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::vector<fs::path> files;
  if (fs::is_regular_file(dir, ec)) {
    files.push_back(dir);
  } else {
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (e.is_regular_file() && e.path().extension() == ".safetensors") files.push_back(e.path());
    }
  }
  if (files.empty()) {
    return absl::NotFoundError(absl::StrCat("no *.safetensors file in '", dir, "'"));
  }
  std::sort(files.begin(), files.end());
  uint64_t h = 0xCBF29CE484222325ull;
  std::vector<char> buf(1 << 20);
  for (const fs::path& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read '", f.string(), "'"));
    h = Mix(h, f.filename().string().data(), f.filename().string().size());
    while (in) {
      in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
      const size_t got = static_cast<size_t>(in.gcount());
      if (got == 0) break;
      h = Mix(h, buf.data(), got);
      h ^= got;  // so that a zero tail and a shorter file differ
    }
  }
  return absl::StrFormat("%016x", h);
}

}  // namespace specdec::services
