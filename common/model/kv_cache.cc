#include "common/model/kv_cache.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace specdec::model {

KvCache::KvCache(const KvCacheShape& shape) : shape_(shape) {
  keys_.resize(shape_.num_layers);
  values_.resize(shape_.num_layers);
}

void KvCache::Reserve(int64_t extra) {
  const int64_t need = length_ + extra;
  if (need <= capacity_) return;
  int64_t new_cap = std::max<int64_t>({need, capacity_ * 2, 64});
  const auto options = at::TensorOptions().dtype(shape_.dtype).device(shape_.device);
  attachment_.reset();  // it holds the old buffers' addresses
  for (int64_t l = 0; l < shape_.num_layers; ++l) {
    // Zeros, not garbage: a pass that attends over the whole capacity masks the unwritten slots,
    // and a masked NaN would still poison the sums (0 * NaN).
    at::Tensor k = at::zeros({shape_.num_kv_heads, new_cap, shape_.head_dim}, options);
    at::Tensor v = at::zeros({shape_.num_kv_heads, new_cap, shape_.head_dim}, options);
    if (length_ > 0) {
      k.narrow(1, 0, length_).copy_(keys_[l].narrow(1, 0, length_));
      v.narrow(1, 0, length_).copy_(values_[l].narrow(1, 0, length_));
    }
    keys_[l] = std::move(k);
    values_[l] = std::move(v);
  }
  capacity_ = new_cap;
}

void KvCache::WriteAt(int64_t layer, int64_t slot, const at::Tensor& k, const at::Tensor& v) {
  const int64_t n = k.size(0);
  keys_[layer].narrow(1, slot, n).copy_(k.transpose(0, 1));
  values_[layer].narrow(1, slot, n).copy_(v.transpose(0, 1));
}

at::Tensor KvCache::Keys(int64_t layer, int64_t n) const { return keys_[layer].narrow(1, 0, n); }
at::Tensor KvCache::Values(int64_t layer, int64_t n) const {
  return values_[layer].narrow(1, 0, n);
}

void* KvCache::KeyData(int64_t layer) const { return keys_[layer].data_ptr(); }
void* KvCache::ValueData(int64_t layer) const { return values_[layer].data_ptr(); }

absl::Status KvCache::Truncate(int64_t new_length) {
  if (new_length < 0 || new_length > length_) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot truncate a KV cache of length ", length_, " to ", new_length));
  }
  length_ = new_length;
  return absl::OkStatus();
}

absl::Status KvCache::KeepRows(int64_t base, std::span<const int64_t> rows) {
  if (base < 0 || base > length_) {
    return absl::InvalidArgumentError(
        absl::StrCat("KeepRows base ", base, " outside cache length ", length_));
  }
  int64_t prev = base - 1;
  for (int64_t r : rows) {
    if (r <= prev || r >= length_) {
      return absl::InvalidArgumentError(absl::StrCat(
          "KeepRows rows must be strictly increasing within [", base, ", ", length_, "), got ", r));
    }
    prev = r;
  }
  // Rows are increasing and >= base, so moving row r to base+i (<= r) never overwrites a row
  // that is still to be read.
  for (size_t i = 0; i < rows.size(); ++i) {
    const int64_t dst = base + static_cast<int64_t>(i);
    if (rows[i] == dst) continue;
    for (int64_t l = 0; l < shape_.num_layers; ++l) {
      keys_[l].select(1, dst).copy_(keys_[l].select(1, rows[i]));
      values_[l].select(1, dst).copy_(values_[l].select(1, rows[i]));
    }
  }
  length_ = base + static_cast<int64_t>(rows.size());
  return absl::OkStatus();
}

int64_t KvCache::allocated_bytes() const {
  return 2 * shape_.num_layers * shape_.num_kv_heads * capacity_ * shape_.head_dim *
         static_cast<int64_t>(c10::elementSize(shape_.dtype));
}

int64_t KvCache::used_bytes() const {
  return 2 * shape_.num_layers * shape_.num_kv_heads * length_ * shape_.head_dim *
         static_cast<int64_t>(c10::elementSize(shape_.dtype));
}

}  // namespace specdec::model
