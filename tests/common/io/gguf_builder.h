// Test-only builder of little-endian GGUF byte strings, for hand-made valid and malformed files.
#ifndef SPECDEC_TESTS_COMMON_IO_GGUF_BUILDER_H_
#define SPECDEC_TESTS_COMMON_IO_GGUF_BUILDER_H_

#include <cstdint>
#include <string>
#include <vector>

namespace specdec::io::testing {

template <typename T>
std::string Le(T v) {
  return std::string(reinterpret_cast<const char*>(&v), sizeof(T));
}
inline std::string Str(const std::string& s) { return Le<uint64_t>(s.size()) + s; }
inline std::string Header(uint64_t tensors, uint64_t kv, uint32_t version = 3) {
  return std::string("GGUF") + Le<uint32_t>(version) + Le<uint64_t>(tensors) + Le<uint64_t>(kv);
}

// Collects metadata and tensors and lays them out as GGUF does: header, key/values, tensor infos,
// padding to `alignment`, then each tensor's bytes padded to `alignment`. Not thread-safe.
class GgufBuilder {
 public:
  explicit GgufBuilder(uint32_t version = 3) : version_(version) {}

  // Raw key/value: `type` is the GGUF value type code and `value` its encoding.
  GgufBuilder& Kv(const std::string& key, uint32_t type, const std::string& value) {
    kv_ += Str(key) + Le<uint32_t>(type) + value;
    ++n_kv_;
    return *this;
  }
  GgufBuilder& U32(const std::string& key, uint32_t v) { return Kv(key, 4, Le(v)); }
  GgufBuilder& F32(const std::string& key, float v) { return Kv(key, 6, Le(v)); }
  GgufBuilder& String(const std::string& key, const std::string& v) { return Kv(key, 8, Str(v)); }
  GgufBuilder& StringArray(const std::string& key, const std::vector<std::string>& v) {
    std::string enc = Le<uint32_t>(8) + Le<uint64_t>(v.size());
    for (const auto& s : v) enc += Str(s);
    return Kv(key, 9, enc);
  }
  GgufBuilder& F32Array(const std::string& key, const std::vector<float>& v) {
    std::string enc = Le<uint32_t>(6) + Le<uint64_t>(v.size());
    for (float f : v) enc += Le(f);
    return Kv(key, 9, enc);
  }
  GgufBuilder& I32Array(const std::string& key, const std::vector<int32_t>& v) {
    std::string enc = Le<uint32_t>(5) + Le<uint64_t>(v.size());
    for (int32_t i : v) enc += Le(i);
    return Kv(key, 9, enc);
  }
  GgufBuilder& Alignment(uint32_t a) {
    alignment_ = a;
    return U32("general.alignment", a);
  }
  // `ne` with ne[0] fastest; `bytes` is the tensor's data.
  GgufBuilder& Tensor(const std::string& name, const std::vector<uint64_t>& ne, uint32_t type,
                      const std::string& bytes) {
    tensors_.push_back({name, ne, type, bytes});
    return *this;
  }

  std::string Build() const {
    std::string out = Header(tensors_.size(), n_kv_, version_) + kv_;
    uint64_t offset = 0;
    std::string data;
    for (const auto& t : tensors_) {
      out += Str(t.name) + Le<uint32_t>(t.ne.size());
      for (uint64_t d : t.ne) out += Le(d);
      out += Le<uint32_t>(t.type) + Le<uint64_t>(offset);
      data += t.bytes;
      data.resize((data.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
      offset = data.size();
    }
    out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, '\0');
    return out + data;
  }

 private:
  struct T {
    std::string name;
    std::vector<uint64_t> ne;
    uint32_t type;
    std::string bytes;
  };
  uint32_t version_;
  uint32_t alignment_ = 32;
  uint64_t n_kv_ = 0;
  std::string kv_;
  std::vector<T> tensors_;
};

}  // namespace specdec::io::testing

#endif  // SPECDEC_TESTS_COMMON_IO_GGUF_BUILDER_H_
