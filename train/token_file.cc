#include "train/token_file.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"

namespace specdec::train {
namespace {
constexpr char kMagic[8] = {'S', 'D', 'T', 'O', 'K', '1', 0, 0};
}  // namespace

absl::StatusOr<std::vector<int32_t>> TokenizeDocuments(const tokenizer::Tokenizer& tok,
                                                       std::span<const std::string> docs,
                                                       int threads) {
  if (!tok.bos_id() || !tok.eos_id()) {
    return absl::FailedPreconditionError("the tokenizer needs BOS and EOS tokens");
  }
  threads = std::max(1, threads);
  std::vector<std::vector<int32_t>> encoded(docs.size());
  std::vector<absl::Status> errors(threads);
  std::vector<std::thread> pool;
  for (int w = 0; w < threads; ++w) {
    pool.emplace_back([&, w] {
      for (size_t i = w; i < docs.size(); i += threads) {
        auto ids = tok.Encode(docs[i], /*add_bos=*/true);
        if (!ids.ok()) {
          errors[w] = ids.status();
          return;
        }
        encoded[i] = std::move(*ids);
        encoded[i].push_back(*tok.eos_id());
      }
    });
  }
  for (auto& t : pool) t.join();
  for (const auto& e : errors) RETURN_IF_ERROR(e);
  std::vector<int32_t> out;
  for (const auto& e : encoded) out.insert(out.end(), e.begin(), e.end());
  return out;
}

absl::Status WriteTokenFile(const std::string& path, std::span<const int32_t> ids) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat(tmp, ": cannot write"));
    const uint64_t n = ids.size();
    out.write(kMagic, sizeof(kMagic));
    out.write(reinterpret_cast<const char*>(&n), sizeof(n));
    out.write(reinterpret_cast<const char*>(ids.data()),
              static_cast<std::streamsize>(ids.size_bytes()));
    if (!out) return absl::DataLossError(absl::StrCat(tmp, ": write failed"));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": rename failed"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<int32_t>> ReadTokenFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open token file"));
  const auto size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  char magic[8];
  uint64_t n = 0;
  if (size < 16 || !in.read(magic, 8) || std::memcmp(magic, kMagic, 8) != 0 ||
      !in.read(reinterpret_cast<char*>(&n), 8)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a specdec token file"));
  }
  if (n > (size - 16) / 4 || size != 16 + n * 4) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": header says ", n, " tokens but the file holds ", size, " bytes"));
  }
  std::vector<int32_t> ids(n);
  in.read(reinterpret_cast<char*>(ids.data()), static_cast<std::streamsize>(n * 4));
  if (!in) return absl::DataLossError(absl::StrCat(path, ": short read"));
  return ids;
}

}  // namespace specdec::train
