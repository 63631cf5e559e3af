// The bf16 products of a 1-token step against a plain read of the same bytes, in one process: a
// decoder shape's matrices (packed, on 2 MiB pages, as a loaded model keeps them) go through
// RunLinearParallel, and, alternating round by round, through a sum of their bytes split over the
// threads the same way (ForEachOutputBlock). The read is the most a product can stream from
// memory on this machine at this moment; the products' share of it is the kernel's own, which the
// machine's drifting bandwidth moves far less than it moves either rate.
//
//   specdec-linear-bench [--shape 100M|7M] [--threads 2] [--rows 1] [--rounds 20] [--repeats 5]
//       [--json FILE]
#include <sys/mman.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "common/model/linear_kernel.h"
#include "common/model/parallel_linear.h"
#include "common/model/runtime.h"
#include "common/model/target_clones.h"
#include "common/model/vec16.h"

namespace {

using specdec::model::LinearProblem;

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

struct Matrix {
  const uint16_t* w = nullptr;
  int64_t in = 0, out = 0;
};

// The [in, out] widths of a step's products: per layer q/k/v, o, gate/up, down; then the head.
// The shapes are specdec-model-bench's 7M (the pack's) and 100M.
std::vector<Matrix> StepMatrices(const std::string& shape) {
  const bool small = shape == "7M";
  const int64_t hidden = small ? 256 : 768, inter = small ? 768 : 2688, layers = small ? 6 : 12;
  const int64_t q = (small ? 4 : 12) * 64, kv = (small ? 2 : 4) * 64, vocab = 8192;
  std::vector<Matrix> m;
  for (int64_t l = 0; l < layers; ++l) {
    m.push_back({nullptr, hidden, q + 2 * kv});
    m.push_back({nullptr, q, hidden});
    m.push_back({nullptr, hidden, 2 * inter});
    m.push_back({nullptr, inter, hidden});
  }
  m.push_back({nullptr, hidden, vocab});
  return m;
}

// Places the matrices in one arena on 2 MiB transparent huge pages, filled with random bf16
// values of magnitude below 2; returns the arena's bytes in use (0 when mmap fails).
int64_t PlaceMatrices(std::vector<Matrix>& matrices) {
  constexpr int64_t kPage = 2 << 20;
  int64_t bytes = 0;
  for (const Matrix& m : matrices) bytes += m.in * m.out * 2;
  const int64_t mapped = (bytes + 2 * kPage - 1) / kPage * kPage;
  void* map = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return 0;
  auto* base =
      reinterpret_cast<uint16_t*>((reinterpret_cast<uintptr_t>(map) + kPage - 1) / kPage * kPage);
  madvise(base, mapped - kPage, MADV_HUGEPAGE);
  std::mt19937 rng(1);
  for (int64_t i = 0; i < bytes / 2; ++i) base[i] = 0x3000 + rng() % 0x0F80;  // (2^-31, 2)
  uint16_t* next = base;
  for (Matrix& m : matrices) {
    m.w = next;
    next += m.in * m.out;
  }
  return bytes;
}

// The sum of n 32-bit words (n a multiple of 64), four 16-lane sums in registers.
SPECDEC_TARGET_CLONES uint32_t SumWords(const uint32_t* p, int64_t n) {
  using specdec::model::U16;
  U16 a = {}, b = {}, c = {}, d = {}, v;
  for (int64_t i = 0; i < n; i += 64) {
    std::memcpy(&v, p + i, sizeof(v));
    a += v;
    std::memcpy(&v, p + i + 16, sizeof(v));
    b += v;
    std::memcpy(&v, p + i + 32, sizeof(v));
    c += v;
    std::memcpy(&v, p + i + 48, sizeof(v));
    d += v;
  }
  const U16 s = a + b + c + d;
  uint32_t total = 0;
  for (int l = 0; l < 16; ++l) total += s[l];
  return total;
}

// One pass of the step's products over `rows` rows of x (float sums out).
void RunProducts(const std::vector<Matrix>& matrices, int64_t rows, const uint16_t* x, float* y) {
  for (const Matrix& m : matrices) {
    LinearProblem p;
    p.x = x;
    p.rows = rows;
    p.x_stride = m.in;
    p.w = m.w;
    p.w_block = specdec::model::LinearPackBlock();
    p.in = m.in;
    p.out = m.out;
    p.y_f32 = y;
    p.y_stride = m.out;
    specdec::model::RunLinearParallel(p);
  }
}

// One pass reading the same bytes, split the same way; the sums land in `sink`.
void RunReads(const std::vector<Matrix>& matrices, std::vector<uint32_t>& sink) {
  for (const Matrix& m : matrices) {
    specdec::model::ForEachOutputBlock(m.out, [&](int64_t o0, int64_t n) {
      // Blocks of 64 outputs hold a multiple of 64 words whenever `in` is even.
      const auto* words = reinterpret_cast<const uint32_t*>(m.w + o0 * m.in);
      sink[static_cast<size_t>(o0 / 64) % sink.size()] += SumWords(words, n * m.in / 2);
    });
  }
}

template <typename Pass>
double PassMs(Pass&& pass) {
  const auto t0 = std::chrono::steady_clock::now();
  pass();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bf16 products of a 1-token step against a plain read of the same bytes"};
  std::string shape = "100M", json_path;
  int threads = 2, rows = 1, rounds = 20, repeats = 5;
  app.add_option("--shape", shape, "7M or 100M")->check(CLI::IsMember({"7M", "100M"}));
  app.add_option("--threads", threads, "compute threads (0 = all cores)");
  app.add_option("--rows", rows, "rows per product")->check(CLI::Range(1, 64));
  app.add_option("--rounds", rounds, "rounds, each both passes")->check(CLI::Range(1, 10000));
  app.add_option("--repeats", repeats, "passes of each kind per round")->check(CLI::Range(1, 1000));
  app.add_option("--json", json_path, "write the results here");
  CLI11_PARSE(app, argc, argv);
  const int used = specdec::model::ConfigureComputeThreads(threads);
  std::vector<Matrix> matrices = StepMatrices(shape);
  const int64_t bytes = PlaceMatrices(matrices);
  if (bytes == 0) {
    std::fprintf(stderr, "could not map the matrices' memory\n");
    return 1;
  }
  std::vector<uint16_t> x(static_cast<size_t>(rows) * 4096, 0x3F80);  // 1.0
  std::vector<float> y(static_cast<size_t>(rows) * 8192);
  std::vector<uint32_t> sink(256);
  std::vector<double> product_ms, read_ms, shares;
  for (int r = -1; r < rounds; ++r) {  // round -1 warms up, untimed
    std::vector<double> p, q;
    for (int k = 0; k < repeats; ++k)
      p.push_back(PassMs([&] { RunProducts(matrices, rows, x.data(), y.data()); }));
    for (int k = 0; k < repeats; ++k) q.push_back(PassMs([&] { RunReads(matrices, sink); }));
    if (r < 0) continue;
    product_ms.push_back(Median(p));
    read_ms.push_back(Median(q));
    shares.push_back(Median(q) / Median(p));
  }
  const double gb = bytes / 1e9;
  std::printf("%s, %d row(s), %d threads, %.1f MB of bf16 weights, %d rounds of %d passes each\n",
              shape.c_str(), rows, used, bytes / 1e6, rounds, repeats);
  std::printf(
      "  products %.3f ms (%.1f GB/s), read %.3f ms (%.1f GB/s): products at %.3f of the "
      "read (rounds %.3f-%.3f)\n",
      Median(product_ms), gb / Median(product_ms) * 1e3, Median(read_ms),
      gb / Median(read_ms) * 1e3, Median(shares), *std::min_element(shares.begin(), shares.end()),
      *std::max_element(shares.begin(), shares.end()));
  if (!json_path.empty()) {
    nlohmann::json j = {{"shape", shape},           {"rows", rows},
                        {"threads", used},          {"weight_bytes", bytes},
                        {"product_ms", product_ms}, {"read_ms", read_ms},
                        {"share", shares},          {"share_median", Median(shares)},
                        {"checksum", sink[0]}};
    std::ofstream(json_path) << j.dump(2) << "\n";
  }
  return 0;
}
