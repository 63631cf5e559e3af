#include "common/io/gguf.h"

#include <cstring>
#include <limits>
#include <optional>

#include "absl/strings/str_cat.h"
#include "common/util/status_macros.h"

namespace specdec::io {
namespace {

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
    ASSIGN_OR_RETURN(uint64_t len, Read<uint64_t>(what));
    if (len > remaining()) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": ", what, ": string length ", len,
                                                     " runs past the end of the file at offset ",
                                                     pos_));
    }
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }
  absl::Status Truncated(const char* what) const {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": truncated file: cannot read ", what, " at offset ", pos_));
  }

 private:
  const std::string& path_;
  const std::byte* data_;
  size_t size_;
  size_t pos_ = 0;
};

size_t ScalarSize(uint32_t t) {
  switch (t) {
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
      return 8;
    default:
      return 0;
  }
}

absl::StatusOr<GgufValue> ReadValue(Cursor& c, uint32_t type, const std::string& path, int depth) {
  GgufValue out;
  switch (type) {
    case kU8: {
      ASSIGN_OR_RETURN(uint8_t v, c.Read<uint8_t>("u8"));
      out.v = int64_t{v};
      break;
    }
    case kI8: {
      ASSIGN_OR_RETURN(int8_t v, c.Read<int8_t>("i8"));
      out.v = int64_t{v};
      break;
    }
    case kU16: {
      ASSIGN_OR_RETURN(uint16_t v, c.Read<uint16_t>("u16"));
      out.v = int64_t{v};
      break;
    }
    case kI16: {
      ASSIGN_OR_RETURN(int16_t v, c.Read<int16_t>("i16"));
      out.v = int64_t{v};
      break;
    }
    case kU32: {
      ASSIGN_OR_RETURN(uint32_t v, c.Read<uint32_t>("u32"));
      out.v = int64_t{v};
      break;
    }
    case kI32: {
      ASSIGN_OR_RETURN(int32_t v, c.Read<int32_t>("i32"));
      out.v = int64_t{v};
      break;
    }
    case kI64: {
      ASSIGN_OR_RETURN(int64_t v, c.Read<int64_t>("i64"));
      out.v = v;
      break;
    }
    case kU64: {
      ASSIGN_OR_RETURN(uint64_t v, c.Read<uint64_t>("u64"));
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return absl::InvalidArgumentError(absl::StrCat(path, ": u64 value ", v, " too large"));
      }
      out.v = static_cast<int64_t>(v);
      break;
    }
    case kF32: {
      ASSIGN_OR_RETURN(float v, c.Read<float>("f32"));
      out.v = double{v};
      break;
    }
    case kF64: {
      ASSIGN_OR_RETURN(double v, c.Read<double>("f64"));
      out.v = v;
      break;
    }
    case kBool: {
      ASSIGN_OR_RETURN(uint8_t v, c.Read<uint8_t>("bool"));
      out.v = v != 0;
      break;
    }
    case kString: {
      ASSIGN_OR_RETURN(out.v, c.ReadString("string value"));
      break;
    }
    case kArray: {
      if (depth > 4)
        return absl::InvalidArgumentError(absl::StrCat(path, ": arrays nest too deep"));
      ASSIGN_OR_RETURN(uint32_t elem, c.Read<uint32_t>("array element type"));
      ASSIGN_OR_RETURN(uint64_t n, c.Read<uint64_t>("array length"));
      // Every element takes at least one byte (strings at least 8): reject absurd counts early.
      const size_t min_size = elem == kString ? 8 : std::max<size_t>(ScalarSize(elem), 1);
      if (n > c.remaining() / min_size) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": array of ", n, " elements cannot fit in the ", c.remaining(),
                         " bytes left at offset ", c.pos()));
      }
      auto arr = std::make_shared<GgufValue::Array>();
      arr->items.reserve(n);
      for (uint64_t i = 0; i < n; ++i) {
        ASSIGN_OR_RETURN(GgufValue v, ReadValue(c, elem, path, depth + 1));
        arr->items.push_back(std::move(v));
      }
      out.v = std::move(arr);
      break;
    }
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": unknown metadata value type ", type, " at offset ", c.pos()));
  }
  return out;
}

