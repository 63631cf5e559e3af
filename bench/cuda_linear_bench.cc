// bf16 products of a few rows on a CUDA GPU (a decoding step's 1, a verify's 17): cuBLAS
// (at::linear), specdec's CudaRowsLinear in each of its 6 shapes and, up to 4 rows, its
// CudaVectorLinear in each of its 8, for the matrices of the Qwen3-0.6B and -4B shapes (random
// weights). Each method's products are
// captured in one CUDA graph that cycles through enough copies of the matrix that none is read
// from L2; methods alternate round by round, and each cell is the median over the rounds.
//
//   specdec-cuda-linear-bench [--rows 1,17] [--rounds 5] [--replays 5] [--json FILE]
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/model/cuda_ops.h"

namespace {

struct MatrixShape {
  std::string model, name;
  int64_t n = 0, k = 0;
};

// Qwen3-0.6B: hidden 1024, 16 q and 8 KV heads of 128, MLP 3072; Qwen3-4B: hidden 2560, 32 and 8
// heads of 128, MLP 9728; both with a 151,936-token vocabulary.
std::vector<MatrixShape> Shapes() {
  std::vector<MatrixShape> out;
  for (const auto& [model, hidden, heads, inter] :
       std::vector<std::tuple<std::string, int64_t, int64_t, int64_t>>{
           {"qwen3-0.6b", 1024, 16, 3072}, {"qwen3-4b", 2560, 32, 9728}}) {
    out.push_back({model, "qkv", (heads + 16) * 128, hidden});
    out.push_back({model, "o", hidden, heads * 128});
    out.push_back({model, "gate_up", 2 * inter, hidden});
    out.push_back({model, "down", hidden, inter});
    out.push_back({model, "lm_head", 151936, hidden});
  }
  return out;
}

using Product = std::function<void(const at::Tensor& x, const at::Tensor& w)>;

// Milliseconds per product: `replays` replays of a graph that runs `product` once per copy.
double TimeGraph(const Product& product, const at::Tensor& x, const std::vector<at::Tensor>& copies,
                 int replays) {
  const c10::cuda::CUDAStream stream = c10::cuda::getStreamFromPool();
  c10::cuda::CUDAStreamGuard guard(stream);
  for (const at::Tensor& w : copies) product(x, w);  // warm-up, outside the capture
  at::cuda::CUDAGraph graph;
  graph.capture_begin();
  for (const at::Tensor& w : copies) product(x, w);
  graph.capture_end();
  graph.replay();
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  cudaEventRecord(start, stream.stream());
  for (int r = 0; r < replays; ++r) graph.replay();
  cudaEventRecord(stop, stream.stream());
  cudaEventSynchronize(stop);
  float ms = 0;
  cudaEventElapsedTime(&ms, start, stop);
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return ms / (replays * static_cast<double>(copies.size()));
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bf16 products of a few rows on a CUDA GPU: cuBLAS and specdec's kernels"};
  int rounds = 5, replays = 5;
  std::vector<int64_t> row_counts = {1};
  std::string json_path;
  app.add_option("--rounds", rounds, "rounds, each every method once")->check(CLI::Range(1, 100));
  app.add_option("--replays", replays, "graph replays per timing")->check(CLI::Range(1, 1000));
  app.add_option("--rows", row_counts, "rows per product, one table each")
      ->check(CLI::Range(1, 64))
      ->delimiter(',');
  app.add_option("--json", json_path, "write the results here");
  CLI11_PARSE(app, argc, argv);
  if (!at::hasCUDA() || !specdec::model::CudaKernelsOn()) {
    std::fprintf(stderr, "needs a CUDA GPU and a build with specdec's CUDA kernels\n");
    return 1;
  }
  const auto options = at::TensorOptions().device(at::kCUDA).dtype(at::kBFloat16);
  struct Method {
    std::string name;
    int64_t max_rows;
    Product product;
  };
  std::vector<Method> methods = {
      {"cuBLAS", 64, [](const at::Tensor& x, const at::Tensor& w) { (void)at::linear(x, w); }}};
  for (int shape = 0; shape < 6; ++shape) {
    methods.push_back(
        {"Rows" + std::to_string(shape), 64, [shape](const at::Tensor& x, const at::Tensor& w) {
           at::Tensor y;
           TORCH_CHECK(specdec::model::CudaRowsLinear(x, w, at::Tensor(), &y, shape));
         }});
  }
  for (int shape = 0; shape < 8; ++shape) {
    methods.push_back(
        {"Vector" + std::to_string(shape), 4, [shape](const at::Tensor& x, const at::Tensor& w) {
           at::Tensor y;
           TORCH_CHECK(specdec::model::CudaVectorLinear(x, w, at::Tensor(), &y, shape));
         }});
  }
  nlohmann::json results = nlohmann::json::array();
  for (const int64_t rows : row_counts) {
    std::printf("%ld rows\n%-11s %-8s %7s %6s %6s", static_cast<long>(rows), "model", "matrix", "n",
                "k", "MB");  // then us, GB/s of weights
    for (const Method& method : methods) {
      if (rows <= method.max_rows) std::printf(" | %10s GB/s", method.name.c_str());
    }
    std::printf("\n");
    for (const MatrixShape& shape : Shapes()) {
      const double bytes = 2.0 * shape.n * shape.k;
      // At least 1 GB of copies (20x the H100's L2): every product reads its weights from memory.
      const int64_t count = std::clamp<int64_t>(static_cast<int64_t>(1e9 / bytes) + 1, 2, 256);
      std::vector<at::Tensor> copies;
      for (int64_t c = 0; c < count; ++c) {
        copies.push_back(at::randn({shape.n, shape.k}, options) * 0.02);
      }
      const at::Tensor x = at::randn({rows, shape.k}, options);
      std::vector<std::vector<double>> ms(methods.size());
      for (int r = 0; r < rounds; ++r) {
        for (size_t m = 0; m < methods.size(); ++m) {
          if (rows > methods[m].max_rows) continue;
          ms[m].push_back(TimeGraph(methods[m].product, x, copies, replays));
        }
      }
      std::printf("%-11s %-8s %7ld %6ld %6.1f", shape.model.c_str(), shape.name.c_str(),
                  static_cast<long>(shape.n), static_cast<long>(shape.k), bytes / 1e6);
      nlohmann::json row = {{"model", shape.model}, {"matrix", shape.name}, {"rows", rows},
                            {"n", shape.n},         {"k", shape.k},         {"bytes", bytes},
                            {"copies", count}};
      for (size_t m = 0; m < methods.size(); ++m) {
        if (ms[m].empty()) continue;
        const double median = Median(ms[m]);
        std::printf(" | %10.2f %4.0f", median * 1e3, bytes / (median * 1e-3) / 1e9);
        row[methods[m].name] = {{"ms", median}, {"gb_per_s", bytes / (median * 1e-3) / 1e9}};
      }
      std::printf("\n");
      results.push_back(row);
    }
  }
  if (!json_path.empty()) std::ofstream(json_path) << results.dump(2) << "\n";
  return 0;
}
