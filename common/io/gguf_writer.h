// Writer of GGUF files (version 3, little-endian, the layout llama.cpp reads): typed metadata, then
// tensor infos, then each tensor's bytes at an aligned offset.
#ifndef SPECDEC_COMMON_IO_GGUF_WRITER_H_
#define SPECDEC_COMMON_IO_GGUF_WRITER_H_

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace specdec::io {

// Collects metadata and tensors, then writes them in one pass. Tensor data is referenced, not
// copied: it must stay valid until Write returns. Keys and tensor names must be unique (Write
// returns INVALID_ARGUMENT naming a repeated one). Not thread-safe.
class GgufWriter {
 public:
  void SetString(const std::string& key, const std::string& value);
  void SetU32(const std::string& key, uint32_t value);
  void SetI32(const std::string& key, int32_t value);
  void SetF32(const std::string& key, float value);
  void SetBool(const std::string& key, bool value);
  void SetStringArray(const std::string& key, const std::vector<std::string>& values);
  void SetF32Array(const std::string& key, const std::vector<float>& values);
  void SetI32Array(const std::string& key, const std::vector<int32_t>& values);

  // `ne` lists the dimensions fastest first (GGUF order: the reverse of a row-major shape);
  // `data` holds prod(ne) elements of `ggml_type` (kGgmlTypeF32, F16 or BF16 of gguf.h).
  void AddTensor(const std::string& name, std::vector<int64_t> ne, int ggml_type,
                 std::span<const std::byte> data);

  // Writes the file (replacing it): INVALID_ARGUMENT for a repeated key or tensor name, a tensor
  // whose byte count does not match its shape and type, or an unsupported type; PERMISSION_DENIED
  // or DATA_LOSS when the file cannot be written.
  absl::Status Write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    int ggml_type;
    std::span<const std::byte> data;
  };
  void AddKv(const std::string& key, uint32_t type, const std::string& encoded);

  std::vector<std::string> keys_;
  std::string kv_;  // encoded key/value pairs, in insertion order
  std::vector<Tensor> tensors_;
};

}  // namespace specdec::io

#endif  // SPECDEC_COMMON_IO_GGUF_WRITER_H_
