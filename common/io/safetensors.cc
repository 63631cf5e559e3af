#include "common/io/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"
#include "nlohmann/json.hpp"

namespace specdec::io {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // 100 MiB, as in the reference reader

absl::Status Bad(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// Product of `shape` into *out; false on a negative dimension or int64 overflow.
bool CheckedNumel(const std::vector<int64_t>& shape, int64_t* out) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return false;
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) return false;
    n *= d;
  }
  *out = n;
  return true;
}

// numel * element size, or false if it overflows uint64.
bool CheckedBytes(int64_t numel, DType dtype, uint64_t* out) {
  const uint64_t es = DTypeSize(dtype);
  if (static_cast<uint64_t>(numel) > std::numeric_limits<uint64_t>::max() / es) return false;
  *out = static_cast<uint64_t>(numel) * es;
  return true;
}

absl::StatusOr<std::string> ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Parses JSON text without letting an exception escape; the error names `path`.
absl::StatusOr<Json> ParseJson(const std::string& path, const char* first, const char* last,
                               absl::string_view what) {
  try {
    return Json::parse(first, last);
  } catch (const Json::exception& e) {
    return Bad(path, absl::StrCat(what, " is not valid JSON: ", e.what()));
  }
}

// Validates one header entry and fills *v. `where` prefixes messages ("tensor 'x': ").
absl::Status ParseEntry(const std::string& path, const std::string& name, const Json& e,
                        uint64_t data_size, TensorView* v, uint64_t* begin, uint64_t* end) {
  const std::string where = absl::StrCat("tensor '", name, "': ");
  if (!e.is_object()) return Bad(path, where + "entry is not a JSON object");
  for (const char* field : {"dtype", "shape", "data_offsets"}) {
    if (!e.contains(field)) return Bad(path, absl::StrCat(where, "entry lacks '", field, "'"));
  }
  if (!e["dtype"].is_string()) return Bad(path, where + "dtype must be a string");
  auto dtype = ParseSafetensorsDType(e["dtype"].get_ref<const std::string&>());
  if (!dtype.ok()) return Bad(path, where + std::string(dtype.status().message()));
  v->name = name;
  v->dtype = *dtype;
  if (!e["shape"].is_array()) return Bad(path, where + "shape must be an array");
  for (const Json& d : e["shape"]) {
    if (!d.is_number_integer()) return Bad(path, where + "shape entries must be integers");
    if (d.is_number_unsigned() &&
        d.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Bad(path, where + "shape overflows int64");
    }
    v->shape.push_back(d.get<int64_t>());
  }
  int64_t numel = 0;
  uint64_t want = 0;
  if (!CheckedNumel(v->shape, &numel)) {
    return Bad(path, where + "shape has a negative dimension or its element count overflows");
  }
  if (!CheckedBytes(numel, v->dtype, &want)) {
    return Bad(path, where + "shape's byte size overflows");
  }
  const Json& off = e["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
      !off[1].is_number_unsigned()) {
    return Bad(path, where + "data_offsets must be [begin, end] with non-negative integers");
  }
  *begin = off[0].get<uint64_t>();
  *end = off[1].get<uint64_t>();
  if (*begin > *end) {
    return Bad(path, absl::StrCat(where, "data_offsets begin ", *begin, " > end ", *end));
  }
  if (*end > data_size) {
    return Bad(path, absl::StrCat(where, "data_offsets end ", *end, " exceeds data section size ",
                                  data_size));
  }
  if (*end - *begin != want) {
    return Bad(path, absl::StrCat(where, "data_offsets span ", *end - *begin,
                                  " bytes but shape and dtype ", std::string(DTypeName(v->dtype)),
                                  " need ", want));
  }
  v->nbytes = static_cast<size_t>(want);
  return absl::OkStatus();
}

}  // namespace

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(auto mapped, MappedFile::Open(path));
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile(std::move(mapped)));
  const std::byte* base = f->file_->data();
  const uint64_t size = f->file_->size();
  if (size < 8) {
    return Bad(path,
               absl::StrCat("file is ", size,
                            " bytes; a safetensors file starts with an 8-byte header length"));
  }
  uint64_t header_len = 0;
  std::memcpy(&header_len, base, 8);  // little-endian hosts only (x86-64, aarch64)
  if (header_len > kMaxHeaderBytes) {
    return Bad(path, absl::StrCat("header too large: ", header_len, " bytes (limit ",
                                  kMaxHeaderBytes, ")"));
  }
  if (header_len > size - 8) {
    return Bad(path, absl::StrCat("header length ", header_len, " exceeds the file size ", size,
                                  " (truncated file?)"));
  }
  const char* hp = reinterpret_cast<const char*>(base + 8);
  ASSIGN_OR_RETURN(Json header, ParseJson(path, hp, hp + header_len, "header"));
  if (!header.is_object()) return Bad(path, "header is not a JSON object");
  const uint64_t data_size = size - 8 - header_len;
  const std::byte* data = base + 8 + header_len;
  std::vector<std::tuple<uint64_t, uint64_t, std::string>> ranges;  // non-empty ranges only
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    if (name == "__metadata__") {
      if (!it->is_object()) return Bad(path, "__metadata__ must be an object of strings");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return Bad(path, absl::StrCat("__metadata__['", m.key(), "'] is not a string"));
        }
        f->metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    TensorView v;
    uint64_t begin = 0, end = 0;
    RETURN_IF_ERROR(ParseEntry(path, name, *it, data_size, &v, &begin, &end));
    v.data = data + begin;
    if (end > begin) ranges.emplace_back(begin, end, name);
    f->tensors_.emplace(name, std::move(v));
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    const auto& [pb, pe, pn] = ranges[i - 1];
    const auto& [b, e, n] = ranges[i];
    if (b < pe) {
      return Bad(path, absl::StrCat("tensors '", pn, "' [", pb, ", ", pe, ") and '", n, "' [", b,
                                    ", ", e, ") overlap"));
    }
  }
  return f;
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  std::unique_ptr<Checkpoint> ck(new Checkpoint());
  ck->dir_ = dir;
  const std::string single = dir + "/model.safetensors";
  const std::string index = dir + "/model.safetensors.index.json";
  std::error_code ec;
  if (std::filesystem::exists(index, ec)) {
    ASSIGN_OR_RETURN(std::string text, ReadText(index));
    ASSIGN_OR_RETURN(Json j, ParseJson(index, text.data(), text.data() + text.size(), "index"));
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      return Bad(index, "index needs a JSON object with a \"weight_map\" object");
    }
    std::map<std::string, std::string> wanted;  // tensor -> shard
    std::set<std::string> shards;
    for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
      if (!it->is_string()) {
        return Bad(index, absl::StrCat("weight_map['", it.key(), "'] is not a string"));
      }
      const std::string shard = it->get<std::string>();
      if (shard.empty() || shard == "." || shard == ".." || shard.find('/') != std::string::npos) {
        return Bad(index, absl::StrCat("shard name '", shard, "' must be a plain file name"));
      }
      wanted[it.key()] = shard;
      shards.insert(shard);
    }
    std::map<std::string, const SafetensorsFile*> by_name;
    for (const std::string& shard : shards) {
      const std::string p = dir + "/" + shard;
      if (!std::filesystem::exists(p, ec)) {
        return absl::NotFoundError(
            absl::StrCat(index, ": shard '", shard, "' is listed but missing in ", dir));
      }
      ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(p));
      by_name[shard] = f.get();
      ck->files_.push_back(std::move(f));
    }
    for (const auto& [tensor, shard] : wanted) {
      const auto& ts = by_name.at(shard)->tensors();
      auto it = ts.find(tensor);
      if (it == ts.end()) {
        return Bad(index, absl::StrCat("tensor '", tensor, "' is mapped to shard '", shard,
                                       "', which does not contain it"));
      }
      ck->index_[tensor] = &it->second;
    }
    return ck;
  }
  if (!std::filesystem::exists(single, ec)) {
    return absl::NotFoundError(absl::StrCat(
        dir, ": no model.safetensors or model.safetensors.index.json in this directory"));
  }
  ASSIGN_OR_RETURN(auto f, SafetensorsFile::Open(single));
  for (const auto& [name, view] : f->tensors()) ck->index_[name] = &view;
  ck->files_.push_back(std::move(f));
  return ck;
}

