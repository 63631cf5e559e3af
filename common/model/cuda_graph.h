// A captured CUDA graph of a fixed-shape pass: its kernels replayed with one launch. Torch-free
// interface; cuda_graph.cc captures through PyTorch's CUDA graphs where libtorch has CUDA, and
// cuda_graph_unavailable.cc answers UNIMPLEMENTED elsewhere.
#ifndef SPECDEC_COMMON_MODEL_CUDA_GRAPH_H_
#define SPECDEC_COMMON_MODEL_CUDA_GRAPH_H_

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace specdec::model {

class CudaGraph {
 public:
  virtual ~CudaGraph() = default;

  // Whether this build can capture graphs (libtorch with CUDA).
  static bool Available();

  // Captures the kernels `pass` launches on CUDA device `device_index` (negative: the current one),
  // on a side stream, after one uncaptured run of `pass` on that stream (the libraries' lazy set-up
  // stays out of the graph). `pass` must launch the same work every time, without host
  // synchronization; the tensors it allocates while captured live in the graph's own memory pool.
  // Waits for the device's queued work first.
  static absl::StatusOr<std::unique_ptr<CudaGraph>> Capture(int device_index,
                                                            const std::function<void()>& pass);

  // Launches the captured kernels on the current stream.
  virtual void Replay() = 0;
};

// How one fixed pass (design.md §2.9) is run: its first use takes the general path, its second
// runs uncaptured and is captured after, later ones replay the graph. A failed capture is reported
// on stderr once per process, and that pass then always takes the general path. Declare it first
// in a pass: its graph is then freed after the tensors the graph wrote.
class PassCapture {
 public:
  // Whether this use takes the general path; `capturing` false (uncaptured fixed passes, for
  // tests) runs every use as a fixed pass.
  bool SkipsThisUse(bool capturing) { return failed_ || (capturing && ++uses_ == 1); }

  // Replays the graph, or runs `body` uncaptured.
  void Run(const std::function<void()>& body) {
    if (graph_ != nullptr) {
      graph_->Replay();
    } else {
      body();
    }
  }

  // After Run, when capturing and not captured yet: captures `body` on CUDA device
  // `device_index` and counts it in `*captured`.
  void CaptureIfDue(bool capturing, int device_index, const std::function<void()>& body,
                    std::atomic<int64_t>* captured) {
    if (!capturing || graph_ != nullptr) return;
    auto graph = CudaGraph::Capture(device_index, body);
    if (graph.ok()) {
      graph_ = *std::move(graph);
      captured->fetch_add(1);
      return;
    }
    failed_ = true;
    static std::atomic<bool> reported{false};
    if (!reported.exchange(true)) {
      std::fprintf(stderr, "specdec: %s; such passes run uncaptured\n",
                   std::string(graph.status().message()).c_str());
    }
  }

 private:
  std::unique_ptr<CudaGraph> graph_;
  int uses_ = 0;
  bool failed_ = false;
};

}  // namespace specdec::model

#endif  // SPECDEC_COMMON_MODEL_CUDA_GRAPH_H_
