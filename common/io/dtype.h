// Element types of tensors in checkpoint files, with safetensors' spelling of each.
#ifndef SPECDEC_COMMON_IO_DTYPE_H_
#define SPECDEC_COMMON_IO_DTYPE_H_

#include <cstddef>
#include <string_view>

#include "absl/status/statusor.h"

namespace specdec::io {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };

// Bytes per element (1 for kBool).
size_t DTypeSize(DType dtype);
// safetensors spelling: "F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL".
std::string_view DTypeName(DType dtype);
// Inverse of DTypeName (case-sensitive); INVALID_ARGUMENT "unknown dtype '<name>'" otherwise.
absl::StatusOr<DType> ParseSafetensorsDType(std::string_view name);

}  // namespace specdec::io

#endif  // SPECDEC_COMMON_IO_DTYPE_H_
