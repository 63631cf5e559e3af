#include "common/io/dtype.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace specdec::io {
namespace {

struct Info {
  DType dtype;
  std::string_view name;
  size_t size;
};
constexpr Info kInfos[] = {
    {DType::kF64, "F64", 8},   {DType::kF32, "F32", 4}, {DType::kF16, "F16", 2},
    {DType::kBF16, "BF16", 2}, {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},
    {DType::kI16, "I16", 2},   {DType::kI8, "I8", 1},   {DType::kU8, "U8", 1},
    {DType::kBool, "BOOL", 1},
};

}  // namespace

size_t DTypeSize(DType d) {
  for (const Info& i : kInfos) {
    if (i.dtype == d) return i.size;
  }
  return 0;
}

std::string_view DTypeName(DType d) {
  for (const Info& i : kInfos) {
    if (i.dtype == d) return i.name;
  }
  return "?";
}

absl::StatusOr<DType> ParseSafetensorsDType(std::string_view name) {
  for (const Info& i : kInfos) {
    if (name == i.name) return i.dtype;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown dtype '", std::string(name), "'"));
}

}  // namespace specdec::io
