// safetensors checkpoints: a memory-mapped reader (single file or sharded with an index) and a
// writer. Every size, offset and dtype read from a file is validated before use.
#ifndef SPECDEC_COMMON_IO_SAFETENSORS_H_
#define SPECDEC_COMMON_IO_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/io/dtype.h"
#include "common/io/mapped_file.h"

namespace specdec::io {

// A tensor inside a mapped file; valid while the file object that produced it lives.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  int64_t numel() const;
};

// One safetensors file. Immutable after Open, so thread-safe.
class SafetensorsFile {
 public:
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_->path(); }

 private:
  explicit SafetensorsFile(std::unique_ptr<MappedFile> file) : file_(std::move(file)) {}
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face checkpoint directory: `model.safetensors`, or `model.safetensors.index.json`
// whose weight_map names the shard of every tensor. Immutable after Open, so thread-safe.
class Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);
  // NOT_FOUND naming the tensor and the directory.
  absl::StatusOr<TensorView> Get(const std::string& name) const;
  bool Has(const std::string& name) const;
  std::vector<std::string> Names() const;  // sorted
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;
};

// Writes a safetensors file (header padded with spaces to 8-byte alignment) to `path`.tmp, then
// renames it over `path`. INVALID_ARGUMENT if a tensor's byte size does not match its shape or a
// name repeats.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace specdec::io

#endif  // SPECDEC_COMMON_IO_SAFETENSORS_H_
