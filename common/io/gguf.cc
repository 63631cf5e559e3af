#include "common/io/gguf.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "common/io/gguf_dequantize.h"
#include "common/util/status_macros.h"

namespace specdec::io {
namespace {

// GGUF metadata value type codes.
enum ValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
constexpr uint32_t kMaxValueType = kF64;
constexpr int kMaxArrayDepth = 4;
// No real model has metadata arrays this long (the largest vocabularies and merge lists have a
// few hundred thousand entries); the cap bounds memory for hostile files.
constexpr uint64_t kMaxArrayLength = 1ull << 24;
constexpr uint64_t kMaxDim = 1ull << 40;
constexpr uint64_t kMaxAlignment = 1ull << 20;

absl::Status Bad(const std::string& path, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", what));
}

// Bounds-checked little-endian cursor over the mapped bytes.
class Cursor {
 public:
  Cursor(const std::string& path, const std::byte* data, size_t size)
      : path_(path), data_(data), size_(size) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return size_ - pos_; }

  template <typename T>
  absl::StatusOr<T> Read(const char* what) {
    if (remaining() < sizeof(T)) return Truncated(what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }
  absl::StatusOr<std::string> ReadString(const char* what) {
    const size_t at = pos_;
    ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(what));
    if (len > remaining()) {
      return Bad(path_, absl::StrCat(what, " at offset ", at, ": string length ", len,
                                     " runs past the end of the file (", size_, " bytes)"));
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }
  absl::Status Truncated(const char* what) const {
    return Bad(path_, absl::StrCat("truncated file: cannot read ", what, " at offset ", pos_,
                                   " (file is ", size_, " bytes)"));
  }

 private:
  const std::string& path_;
  const std::byte* data_;
  size_t size_;
  size_t pos_ = 0;
};

// Smallest encoding of one value of `type` (strings: the 8-byte length; arrays: type + count).
size_t MinValueSize(uint32_t type) {
  switch (type) {
    case kU8:
    case kI8:
    case kBool:
      return 1;
    case kU16:
    case kI16:
      return 2;
    case kU32:
    case kI32:
    case kF32:
      return 4;
    case kU64:
    case kI64:
    case kF64:
    case kString:
      return 8;
    case kArray:
      return 12;
    default:
      return 0;
  }
}

template <typename T>
absl::StatusOr<GgufValue> ReadInt(Cursor& c, const char* what) {
  ASSIGN_OR_RETURN(T v, c.Read<T>(what));
  return GgufValue{static_cast<int64_t>(v)};
}

absl::StatusOr<GgufValue> ReadValue(Cursor& c, uint32_t type, const std::string& path, int depth) {
  switch (type) {
    case kU8:
      return ReadInt<uint8_t>(c, "uint8 value");
    case kI8:
      return ReadInt<int8_t>(c, "int8 value");
    case kU16:
      return ReadInt<uint16_t>(c, "uint16 value");
    case kI16:
      return ReadInt<int16_t>(c, "int16 value");
    case kU32:
      return ReadInt<uint32_t>(c, "uint32 value");
    case kI32:
      return ReadInt<int32_t>(c, "int32 value");
    case kI64:
      return ReadInt<int64_t>(c, "int64 value");
    case kU64: {
      ASSIGN_OR_RETURN(uint64_t v, c.Read<uint64_t>("uint64 value"));
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Bad(path, absl::StrCat("uint64 value ", v, " at offset ", c.pos() - 8,
                                      " does not fit in int64"));
      }
      return GgufValue{static_cast<int64_t>(v)};
    }
    case kF32: {
      ASSIGN_OR_RETURN(float v, c.Read<float>("float32 value"));
      return GgufValue{static_cast<double>(v)};
    }
    case kF64: {
      ASSIGN_OR_RETURN(double v, c.Read<double>("float64 value"));
      return GgufValue{v};
    }
    case kBool: {
      ASSIGN_OR_RETURN(uint8_t v, c.Read<uint8_t>("bool value"));
      if (v > 1) {
        return Bad(path, absl::StrCat("bool value ", int{v}, " at offset ", c.pos() - 1,
                                      " is neither 0 nor 1"));
      }
      return GgufValue{v != 0};
    }
    case kString: {
      ASSIGN_OR_RETURN(std::string s, c.ReadString("string value"));
      return GgufValue{std::move(s)};
    }
    case kArray: {
      if (depth >= kMaxArrayDepth) {
        return Bad(
            path, absl::StrCat("arrays nest deeper than ", kMaxArrayDepth, " at offset ", c.pos()));
      }
      ASSIGN_OR_RETURN(uint32_t elem, c.Read<uint32_t>("array element type"));
      if (elem > kMaxValueType) {
        return Bad(path,
                   absl::StrCat("unknown array element type ", elem, " at offset ", c.pos() - 4));
      }
      ASSIGN_OR_RETURN(uint64_t n, c.Read<uint64_t>("array length"));
      if (n > c.remaining() / MinValueSize(elem) || n > kMaxArrayLength) {
        return Bad(path, absl::StrCat("array of ", n, " elements at offset ", c.pos() - 8,
                                      " cannot fit in the ", c.remaining(),
                                      " bytes left (or exceeds ", kMaxArrayLength, ")"));
      }
      auto arr = std::make_shared<GgufValue::Array>();
      arr->element_type = elem;
      arr->items.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        ASSIGN_OR_RETURN(GgufValue v, ReadValue(c, elem, path, depth + 1));
        arr->items.push_back(std::move(v));
      }
      return GgufValue{std::move(arr)};
    }
    default:
      return Bad(path,
                 absl::StrCat("unknown metadata value type ", type, " at offset ", c.pos() - 4));
  }
}

}  // namespace

