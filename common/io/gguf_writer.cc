#include "common/io/gguf_writer.h"

#include <fstream>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/io/gguf.h"

namespace specdec::io {
namespace {

constexpr uint64_t kAlignment = 32;  // GGUF's default; no general.alignment key is written
// GGUF value type codes.
constexpr uint32_t kTypeU32 = 4, kTypeI32 = 5, kTypeF32 = 6, kTypeBool = 7, kTypeString = 8,
                   kTypeArray = 9;

template <typename T>
std::string Le(T v) {  // every supported host is little-endian, as GGUF is
  return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
}
std::string Str(const std::string& s) { return Le<uint64_t>(s.size()) + s; }
uint64_t AlignUp(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

size_t ElementBytes(int ggml_type) {
  switch (ggml_type) {
    case kGgmlTypeF32:
      return 4;
    case kGgmlTypeF16:
    case kGgmlTypeBF16:
      return 2;
    default:
      return 0;
  }
}

}  // namespace

void GgufWriter::AddKv(const std::string& key, uint32_t type, const std::string& encoded) {
  keys_.push_back(key);
  kv_ += Str(key) + Le<uint32_t>(type) + encoded;
}
void GgufWriter::SetString(const std::string& key, const std::string& value) {
  AddKv(key, kTypeString, Str(value));
}
void GgufWriter::SetU32(const std::string& key, uint32_t value) { AddKv(key, kTypeU32, Le(value)); }
void GgufWriter::SetI32(const std::string& key, int32_t value) { AddKv(key, kTypeI32, Le(value)); }
void GgufWriter::SetF32(const std::string& key, float value) { AddKv(key, kTypeF32, Le(value)); }
void GgufWriter::SetBool(const std::string& key, bool value) {
  AddKv(key, kTypeBool, Le<uint8_t>(value ? 1 : 0));
}
void GgufWriter::SetStringArray(const std::string& key, const std::vector<std::string>& values) {
  std::string enc = Le<uint32_t>(kTypeString) + Le<uint64_t>(values.size());
  for (const std::string& s : values) enc += Str(s);
  AddKv(key, kTypeArray, enc);
}
void GgufWriter::SetF32Array(const std::string& key, const std::vector<float>& values) {
  std::string enc = Le<uint32_t>(kTypeF32) + Le<uint64_t>(values.size());
  for (float f : values) enc += Le(f);
  AddKv(key, kTypeArray, enc);
}
void GgufWriter::SetI32Array(const std::string& key, const std::vector<int32_t>& values) {
  std::string enc = Le<uint32_t>(kTypeI32) + Le<uint64_t>(values.size());
  for (int32_t i : values) enc += Le(i);
  AddKv(key, kTypeArray, enc);
}

void GgufWriter::AddTensor(const std::string& name, std::vector<int64_t> ne, int ggml_type,
                           std::span<const std::byte> data) {
  tensors_.push_back({name, std::move(ne), ggml_type, data});
}

absl::Status GgufWriter::Write(const std::string& path) const {
  std::set<std::string> seen;
  for (const std::string& k : keys_) {
    if (!seen.insert(k).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": metadata key '", k, "' set twice"));
    }
  }
  seen.clear();
  std::string head =
      "GGUF" + Le<uint32_t>(3) + Le<uint64_t>(tensors_.size()) + Le<uint64_t>(keys_.size()) + kv_;
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    if (!seen.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", t.name, "' added twice"));
    }
    const size_t elem = ElementBytes(t.ggml_type);
    uint64_t count = 1;
    for (int64_t d : t.ne) count *= static_cast<uint64_t>(d > 0 ? d : 0);
    if (elem == 0 || t.ne.empty() || t.ne.size() > 4 || count * elem != t.data.size()) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", t.name, "' has ",
                                                     t.data.size(), " bytes for ", count,
                                                     " elements of ", GgmlTypeName(t.ggml_type)));
    }
    head += Str(t.name) + Le<uint32_t>(t.ne.size());
    for (int64_t d : t.ne) head += Le<uint64_t>(static_cast<uint64_t>(d));
    head += Le<uint32_t>(static_cast<uint32_t>(t.ggml_type)) + Le<uint64_t>(offset);
    offset = AlignUp(offset + t.data.size());
  }
  head.resize(AlignUp(head.size()), '\0');

  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open for writing"));
  out.write(head.data(), static_cast<std::streamsize>(head.size()));
  const std::string zeros(kAlignment, '\0');
  for (const Tensor& t : tensors_) {
    out.write(reinterpret_cast<const char*>(t.data.data()),
              static_cast<std::streamsize>(t.data.size()));
    out.write(zeros.data(), static_cast<std::streamsize>(AlignUp(t.data.size()) - t.data.size()));
  }
  out.flush();
  if (!out) return absl::DataLossError(absl::StrCat(path, ": write failed"));
  return absl::OkStatus();
}

}  // namespace specdec::io
