// Element types of tensors in checkpoint files.
#ifndef SPECDEC_COMMON_IO_DTYPE_H_
#define SPECDEC_COMMON_IO_DTYPE_H_

#include <cstddef>
#include <string_view>

#include "absl/status/statusor.h"

namespace specdec::io {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

size_t DTypeSize(DType d);
const char* DTypeName(DType d);  // safetensors spelling: "F32", "BF16", ...
absl::StatusOr<DType> ParseSafetensorsDType(std::string_view name);

}  // namespace specdec::io

#endif  // SPECDEC_COMMON_IO_DTYPE_H_