absl::StatusOr<TensorView> Checkpoint::Get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) {
    return absl::NotFoundError(absl::StrCat(dir_, ": checkpoint has no tensor '", name, "'"));
  }
  return *it->second;
}

bool Checkpoint::Has(const std::string& name) const { return index_.count(name) > 0; }

std::vector<std::string> Checkpoint::Names() const {
  std::vector<std::string> names;
  names.reserve(index_.size());
  for (const auto& [n, v] : index_) names.push_back(n);
  return names;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::set<std::string> names;
  for (const TensorToWrite& t : tensors) {
    if (t.name.empty() || t.name == "__metadata__" || !names.insert(t.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor name '", t.name, "' is empty, reserved or repeated"));
    }
    int64_t numel = 0;
    uint64_t want = 0;
    if (!CheckedNumel(t.shape, &numel) || !CheckedBytes(numel, t.dtype, &want) ||
        want != t.data.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor '", t.name, "': ", t.data.size(),
          " bytes do not match its shape and dtype ", std::string(DTypeName(t.dtype))));
    }
    header[t.name] = {{"dtype", std::string(DTypeName(t.dtype))},
                      {"shape", t.shape},
                      {"data_offsets", {offset, offset + want}}};
    offset += want;
  }
  std::string h = header.dump();
  while ((8 + h.size()) % 8 != 0) h.push_back(' ');
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::PermissionDeniedError(absl::StrCat(tmp, ": cannot open for writing"));
    const uint64_t len = h.size();
    out.write(reinterpret_cast<const char*>(&len), 8);
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const TensorToWrite& t : tensors) {
      if (t.data.empty()) continue;
      out.write(reinterpret_cast<const char*>(t.data.data()),
                static_cast<std::streamsize>(t.data.size()));
    }
    out.flush();
    if (!out) {
      out.close();
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      return absl::DataLossError(absl::StrCat(tmp, ": write failed"));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    return absl::InternalError(absl::StrCat(path, ": rename failed: ", ec.message()));
  }
  return absl::OkStatus();
}

}  // namespace specdec::io