GgmlTypeLayout GgmlTypeLayoutOf(int type) {
  switch (type) {
    case 0:
      return {1, 4};  // F32
    case 1:
      return {1, 2};  // F16
    case 2:
      return {32, 18};  // Q4_0
    case 3:
      return {32, 20};  // Q4_1
    case 6:
      return {32, 22};  // Q5_0
    case 7:
      return {32, 24};  // Q5_1
    case 8:
      return {32, 34};  // Q8_0
    case 10:
      return {256, 84};  // Q2_K
    case 11:
      return {256, 110};  // Q3_K
    case 12:
      return {256, 144};  // Q4_K
    case 13:
      return {256, 176};  // Q5_K
    case 14:
      return {256, 210};  // Q6_K
    case 15:
      return {256, 292};  // Q8_K
    case 24:
      return {1, 1};  // I8
    case 25:
      return {1, 2};  // I16
    case 26:
      return {1, 4};  // I32
    case 27:
      return {1, 8};  // I64
    case 28:
      return {1, 8};  // F64
    case 30:
      return {1, 2};  // BF16
    default:
      return {0, 0};
  }
}

namespace {

bool Readable(int type) {
  return type == kGgmlTypeF32 || type == kGgmlTypeF16 || type == kGgmlTypeBF16 ||
         IsDequantizable(type);
}

uint32_t ByteSwap32(uint32_t v) {
  return (v >> 24) | ((v >> 8) & 0xff00u) | ((v << 8) & 0xff0000u) | (v << 24);
}

// Checks the magic of the file (`data`, `file_size` bytes) and reads the version after it.
absl::StatusOr<uint32_t> ReadMagicAndVersion(Cursor& c, const std::string& path,
                                             const std::byte* data, uint64_t file_size) {
  if (file_size < 4 || std::memcmp(data, "GGUF", 4) != 0) {
    return Bad(path, "not a GGUF file (bad magic; expected \"GGUF\")");
  }
  c.Read<uint32_t>("magic").IgnoreError();
  ASSIGN_OR_RETURN(uint32_t version, c.Read<uint32_t>("version"));
  if (version != 2 && version != 3) {
    const uint32_t swapped = ByteSwap32(version);
    if (swapped >= 1 && swapped <= 3) {
      return Bad(path, absl::StrCat("big-endian GGUF (version ", swapped,
                                    ") is not supported; use a little-endian file"));
    }
    return Bad(path, absl::StrCat("GGUF version ", version, " is not supported (2 or 3)"));
  }
  return version;
}

// Reads `n_kv` metadata key/values into `kv`; a repeated key is an error.
absl::Status ReadMetadata(Cursor& c, uint64_t n_kv, const std::string& path,
                          std::map<std::string, GgufValue>& kv) {
  for (uint64_t i = 0; i < n_kv; ++i) {
    const size_t at = c.pos();
    ASSIGN_OR_RETURN(std::string key, c.ReadString("metadata key"));
    ASSIGN_OR_RETURN(uint32_t type, c.Read<uint32_t>("metadata value type"));
    ASSIGN_OR_RETURN(GgufValue v, ReadValue(c, type, path, 0));
    if (!kv.emplace(key, std::move(v)).second) {
      return Bad(path, absl::StrCat("metadata key '", key, "' at offset ", at, " is repeated"));
    }
  }
  return absl::OkStatus();
}

// Reads one tensor info; `seen` collects the names read before it.
absl::StatusOr<GgufTensorInfo> ReadTensorInfo(Cursor& c, const std::string& path,
                                              uint64_t alignment, std::set<std::string>& seen) {
  GgufTensorInfo info;
  ASSIGN_OR_RETURN(info.name, c.ReadString("tensor name"));
  const std::string where = absl::StrCat("tensor '", info.name, "': ");
  if (!seen.insert(info.name).second) return Bad(path, where + "name is repeated");
  ASSIGN_OR_RETURN(uint32_t n_dims, c.Read<uint32_t>("tensor n_dims"));
  if (n_dims < 1 || n_dims > 4) {
    return Bad(path, absl::StrCat(where, n_dims, " dimensions (1..4 allowed)"));
  }
  info.n_dims = static_cast<int>(n_dims);
  for (uint32_t d = 0; d < n_dims; ++d) {
    ASSIGN_OR_RETURN(uint64_t ne, c.Read<uint64_t>("tensor dimension"));
    if (ne > kMaxDim) return Bad(path, absl::StrCat(where, "dimension ", ne, " is absurd"));
    info.ne.push_back(static_cast<int64_t>(ne));
  }
  ASSIGN_OR_RETURN(uint32_t type, c.Read<uint32_t>("tensor type"));
  if (type > static_cast<uint32_t>(std::numeric_limits<int>::max())) {
    return Bad(path, absl::StrCat(where, "ggml type ", type, " is invalid"));
  }
  info.ggml_type = static_cast<int>(type);
  ASSIGN_OR_RETURN(info.offset, c.Read<uint64_t>("tensor offset"));
  if (info.offset % alignment != 0) {
    return Bad(path, absl::StrCat(where, "data offset ", info.offset,
                                  " is not a multiple of the alignment ", alignment));
  }
  return info;
}

// The tensor of `info` after checking that its data lies inside the data section (`data_size`
// bytes from `data_offset` in the file mapped at `file_data`); readable types point at it.
absl::StatusOr<GgufTensor> LocateTensorData(const GgufTensorInfo& info, const std::string& path,
                                            const std::byte* file_data, uint64_t data_offset,
                                            uint64_t data_size) {
  const std::string where = absl::StrCat("tensor '", info.name, "': ");
  GgufTensor t;
  t.name = info.name;
  t.ggml_type = info.ggml_type;
  t.ne = info.ne;
  uint64_t numel = 1;
  for (int64_t ne : info.ne) {
    const uint64_t d = static_cast<uint64_t>(ne);
    if (d != 0 && numel > std::numeric_limits<uint64_t>::max() / d) {
      return Bad(path, where + "element count overflows");
    }
    numel *= d;
  }
  if (info.offset > data_size) {
    return Bad(path, absl::StrCat(where, "data offset ", info.offset,
                                  " is past the end of the data section (", data_size, " bytes)"));
  }
  const GgmlTypeLayout layout = GgmlTypeLayoutOf(info.ggml_type);
  if (layout.block > 0) {
    if (info.ne[0] % static_cast<int64_t>(layout.block) != 0) {
      return Bad(path, absl::StrCat(where, "ne[0] = ", info.ne[0], " is not a multiple of the ",
                                    GgmlTypeName(info.ggml_type), " block size ", layout.block));
    }
    const uint64_t blocks = numel / layout.block;
    if (blocks > std::numeric_limits<uint64_t>::max() / layout.bytes) {
      return Bad(path, where + "byte size overflows");
    }
    const uint64_t nbytes = blocks * layout.bytes;
    if (nbytes > data_size - info.offset) {
      return Bad(path, absl::StrCat(where, nbytes, " bytes at data offset ", info.offset,
                                    " run past the end of the file (data section is ", data_size,
                                    " bytes)"));
    }
    if (Readable(info.ggml_type)) {
      t.data = file_data + data_offset + info.offset;
      t.nbytes = static_cast<size_t>(nbytes);
    }
  }
  return t;
}

}  // namespace