size_t GgmlTypeSize(int type) {
  switch (type) {
    case 0:
      return 4;  // F32
    case 1:
      return 2;  // F16
    case 30:
      return 2;  // BF16
    default:
      return 0;
  }
}

}  // namespace

std::string GgmlTypeName(int type) {
  static const char* kNames[] = {"F32",  "F16",  "Q4_0", "Q4_1", "Q4_2", "Q4_3", "Q5_0", "Q5_1",
                                 "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K"};
  if (type >= 0 && type < 16) return kNames[type];
  if (type == 30) return "BF16";
  return absl::StrCat("type ", type);
}

absl::StatusOr<std::unique_ptr<GgufFile>> GgufFile::Open(const std::string& path) {
  ASSIGN_OR_RETURN(auto mapped, MappedFile::Open(path));
  std::unique_ptr<GgufFile> g(new GgufFile(std::move(mapped)));
  Cursor c(g->file_->path(), g->file_->data(), g->file_->size());
  ASSIGN_OR_RETURN(uint32_t magic, c.Read<uint32_t>("magic"));
  if (std::memcmp(&magic, "GGUF", 4) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a GGUF file (bad magic)"));
  }
  ASSIGN_OR_RETURN(g->version_, c.Read<uint32_t>("version"));
  if (g->version_ != 2 && g->version_ != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": GGUF version ", g->version_, " is not supported (2 or 3)"));
  }
  ASSIGN_OR_RETURN(uint64_t n_tensors, c.Read<uint64_t>("tensor count"));
  ASSIGN_OR_RETURN(uint64_t n_kv, c.Read<uint64_t>("metadata count"));
  // A tensor info takes >= 24 bytes, a key/value >= 12: counts beyond the file are corrupt.
  if (n_tensors > c.remaining() / 24 || n_kv > c.remaining() / 12) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tensor count ", n_tensors, " / metadata count ", n_kv,
                     " cannot fit in a file of ", g->file_->size(), " bytes"));
  }
  for (uint64_t i = 0; i < n_kv; ++i) {
    ASSIGN_OR_RETURN(std::string key, c.ReadString("metadata key"));
    ASSIGN_OR_RETURN(uint32_t type, c.Read<uint32_t>("metadata type"));
    ASSIGN_OR_RETURN(GgufValue v, ReadValue(c, type, path, 0));
    g->kv_[key] = std::move(v);
  }
  struct Info {
    std::string name;
    std::vector<int64_t> ne;
    int type;
    uint64_t offset;
  };
  std::vector<Info> infos;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    Info info;
    ASSIGN_OR_RETURN(info.name, c.ReadString("tensor name"));
    ASSIGN_OR_RETURN(uint32_t n_dims, c.Read<uint32_t>("tensor n_dims"));
    if (n_dims < 1 || n_dims > 4) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", info.name, "' has ",
                                                     n_dims, " dimensions (1..4 allowed)"));
    }
    for (uint32_t d = 0; d < n_dims; ++d) {
      ASSIGN_OR_RETURN(uint64_t ne, c.Read<uint64_t>("tensor dimension"));
      if (ne > (1ull << 40)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tensor '", info.name, "' dimension ", ne, " is absurd"));
      }
      info.ne.push_back(static_cast<int64_t>(ne));
    }
    ASSIGN_OR_RETURN(uint32_t type, c.Read<uint32_t>("tensor type"));
    info.type = static_cast<int>(type);
    ASSIGN_OR_RETURN(info.offset, c.Read<uint64_t>("tensor offset"));
    infos.push_back(std::move(info));
  }
  uint64_t alignment = 32;
  if (auto a = g->GetInt("general.alignment"); a.ok()) {
    if (*a <= 0 || (*a & (*a - 1)) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": general.alignment ", *a, " is not a power of two"));
    }
    alignment = static_cast<uint64_t>(*a);
  }
  const uint64_t data_start = (c.pos() + alignment - 1) / alignment * alignment;
  const uint64_t file_size = g->file_->size();
  for (Info& info : infos) {
    GgufTensor t;
    t.name = info.name;
    t.ggml_type = info.type;
    t.ne = info.ne;
    uint64_t numel = 1;
    for (int64_t ne : info.ne) numel *= static_cast<uint64_t>(ne);
    const size_t es = GgmlTypeSize(info.type);
    if (es > 0) {
      t.nbytes = static_cast<size_t>(numel * es);
      if (data_start > file_size || info.offset > file_size - data_start ||
          t.nbytes > file_size - data_start - info.offset) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": tensor '", info.name, "' (", t.nbytes, " bytes at data offset ",
                         info.offset, ") runs past the end of the file (", file_size, " bytes)"));
      }
      t.data = g->file_->data() + data_start + info.offset;
    }
    g->tensor_order_.push_back(info.name);
    g->tensors_[info.name] = std::move(t);
  }
  return g;
}

