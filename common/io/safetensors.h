// safetensors checkpoints: a memory-mapped reader (one file, or a Hugging Face directory sharded
// with an index) and a writer. Every size, offset and dtype read from a file is validated before
// use; a malformed file yields INVALID_ARGUMENT naming the file, the tensor and the problem.
#ifndef SPECDEC_COMMON_IO_SAFETENSORS_H_
#define SPECDEC_COMMON_IO_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/io/dtype.h"
#include "common/io/mapped_file.h"

namespace specdec::io {

// A tensor inside a mapped file: `nbytes == numel() * DTypeSize(dtype)` and
// [data, data + nbytes) lies inside the mapping, which outlives the view only as long as the
// SafetensorsFile/Checkpoint that produced it lives. `data` is not guaranteed to be aligned to the
// element size (the format does not require it): copy with memcpy rather than casting. A scalar has
// an empty shape and numel() == 1; a tensor with a zero dimension has nbytes == 0.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;
  size_t nbytes = 0;
  int64_t numel() const;
};

// One safetensors file, memory-mapped and validated at Open; immutable afterwards, so thread-safe.
class SafetensorsFile {
 public:
  // NOT_FOUND if the file is missing; INVALID_ARGUMENT (message "<path>: ...") if it is malformed:
  // shorter than 8 bytes, header length beyond the file or above 100 MiB, header not a JSON object,
  // a tensor entry lacking dtype/shape/data_offsets, unknown dtype, negative or overflowing shape,
  // data_offsets not [begin, end] with begin <= end <= data section size, a byte size differing
  // from numel * dtype size, or overlapping tensor ranges.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);

  // Tensors by name; views valid while this object lives.
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }
  // The "__metadata__" string map (empty if absent).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return file_->path(); }

 private:
  explicit SafetensorsFile(std::unique_ptr<MappedFile> file) : file_(std::move(file)) {}
  std::unique_ptr<MappedFile> file_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face checkpoint directory, either `model.safetensors` or
// `model.safetensors.index.json` whose "weight_map" names the shard of every tensor; all files are
// opened and validated at Open and immutable afterwards, so thread-safe.
class Checkpoint {
 public:
  // The index wins when both layouts are present. NOT_FOUND if neither exists or the index names a
  // missing shard (the message names the index and the shard); INVALID_ARGUMENT for a malformed
  // index (not an object, non-string entries, shard names with '/', a tensor its shard lacks) or a
  // malformed shard.
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);

  // NOT_FOUND naming the tensor and the directory.
  absl::StatusOr<TensorView> Get(const std::string& name) const;
  bool Has(const std::string& name) const;
  // All tensor names, sorted.
  std::vector<std::string> Names() const;
  const std::string& dir() const { return dir_; }

 private:
  Checkpoint() = default;
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorView*> index_;
};

// One tensor for WriteSafetensors; `data` must hold exactly numel(shape) * DTypeSize(dtype) bytes
// in row-major order.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const std::byte> data;
};

// Writes a safetensors file: tensors laid out contiguously in the given order, header JSON padded
// with spaces so that 8 + header length is a multiple of 8. Writes `path`.tmp, then renames it over
// `path`, so readers never see a partial file. INVALID_ARGUMENT (nothing written) if a byte size
// does not match its shape and dtype, a dimension is negative, or a name is empty, repeated or
// "__metadata__".
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace specdec::io

#endif  // SPECDEC_COMMON_IO_SAFETENSORS_H_
