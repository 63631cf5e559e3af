// Reader for GGUF files (llama.cpp's format, versions 2 and 3, little-endian): all metadata value
// types, tensor infos of every ggml type, and tensor data for F32, F16, BF16 and the block types of
// gguf_dequantize.h (Q8_0, Q6_K, Q5_K, Q5_0, Q5_1, Q4_K, Q4_0, Q4_1). Every count, length,
// dimension and offset read from the file is validated before use.
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

// ggml tensor types this reader can hand out data for (and the block types of
// gguf_dequantize.h, whose blocks Dequantize turns into floats).
inline constexpr int kGgmlTypeF32 = 0;
inline constexpr int kGgmlTypeF16 = 1;
inline constexpr int kGgmlTypeBF16 = 30;

// One metadata value: integers of every width as int64 (uint64 values above INT64_MAX are rejected
// at Open), float32/float64 as double, bool, string, or an array of values of one element type
// (possibly arrays themselves, nested at most 4 deep).
struct GgufValue {
  struct Array;
  std::variant<int64_t, double, bool, std::string, std::shared_ptr<Array>> v;
};
struct GgufValue::Array {
  uint32_t element_type = 0;  // the GGUF value type code of the elements
  std::vector<GgufValue> items;
};

// A tensor info as listed in the file, whatever its type. `offset` is relative to the start of the
// aligned data section.
struct GgufTensorInfo {
  std::string name;
  int n_dims = 0;
  std::vector<int64_t> ne;  // n_dims entries; ne[0] is the fastest-varying dimension
  int ggml_type = 0;
  uint64_t offset = 0;
};

// A readable tensor (F32, F16, BF16 or a block type): [data, data + nbytes) lies inside the file
// mapping and holds prod(ne) elements (a block type: in whole blocks), row-major with
// ne[0] fastest; valid while the GgufFile lives. `data` is aligned to the file's alignment
// relative to the mapping start.
struct GgufTensor {
  std::string name;
  int ggml_type = 0;        // kGgmlTypeF32, kGgmlTypeF16, kGgmlTypeBF16 or a block type
  std::vector<int64_t> ne;  // ne[0] is the fastest-varying dimension
  const std::byte* data = nullptr;
  size_t nbytes = 0;
};

// A memory-mapped GGUF file validated at Open; immutable afterwards, so thread-safe.
class GgufFile {
 public:
  // NOT_FOUND if missing; INVALID_ARGUMENT naming the file and the problem for a bad magic, an
  // unsupported version (only 2 and 3; big-endian files are recognized and rejected), counts that
  // cannot fit in the file, strings or arrays running past the end, unknown value types, repeated
  // keys or tensor names, n_dims outside 1..4, a bad general.alignment, misaligned tensor offsets,
  // or tensor data outside the file. Tensors of other quantized types (Q2_K, Q3_K, Q8_K, the
  // I-quants) are listed, with their offset checked against the data section, but their data is
  // not readable.
  static absl::StatusOr<std::unique_ptr<GgufFile>> Open(const std::string& path);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // Absolute file offset of the aligned data section.
  uint64_t data_offset() const { return data_offset_; }

  // Typed metadata getters: NOT_FOUND naming the key if absent, INVALID_ARGUMENT if the value has
  // another type. GetInt accepts every integer width; GetFloat accepts floats and integers; the
  // array getters accept arrays whose elements convert the same way.
  bool Has(const std::string& key) const { return kv_.count(key) > 0; }
  absl::StatusOr<int64_t> GetInt(const std::string& key) const;
  absl::StatusOr<double> GetFloat(const std::string& key) const;
  absl::StatusOr<bool> GetBool(const std::string& key) const;
  absl::StatusOr<std::string> GetString(const std::string& key) const;
  absl::StatusOr<std::vector<std::string>> GetStringArray(const std::string& key) const;
  absl::StatusOr<std::vector<double>> GetFloatArray(const std::string& key) const;
  absl::StatusOr<std::vector<int64_t>> GetIntArray(const std::string& key) const;
  // The raw value (for nested arrays); NOT_FOUND if absent.
  absl::StatusOr<const GgufValue*> GetValue(const std::string& key) const;
  // All metadata keys, sorted.
  std::vector<std::string> Keys() const;

  // Tensor infos in file order, and their names in the same order.
  const std::vector<GgufTensorInfo>& tensor_infos() const { return infos_; }
  const std::vector<std::string>& tensor_names() const { return tensor_order_; }
  bool HasTensor(const std::string& name) const { return tensors_.count(name) > 0; }
  // NOT_FOUND for an unknown name; UNIMPLEMENTED for the types it cannot read, e.g.
  // "<path>: tensor 'x': ggml type Q2_K (10) is not supported (F32, F16, ... are); ...".
  absl::StatusOr<GgufTensor> Tensor(const std::string& name) const;
  const std::string& path() const { return file_->path(); }

 private:
  explicit GgufFile(std::unique_ptr<MappedFile> f) : file_(std::move(f)) {}

  std::unique_ptr<MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::map<std::string, GgufValue> kv_;
  std::vector<GgufTensorInfo> infos_;
  std::map<std::string, GgufTensor> tensors_;  // data == nullptr for unreadable types
  std::vector<std::string> tensor_order_;
};

// "F32", "F16", "Q4_0", ..., "BF16"; "type <n>" for codes this reader does not know.
std::string GgmlTypeName(int type);

// Storage of a ggml type: `block` elements take `bytes` bytes ({1, 4} for F32, {32, 34} for
// Q8_0, ...); {0, 0} for codes this reader does not know. The one table of ggml's sizes: the
// reader checks tensors against it and the dequantizer reads blocks by it.
struct GgmlTypeLayout {
  uint64_t block = 0;
  uint64_t bytes = 0;
};
GgmlTypeLayout GgmlTypeLayoutOf(int type);

}  // namespace specdec::io

#endif  // SPECDEC_COMMON_IO_GGUF_H_