std::string GgmlTypeName(int type) {
  static const char* const kNames[] = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  "Q4_2",   "Q4_3",  "Q5_0",  "Q5_1",
      "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16"};
  if (type >= 0 && type < static_cast<int>(std::size(kNames))) return kNames[type];
  if (type == 34) return "TQ1_0";
  if (type == 35) return "TQ2_0";
  return absl::StrCat("type ", type);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(auto mapped, MappedFile::Open(path));
  std::unique_ptr<GgufFile> g(new GgufFile(std::move(mapped)));
  const uint64_t file_size = g->file_->size();
  Cursor c(g->file_->path(), g->file_->data(), file_size);
  ASSIGN_OR_RETURN(g->version_, ReadMagicAndVersion(c, path, g->file_->data(), file_size));
  ASSIGN_OR_RETURN(uint64_t n_tensors, c.Read<uint64_t>("tensor count"));
  ASSIGN_OR_RETURN(uint64_t n_kv, c.Read<uint64_t>("metadata count"));
  // A key/value takes >= 13 bytes (key length, type, one byte), a tensor info >= 32.
  if (n_kv > c.remaining() / 13 || n_tensors > c.remaining() / 32 ||
      n_kv * 13 + n_tensors * 32 > c.remaining()) {
    return Bad(path, absl::StrCat("tensor count ", n_tensors, " and metadata count ", n_kv,
                                  " cannot fit in a file of ", file_size, " bytes"));
  }
  RETURN_IF_ERROR(ReadMetadata(c, n_kv, path, g->kv_));
  if (g->Has("general.alignment")) {
    auto a = g->GetInt("general.alignment");
    if (!a.ok() || *a <= 0 || static_cast<uint64_t>(*a) > kMaxAlignment || (*a & (*a - 1)) != 0) {
      return Bad(path, "general.alignment must be an integer power of two up to 1 MiB");
    }
    g->alignment_ = static_cast<uint64_t>(*a);
  }
  std::set<std::string> seen;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    ASSIGN_OR_RETURN(GgufTensorInfo info, ReadTensorInfo(c, path, g->alignment_, seen));
    g->infos_.push_back(std::move(info));
  }
  // The data section starts at the next multiple of the alignment (it may be empty: a file with
  // no tensors can end right after its metadata).
  g->data_offset_ = (c.pos() + g->alignment_ - 1) / g->alignment_ * g->alignment_;
  const uint64_t data_size = g->data_offset_ <= file_size ? file_size - g->data_offset_ : 0;
  if (n_tensors > 0 && g->data_offset_ > file_size) {
    return Bad(path, absl::StrCat("data section would start at ", g->data_offset_,
                                  ", past the end of the file (", file_size, " bytes)"));
  }
  for (const GgufTensorInfo& info : g->infos_) {
    ASSIGN_OR_RETURN(GgufTensor t,
                     LocateTensorData(info, path, g->file_->data(), g->data_offset_, data_size));
    g->tensor_order_.push_back(info.name);
    g->tensors_.emplace(info.name, std::move(t));
  }
  return g;
}

