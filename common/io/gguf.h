// Reader for GGUF files (llama.cpp's format, versions 2 and 3): metadata and F32/F16/BF16 tensors.
#ifndef SPECDEC_COMMON_IO_GGUF_H_
#define SPECDEC_COMMON_IO_GGUF_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "absl/status/statusor.h"
#include "common/io/mapped_file.h"

namespace specdec::io {

// One metadata value. Integers of every width are held as int64 (uint64 values above INT64_MAX
// are rejected), floats as double; arrays hold values of one element type.
struct GgufValue {
  struct Array;
  std::variant<int64_t, double, bool, std::string, std::shared_ptr<Array>> v;
};
struct GgufValue::Array {
  std::vector<GgufValue> items;
};

struct GgufTensor {
  std::string name;
  int ggml_type = 0;        // 0 F32, 1 F16, 30 BF16; others listed but not readable
  std::vector<int64_t> ne;  // ne[0] is the fastest-varying dimension
  const std::byte* data = nullptr;
  size_t nbytes = 0;
};

// A parsed GGUF file; immutable after Open, so thread-safe.
class GgufFile {
 public:
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);

  uint32_t version() const { return version_; }
  bool Has(const std::string& key) const { return kv_.count(key) > 0; }
  absl::StatusOr<int64_t> GetInt(const std::string& key) const;
  absl::StatusOr<double> GetFloat(const std::string& key) const;  // also accepts integers
  absl::StatusOr<std::string> GetString(const std::string& key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(const std::string& key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(const std::string& key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(const std::string& key) const;

  const std::vector<std::string>& tensor_names() const { return tensor_order_; }
  // UNIMPLEMENTED for quantized types; NOT_FOUND for unknown names.
  absl::StatusOr<GgufTensor> Tensor(const std::string& name) const;
  const std::string& path() const { return file_->path(); }

 private:
  explicit GgufFile(std::unique_ptr<MappedFile> f) : file_(std::move(f)) {}
  absl::StatusOr<const GgufValue*> Find(const std::string& key) const;

  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::map<std::string, GgufTensor> tensors_;
  std::vector<std::string> tensor_order_;
};

std::string GgmlTypeName(int type);

}  // namespace specdec::io

#endif  // SPECDEC_COMMON_IO_GGUF_H_
