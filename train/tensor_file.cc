#include "train/tensor_file.h"

#include <ATen/ATen.h>

#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/io/safetensors.h"
#include "common/util/status_macros.h"

namespace specdec::train {
namespace {

absl::StatusOr<io::DType> ToIoDType(at::ScalarType t) {
  switch (t) {
    case at::kFloat:
      return io::DType::kF32;
    case at::kBFloat16:
      return io::DType::kBF16;
    case at::kHalf:
      return io::DType::kF16;
    case at::kLong:
      return io::DType::kI64;
    case at::kInt:
      return io::DType::kI32;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unsupported tensor dtype ", std::string(c10::toString(t))));
  }
}

absl::StatusOr<at::ScalarType> ToScalarType(io::DType t) {
  switch (t) {
    case io::DType::kF32:
      return at::kFloat;
    case io::DType::kBF16:
      return at::kBFloat16;
    case io::DType::kF16:
      return at::kHalf;
    case io::DType::kI64:
      return at::kLong;
    case io::DType::kI32:
      return at::kInt;
    default:
      return absl::InvalidArgumentError("unsupported safetensors dtype");
  }
}

}  // namespace

absl::Status SaveTensorMap(const std::string& path, const TensorMap& tensors,
                           std::optional<at::ScalarType> dtype,
                           const std::map<std::string, std::string>& metadata) {
  std::vector<at::Tensor> keep;
  std::vector<io::TensorToWrite> out;
  keep.reserve(tensors.size());
  try {
    for (const auto& [name, t] : tensors) {
      at::Tensor c = t.detach().to(at::kCPU);
      if (dtype && at::isFloatingType(c.scalar_type())) c = c.to(*dtype);
      c = c.contiguous();
      ASSIGN_OR_RETURN(io::DType dt, ToIoDType(c.scalar_type()));
      keep.push_back(c);
      io::TensorToWrite w;
      w.name = name;
      w.dtype = dt;
      w.shape.assign(c.sizes().begin(), c.sizes().end());
      w.data = std::span<const std::byte>(static_cast<const std::byte*>(c.data_ptr()),
                                          static_cast<size_t>(c.nbytes()));
      out.push_back(std::move(w));
    }
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(path, ": preparing tensors failed: ", e.what()));
  }
  return io::WriteSafetensors(path, out, metadata);
}

absl::StatusOr<TensorMap> LoadTensorMap(const std::string& path) {
  ASSIGN_OR_RETURN(auto file, io::SafetensorsFile::Open(path));
  TensorMap out;
  for (const auto& [name, view] : file->tensors()) {
    auto st = ToScalarType(view.dtype);
    if (!st.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "': ",
                                                                 st.status().message()));
    at::Tensor t = at::empty(view.shape, at::TensorOptions().dtype(*st));
    if (static_cast<size_t>(t.nbytes()) != view.nbytes) {
      return absl::InvalidArgumentError(absl::StrCat(path, ": tensor '", name, "' size mismatch"));
    }
    if (view.nbytes > 0) std::memcpy(t.data_ptr(), view.data, view.nbytes);
    out.emplace(name, std::move(t));
  }
  return out;
}

int64_t CountElements(const TensorMap& tensors) {
  int64_t n = 0;
  for (const auto& [name, t] : tensors) n += t.numel();
  return n;
}

}  // namespace specdec::train
