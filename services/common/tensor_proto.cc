#include "services/common/tensor_proto.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/strings/str_cat.h"

namespace specdec::services {
namespace {

float Bf16ToFloat(uint16_t v) {
  uint32_t bits = static_cast<uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t FloatToBf16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  if (std::isnan(f)) return 0x7fc0;
  const uint32_t rounding = 0x7fff + ((bits >> 16) & 1);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}

float F16ToFloat(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  }
  return sign ? -v : v;
}

}  // namespace

absl::StatusOr<std::vector<float>> TensorToFloats(const v1::Tensor& t, const std::string& field) {
  int64_t n = 1;
  for (int64_t d : t.shape()) {
    if (d < 0 || (d > 0 && n > std::numeric_limits<int64_t>::max() / 8 / d)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": shape has a negative or too large dimension"));
    }
    n *= d;
  }
  size_t elem = 0;
  switch (t.dtype()) {
    case v1::F32:
      elem = 4;
      break;
    case v1::BF16:
    case v1::F16:
      elem = 2;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(field, ": dtype must be F32, BF16 or F16"));
  }
  if (t.data().size() != static_cast<size_t>(n) * elem) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": ", t.data().size(),
                                                   " bytes do not match shape (", n,
                                                   " elements of ", elem, " bytes)"));
  }
  std::vector<float> out(static_cast<size_t>(n));
  const char* p = t.data().data();
  for (int64_t i = 0; i < n; ++i) {
    if (elem == 4) {
      std::memcpy(&out[i], p + 4 * i, 4);
    } else {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      out[i] = t.dtype() == v1::BF16 ? Bf16ToFloat(h) : F16ToFloat(h);
    }
  }
  return out;
}

v1::Tensor FloatsToTensor(std::span<const float> values, std::span<const int64_t> shape,
                          v1::DType dtype) {
  v1::Tensor t;
  t.set_dtype(dtype == v1::BF16 ? v1::BF16 : v1::F32);
  for (int64_t d : shape) t.add_shape(d);
  std::string* data = t.mutable_data();
  if (t.dtype() == v1::F32) {
    data->assign(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  } else {
    data->resize(values.size() * 2);
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t h = FloatToBf16(values[i]);
      std::memcpy(data->data() + 2 * i, &h, 2);
    }
  }
  return t;
}

}  // namespace specdec::services
