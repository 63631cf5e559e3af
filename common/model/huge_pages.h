#ifndef SPECDEC_COMMON_MODEL_HUGE_PAGES_H_
#define SPECDEC_COMMON_MODEL_HUGE_PAGES_H_

// A decoding step on the CPU streams every weight once. With 4 KiB pages, a model larger than the
// TLB's reach (about 12 MiB on this project's CPUs) takes a page walk every 4 KiB of weights; on a
// virtual machine each walk is nested. Backing the weights with 2 MiB transparent huge pages
// removes almost all of them (see docs/design.md, "Weights on huge pages").

#include <cstdint>
#include <vector>

namespace at {
class Tensor;
}  // namespace at

namespace specdec::model {

// Whether MoveIntoHugePages moves anything: Linux with transparent huge pages not set to "never",
// and SPECDEC_HUGE_PAGES is not "0".
bool HugePagesAvailable();

// Copies the given CPU tensors into one buffer, 2 MiB aligned, that the kernel is asked to back
// with transparent huge pages (madvise MADV_HUGEPAGE before the first write), and points each
// tensor at its copy. Tensors sharing one storage (a tied embedding and LM head) stay shared.
// Skipped, and left as they were: undefined tensors, tensors off the CPU, and views that do not
// cover their whole storage. The buffer is freed with the last tensor pointing into it. Returns
// the bytes moved; 0 when huge pages are unavailable or nothing qualified. Values never change.
int64_t MoveIntoHugePages(const std::vector<at::Tensor*>& tensors);

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_HUGE_PAGES_H_