absl::StatusOr<const GgufValue*> GgufFile::GetValue(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) {
    return absl::NotFoundError(absl::StrCat(path(), ": metadata key '", key, "' is missing"));
  }
  return &it->second;
}

std::vector<std::string> GgufFile::Keys() const {
  std::vector<std::string> keys;
  keys.reserve(kv_.size());
  for (const auto& [k, v] : kv_) keys.push_back(k);
  return keys;
}

absl::StatusOr<int64_t> GgufFile::GetInt(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetValue(key));
  if (auto* i = std::get_if<int64_t>(&v->v)) return *i;
  return Bad(path(), absl::StrCat("metadata '", key, "' is not an integer"));
}

absl::StatusOr<double> GgufFile::GetFloat(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetValue(key));
  if (auto* d = std::get_if<double>(&v->v)) return *d;
  if (auto* i = std::get_if<int64_t>(&v->v)) return static_cast<double>(*i);
  return Bad(path(), absl::StrCat("metadata '", key, "' is not a number"));
}

absl::StatusOr<bool> GgufFile::GetBool(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetValue(key));
  if (auto* b = std::get_if<bool>(&v->v)) return *b;
  return Bad(path(), absl::StrCat("metadata '", key, "' is not a bool"));
}

absl::StatusOr<std::string> GgufFile::GetString(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetValue(key));
  if (auto* s = std::get_if<std::string>(&v->v)) return *s;
  return Bad(path(), absl::StrCat("metadata '", key, "' is not a string"));
}

