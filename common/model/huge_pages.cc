#include "common/model/huge_pages.h"

#include <ATen/core/Tensor.h>
#include <ATen/ops/from_blob.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>

namespace specdec::model {
namespace {

constexpr int64_t kHugePage = int64_t{2} << 20;
constexpr int64_t kTensorAlignment = 64;

int64_t RoundUp(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

// One anonymous mapping, unmapped when the last tensor in it goes.
class Region {
 public:
  static std::shared_ptr<Region> Map(int64_t bytes) {
    const int64_t size = RoundUp(bytes, kHugePage);
    // Map one huge page more than needed and trim both ends, so the region starts on a 2 MiB
    // boundary and every 2 MiB of it can be one huge page.
    void* raw =
        mmap(nullptr, size + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (raw == MAP_FAILED) return nullptr;
    const auto start = reinterpret_cast<uintptr_t>(raw);
    const uintptr_t aligned = RoundUp(static_cast<int64_t>(start), kHugePage);
    if (aligned > start) munmap(raw, aligned - start);
    const uintptr_t tail = aligned + size, end = start + size + kHugePage;
    if (end > tail) munmap(reinterpret_cast<void*>(tail), end - tail);
    auto* base = reinterpret_cast<char*>(aligned);
    madvise(base, size, MADV_HUGEPAGE);  // advice only: without it the region still works
    return std::shared_ptr<Region>(new Region(base, size));
  }
  ~Region() { munmap(base_, size_); }
  char* base() const { return base_; }

 private:
  Region(char* base, int64_t size) : base_(base), size_(size) {}
  char* base_;
  int64_t size_;
};

bool Movable(const at::Tensor& t) {
  return t.defined() && t.device().is_cpu() && t.is_contiguous() && t.storage_offset() == 0 &&
         static_cast<int64_t>(t.storage().nbytes()) == static_cast<int64_t>(t.nbytes()) &&
         t.nbytes() > 0;
}

}  // namespace

bool HugePagesAvailable() {
  if (const char* env = std::getenv("SPECDEC_HUGE_PAGES");
      env != nullptr && std::string(env) == "0")
    return false;
  std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  if (!std::getline(mode, line)) return false;
  return line.find("[never]") == std::string::npos;
}

int64_t MoveIntoHugePages(const std::vector<at::Tensor*>& tensors) {
  if (!HugePagesAvailable()) return 0;
  std::map<const void*, int64_t> offsets;  // each storage once, by its data pointer
  int64_t total = 0;
  for (const at::Tensor* t : tensors) {
    if (!Movable(*t) || offsets.count(t->data_ptr()) > 0) continue;
    offsets[t->data_ptr()] = total;
    total += RoundUp(static_cast<int64_t>(t->nbytes()), kTensorAlignment);
  }
  if (total == 0) return 0;
  std::shared_ptr<Region> region = Region::Map(total);
  if (region == nullptr) return 0;
  std::map<const void*, at::Tensor> moved;
  for (at::Tensor* t : tensors) {
    if (!Movable(*t)) continue;
    const void* old = t->data_ptr();
    auto it = moved.find(old);
    if (it == moved.end()) {
      char* dst = region->base() + offsets.at(old);
      std::memcpy(dst, old, t->nbytes());
      at::Tensor copy = at::from_blob(
          dst, t->sizes(), [region](void*) {}, t->options());
      it = moved.emplace(old, std::move(copy)).first;
    }
    *t = it->second;
  }
  return total;
}

}  // namespace specdec::model
