// Conversions between specdec.v1.Tensor messages and float vectors, with validation.
#ifndef SPECDEC_SERVICES_COMMON_TENSOR_PROTO_H_
#define SPECDEC_SERVICES_COMMON_TENSOR_PROTO_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "specdec/v1/common.pb.h"

namespace specdec::services {

// Decodes F32/BF16/F16 data into floats. INVALID_ARGUMENT (naming `field`) when the dtype is
// unset/unknown, a dimension is negative, or the byte size does not match the shape.
absl::StatusOr<std::vector<float>> TensorToFloats(const v1::Tensor& t, const std::string& field);

// Encodes floats with the given shape as F32 or BF16 (round to nearest even).
v1::Tensor FloatsToTensor(std::span<const float> values, std::span<const int64_t> shape,
                          v1::DType dtype);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_TENSOR_PROTO_H_
