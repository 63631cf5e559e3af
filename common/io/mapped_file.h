// Read-only memory mapping of a whole file.
#ifndef SPECDEC_COMMON_IO_MAPPED_FILE_H_
#define SPECDEC_COMMON_IO_MAPPED_FILE_H_

#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/statusor.h"

namespace specdec::io {

// A read-only, private mapping of a whole regular file whose bytes stay valid for the object's
// lifetime; immutable after Open, so thread-safe.
//
// Contract: the file must not be truncated by another process while mapped (reading a page past
// the new end raises SIGBUS, which no check here can prevent).
class MappedFile {
 public:
  // NOT_FOUND if the file cannot be opened (PERMISSION_DENIED if unreadable), INVALID_ARGUMENT if
  // it is not a regular file, INTERNAL if mmap fails. An empty file is fine: size() == 0 and data()
  // == nullptr.
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const std::byte* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::string path_;
  const std::byte* data_;
  size_t size_;
};

}  // namespace specdec::io

#endif  // SPECDEC_COMMON_IO_MAPPED_FILE_H_