absl::StatusOr<const GgufValue*> GgufFile::Find(const std::string& key) const {
  auto it = kv_.find(key);
  if (it == kv_.end()) {
    return absl::NotFoundError(absl::StrCat(path(), ": metadata key '", key, "' is missing"));
  }
  return &it->second;
}

absl::StatusOr<int64_t> GgufFile::GetInt(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Find(key));
  if (auto* i = std::get_if<int64_t>(&v->v)) return *i;
  return absl::InvalidArgumentError(absl::StrCat(path(), ": '", key, "' is not an integer"));
}

absl::StatusOr<double> GgufFile::GetFloat(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Find(key));
  if (auto* d = std::get_if<double>(&v->v)) return *d;
  if (auto* i = std::get_if<int64_t>(&v->v)) return static_cast<double>(*i);
  return absl::InvalidArgumentError(absl::StrCat(path(), ": '", key, "' is not a number"));
}

absl::StatusOr<std::string> GgufFile::GetString(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Find(key));
  if (auto* s = std::get_if<std::string>(&v->v)) return *s;
  return absl::InvalidArgumentError(absl::StrCat(path(), ": '", key, "' is not a string"));
}

namespace {
template <typename T, typename Fn>
absl::StatusOr<std::vector<T>> ArrayOf(const GgufValue* v, const std::string& what, Fn convert) {
  auto* arr = std::get_if<std::shared_ptr<GgufValue::Array>>(&v->v);
  if (arr == nullptr) return absl::InvalidArgumentError(what + " is not an array");
  std::vector<T> out;
  out.reserve((*arr)->items.size());
  for (const GgufValue& item : (*arr)->items) {
    std::optional<T> x = convert(item);
    if (!x) return absl::InvalidArgumentError(what + " has an element of the wrong type");
    out.push_back(*x);
  }
  return out;
}
}  // namespace

absl::StatusOr<std::vector<std::string>> GgufFile::GetStringArray(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Find(key));
  return ArrayOf<std::string>(v, absl::StrCat(path(), ": '", key, "'"),
                              [](const GgufValue& g) -> std::optional<std::string> {
                                if (auto* s = std::get_if<std::string>(&g.v)) return *s;
                                return std::nullopt;
                              });
}

absl::StatusOr<std::vector<double>> GgufFile::GetFloatArray(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Find(key));
  return ArrayOf<double>(v, absl::StrCat(path(), ": '", key, "'"),
                         [](const GgufValue& g) -> std::optional<double> {
                           if (auto* d = std::get_if<double>(&g.v)) return *d;
                           if (auto* i = std::get_if<int64_t>(&g.v)) return double(*i);
                           return std::nullopt;
                         });
}

absl::StatusOr<std::vector<int64_t>> GgufFile::GetIntArray(const std::string& key) const {
  ASSIGN_OR_RETURN(const GgufValue* v, Find(key));
  return ArrayOf<int64_t>(v, absl::StrCat(path(), ": '", key, "'"),
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
  if (it->second.data == nullptr) {
    return absl::UnimplementedError(absl::StrCat(
        path(), ": tensor '", name, "' has ggml type ", GgmlTypeName(it->second.ggml_type), " (",
        it->second.ggml_type, "), which is not supported; convert an F32/F16 GGUF"));
  }
  return it->second;
}

}  // namespace specdec::io
