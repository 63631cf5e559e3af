// Two builds of common/model/linear_kernel.cc in one process: the products of one 1-token (or
// k-row) pass of the model bench's 100M shape (or, with SMALL set, its 7M shape), packed bf16
// weights, taken in items of 64 outputs as the runtime takes them; the two builds alternate pass
// by pass. The weights live on transparent huge pages, as the runtime's do (huge_pages.h). Prints
// the median of the paired time ratios (after / before) and each build's median.
//   kernel_ab ROWS ROUNDS
#include <sys/mman.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "common/model/linear_kernel.h"

using Problem = specdec::model::LinearProblem;
void RunBefore(const Problem& p);  // kernel_ab_shim.cc
void RunAfter(const Problem& p);

struct Matrix {
  int64_t in, out;
  uint16_t* w;
};

// `elements` bf16 values on 2 MiB pages (madvise before the first write).
uint16_t* HugeArray(int64_t elements) {
  const size_t bytes =
      (static_cast<size_t>(elements) * 2 + (size_t{2} << 20)) & ~((size_t{2} << 20) - 1);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) std::abort();
  madvise(p, bytes, MADV_HUGEPAGE);
  return static_cast<uint16_t*>(p);
}

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::atoi(argv[1]) : 1;
  const int rounds = argc > 2 ? std::atoi(argv[2]) : 41;
  const bool small = std::getenv("SMALL") != nullptr;
  const int64_t hidden = small ? 256 : 768, inter = small ? 768 : 2688;
  const int64_t layers = small ? 6 : 12, vocab = 8192, kv = small ? 128 : 256;
  std::vector<Matrix> ms;
  auto add = [&](int64_t in, int64_t out) {
    Matrix m{in, out, HugeArray(in * out)};
    for (int64_t i = 0; i < in * out; ++i) {
      m.w[i] = static_cast<uint16_t>(0x3c00 + (std::rand() & 0xff));
    }
    ms.push_back(std::move(m));
  };
  for (int l = 0; l < layers; ++l) {
    add(hidden, hidden + 2 * kv);
    add(hidden, hidden);
    add(hidden, 2 * inter);
    add(inter, hidden);
  }
  add(hidden, vocab);
  std::vector<uint16_t> x(rows * inter, 0x3f80);
  std::vector<float> y(rows * vocab);
  void (*runs[2])(const Problem&) = {RunBefore, RunAfter};
  std::vector<double> ms_of[2];
  for (int r = 0; r < rounds; ++r) {
    for (int b = 0; b < 2; ++b) {
      const auto t0 = std::chrono::steady_clock::now();
      for (const Matrix& m : ms) {
        for (int64_t o = 0; o < m.out; o += 64) {
          Problem p;
          p.x = x.data();
          p.rows = rows;
          p.x_stride = m.in;
          p.w = m.w + o * m.in;
          p.in = m.in;
          p.out = 64;
          p.y_f32 = y.data() + o;
          p.y_stride = m.out;
          p.w_block = 16;
          runs[b](p);
        }
      }
      ms_of[b].push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  std::vector<double> ratio;
  for (int r = 0; r < rounds; ++r) ratio.push_back(ms_of[1][r] / ms_of[0][r]);
  std::sort(ratio.begin(), ratio.end());
  for (auto& v : ms_of) std::sort(v.begin(), v.end());
  std::printf("%s rows %d: before %.3f ms, after %.3f ms, after/before paired median %.3f "
              "(quartiles %.3f-%.3f)\n",
              small ? "7M" : "100M", rows, ms_of[0][rounds / 2], ms_of[1][rounds / 2],
              ratio[rounds / 2], ratio[rounds / 4], ratio[3 * rounds / 4]);
}