namespace {

template <typename T, typename Fn>
absl::StatusOr<std::vector<T>> ArrayOf(const std::string& path, const std::string& key,
                                       const GgufValue* v, const char* want, Fn convert) {
  auto* arr = std::get_if<std::shared_ptr<GgufValue::Array>>(&v->v);
  if (arr == nullptr) return Bad(path, absl::StrCat("metadata '", key, "' is not an array"));
  std::vector<T> out;
  out.reserve((*arr)->items.size());
  for (const GgufValue& item : (*arr)->items) {
    std::optional<T> x = convert(item);
    if (!x) return Bad(path, absl::StrCat("metadata '", key, "' is not an array of ", want));
    out.push_back(*std::move(x));
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetValue(key));
  return ArrayOf<std::string>(path(), key, v, "strings",
                              [](const GgufValue& g) -> std::optional<std::string> {
                                if (auto* s = std::get_if<std::string>(&g.v)) return *s;
                                return std::nullopt;
                              });
}

absl::StatusOr<std::vector<double>> GgufFile::GetFloatArray(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetValue(key));
  return ArrayOf<double>(path(), key, v, "numbers",
                         [](const GgufValue& g) -> std::optional<double> {
                           if (auto* d = std::get_if<double>(&g.v)) return *d;
                           if (auto* i = std::get_if<int64_t>(&g.v)) return static_cast<double>(*i);
                           return std::nullopt;
                         });
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, GetValue(key));
  return ArrayOf<int64_t>(path(), key, v, "integers",
                          [](const GgufValue& g) -> std::optional<int64_t> {
                            if (auto* i = std::get_if<int64_t>(&g.v)) return *i;
                            return std::nullopt;
                          });
}

absl::StatusOr<GgufTensor> GgufFile::Tensor(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    return absl::NotFoundError(absl::StrCat(path(), ": no tensor '", name, "'"));
  }
  if (!Readable(it->second.ggml_type)) {
    return absl::UnimplementedError(absl::StrCat(path(), ": tensor '", name, "': ggml type ",
                                                 GgmlTypeName(it->second.ggml_type), " (",
                                                 it->second.ggml_type,
                                                 ") is not supported (F32, F16, BF16, Q8_0, Q6_K, "
                                                 "Q5_K, Q5_0, Q5_1, Q4_K, Q4_0 and Q4_1 are); "
                                                 "convert or "
                                                 "requantize to one of those"));
  }
  return it->second;
}

}  // namespace specdec::io
