// Measures the decoder's speed on this machine: AR tokens/s and the cost of a k-token forward
// (a speculative verify) relative to a 1-token step, for Qwen3-shaped random-weight models.
// On a CUDA device (--device cuda) it also measures the memory bandwidth, the AR step against the
// bandwidth floor (weight bytes / bandwidth) and a DFlash drafter's step; on the CPU, --floor N
// sets the step against the floor in N rounds, each with the triad (stream_triad.c) beside it.
//
//   specdec-model-bench [--sizes 30M,100M] [--dtypes f32,bf16] [--context 200] [--reps 15]
//                       [--device cpu|cuda] [--floor 5] [--json out.json]
//   specdec-model-bench --device cuda --sizes qwen3-0.6b,qwen3-4b --dtypes bf16
//   specdec-model-bench --sizes 100M --dtypes bf16 --ks 1 --compare-read-ahead  (and
//       --compare-packing, --compare-row-layers: two loads' forwards alternating)
#include <ATen/ATen.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "bench/stream_triad.h"
#include "common/model/compute_pool.h"
#include "common/model/dflash_drafter.h"
#include "common/model/runtime.h"
#include "common/model/transformer.h"
#include "common/model/weights.h"
#include "common/util/status_macros.h"

namespace specdec::model {
namespace {

// Qwen3-0.6B and Qwen3-4B (their config.json shapes).
ModelConfig QwenShape(const std::string& size) {
  ModelConfig c;
  c.architecture = Architecture::kQwen3;
  c.qk_norm = true;
  c.vocab_size = 151936;
  c.head_dim = 128;
  c.num_key_value_heads = 8;
  c.max_position_embeddings = 40960;
  c.rope_theta = 1e6;
  c.tie_word_embeddings = true;
  const bool big = size == "qwen3-4b";
  c.hidden_size = big ? 2560 : 1024;
  c.num_hidden_layers = big ? 36 : 28;
  c.num_attention_heads = big ? 32 : 16;
  c.intermediate_size = big ? 9728 : 3072;
  return c;
}

ModelConfig ShapeFor(const std::string& size) {
  if (size.rfind("qwen3-", 0) == 0) return QwenShape(size);
  ModelConfig c;
  c.architecture = Architecture::kQwen3;
  c.qk_norm = true;
  c.vocab_size = 8192;
  c.num_key_value_heads = 4;
  c.head_dim = 64;
  c.max_position_embeddings = 4096;
  c.tie_word_embeddings = true;
  if (size == "7M") {
    c.hidden_size = 256;
    c.num_hidden_layers = 6;
    c.intermediate_size = 768;
    c.num_attention_heads = 4;
    c.num_key_value_heads = 2;
  } else if (size == "30M") {
    c.hidden_size = 512;
    c.num_hidden_layers = 8;
    c.intermediate_size = 1536;
    c.num_attention_heads = 8;
  } else {  // 100M
    c.hidden_size = 768;
    c.num_hidden_layers = 12;
    c.intermediate_size = 2688;
    c.num_attention_heads = 12;
  }
  return c;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median ms of `reps` calls of `step` after two untimed ones; `reset` runs after each call,
// untimed. A failing step ends the program with its status.
template <typename Step, typename Reset>
double MedianMs(int reps, Step&& step, Reset&& reset) {
  std::vector<double> ms;
  for (int r = 0; r < reps + 2; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const absl::Status status = step();
    const auto t1 = std::chrono::steady_clock::now();
    if (!status.ok()) {
      std::cerr << status << "\n";
      std::exit(1);
    }
    reset();
    if (r >= 2) ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  return Median(ms);
}

// Median ms of a k-token forward on top of `context` cached tokens (the cache is rolled back
// after each repetition so every run sees the same context length).
double TimeForward(const Transformer& m, KvCache* cache, int64_t context, int k, int reps,
                   LogitsMode logits = LogitsMode::kAll) {
  std::vector<int32_t> toks(k);
  for (int i = 0; i < k; ++i) toks[i] = (i * 37 + 11) % m.config().vocab_size;
  SequenceInput in;
  in.cache = cache;
  in.tokens = toks;
  in.logits = logits;
  return MedianMs(
      reps, [&] { return m.Forward(std::span<const SequenceInput>(&in, 1)).status(); },
      [&] { (void)cache->Truncate(context); });
}

// Random N(0, std^2) tensors (norms around 1) of `specs`, drawn on `device` in `dtype`: a 4B
// model is drawn where it runs instead of through 16 GB of host float32.
std::map<std::string, at::Tensor> DeviceRandomTensors(const std::vector<TensorSpec>& specs,
                                                      c10::Device device, at::ScalarType dtype,
                                                      double std) {
  std::map<std::string, at::Tensor> out;
  const auto opts = at::TensorOptions().device(device).dtype(at::kFloat);
  for (const TensorSpec& spec : specs) {
    at::Tensor t = at::randn(spec.shape, opts).mul_(std);
    if (spec.name.find("norm") != std::string::npos) t.add_(1.0);
    out.emplace(spec.name, t.to(dtype));
  }
  return out;
}

// Waits for the device's queued work: a one-element copy to the host.
void Sync(const at::Tensor& t) { (void)t.flatten()[0].item<float>(); }

// Device-to-device copy rate in GB/s (bytes read plus bytes written), 1 GiB buffers.
double CopyBandwidthGbs(c10::Device device) {
  const int64_t n = int64_t{1} << 28;  // floats
  at::Tensor src = at::randn({n}, at::TensorOptions().device(device));
  at::Tensor dst = at::empty_like(src);
  std::vector<double> rates;
  for (int r = 0; r < 12; ++r) {
    Sync(dst);
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 5; ++i) dst.copy_(src);
    Sync(dst);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r >= 2) rates.push_back(5.0 * 2.0 * static_cast<double>(n) * 4.0 / s / 1e9);
  }
  return Median(rates);
}

// Median ms of a DFlash draft step (block `b`, `m` new feature rows) on top of `context` rows.
double TimeDraftStep(const Transformer& target, int64_t context, int b, int m, int reps) {
  DFlashConfig dc;
  dc.layers = target.config();
  dc.layers.num_hidden_layers = 5;
  dc.block_size = b;
  dc.mask_token_id = 3;
  dc.target_layer_ids = DefaultTargetLayerIds(target.config().num_hidden_layers, 5);
  auto weights = DeviceRandomTensors(DFlashDrafter::WeightShapes(dc, target.config().hidden_size),
                                     target.device(), target.dtype(), 0.02);
  auto drafter = DFlashDrafter::FromTensors(dc, weights, target);
  if (!drafter.ok()) {
    std::cerr << drafter.status() << "\n";
    std::exit(1);
  }
  const int64_t width = static_cast<int64_t>(dc.target_layer_ids.size()) * dc.layers.hidden_size;
  auto cache = (*drafter)->NewCache();
  const auto opts = at::TensorOptions().device(target.device()).dtype(target.activation_dtype());
  DraftInput in{cache.get(), at::randn({context, width}, opts), 5, b};
  if (!(*drafter)->Draft(std::span<const DraftInput>(&in, 1)).ok()) std::exit(1);
  in.new_features = at::randn({m, width}, opts);
  return MedianMs(
      reps, [&] { return (*drafter)->Draft(std::span<const DraftInput>(&in, 1)).status(); },
      [&] { (void)cache->Truncate(context); });
}

// The bytes one AR step must read: every weight once (a tied embedding once, as the head) and
// the cache's keys and values.
double StepBytes(const Transformer& m, int64_t context) {
  const ModelConfig& c = m.config();
  double params = static_cast<double>(c.NumParameters());
  if (!c.tie_word_embeddings) params -= static_cast<double>(c.vocab_size * c.hidden_size);
  return params * static_cast<double>(c10::elementSize(m.dtype())) +
         static_cast<double>(context * m.kv_bytes_per_token());
}

// The GPU rows of one model: the bandwidth floor, a 16-token verify with one row of logits to the
// host (the forward pass alone) against a 1-token step, and the DFlash drafter's step.
void AddDeviceRows(const Transformer& m, KvCache* cache, int64_t context, int reps,
                   double bandwidth_gbs, double step_ms, nlohmann::json& row) {
  const double floor_ms = StepBytes(m, context) / (bandwidth_gbs * 1e9) * 1e3;
  const double one_last = TimeForward(m, cache, context, 1, reps, LogitsMode::kLast);
  const double verify_last = TimeForward(m, cache, context, 17, reps, LogitsMode::kLast);
  const double draft_ms = TimeDraftStep(m, context, 16, 4, reps);
  row["bandwidth_gbs"] = bandwidth_gbs;
  row["floor_ms"] = floor_ms;
  row["step_over_floor"] = step_ms / floor_ms;
  row["step_last_ms"] = one_last;
  row["verify17_last_ms"] = verify_last;
  row["verify17_over_step"] = verify_last / one_last;
  row["dflash_draft16_ms"] = draft_ms;
  std::printf(
      "  floor %.3f ms, AR step %.3f ms (%.2fx floor); forward only: 1 row %.3f ms, "
      "17 rows %.3f ms (%.2fx); DFlash draft (5 layers, b=16) %.3f ms\n",
      floor_ms, step_ms, step_ms / floor_ms, one_last, verify_last, verify_last / one_last,
      draft_ms);
}

// One way of loading the weights that CompareLoads sets against another.
struct LoadVariant {
  std::string name;  // its column and JSON key (name + "_ms")
  LoadOptions options;
};

// Times k-token forwards of the same weights loaded two ways (packed against row-major, row
// layers against ATen's operators), one forward of each in turn, so that both meet the same
// moments of a noisy machine: median ms of each, their ratio (the second's over the first's), and
// the bytes per ms of a 1-token step.
void CompareLoads(const ModelConfig& c, const std::map<std::string, at::Tensor>& weights,
                  const LoadVariant (&variants)[2], const std::vector<int>& ks, int64_t context,
                  int reps, int threads, nlohmann::json& results) {
  std::unique_ptr<Transformer> models[2];
  std::unique_ptr<KvCache> caches[2];
  std::vector<int32_t> prompt(context);
  for (int64_t i = 0; i < context; ++i) prompt[i] = (i * 13 + 5) % c.vocab_size;
  for (int v = 0; v < 2; ++v) {
    auto model = Transformer::FromTensors(c, weights, variants[v].options);
    if (!model.ok()) {
      std::cerr << model.status() << "\n";
      std::exit(1);
    }
    models[v] = *std::move(model);
    caches[v] = models[v]->NewCache();
    SequenceInput in{caches[v].get(), prompt};
    if (!models[v]->Forward(std::span<const SequenceInput>(&in, 1)).ok()) std::exit(1);
  }
  std::printf("%-6s %4s %14s %14s %8s\n", "k", "", (variants[0].name + " ms").c_str(),
              (variants[1].name + " ms").c_str(), "ratio");
  for (int k : ks) {
    std::vector<int32_t> toks(k);
    for (int i = 0; i < k; ++i) toks[i] = (i * 37 + 11) % c.vocab_size;
    std::vector<double> ms[2];
    for (int r = 0; r < reps + 2; ++r) {
      for (int v = 0; v < 2; ++v) {
        SequenceInput in{caches[v].get(), toks};
        const auto t0 = std::chrono::steady_clock::now();
        if (!models[v]->Forward(std::span<const SequenceInput>(&in, 1)).ok()) std::exit(1);
        const auto t1 = std::chrono::steady_clock::now();
        (void)caches[v]->Truncate(context);
        if (r >= 2) ms[v].push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      }
    }
    const double first_ms = Median(ms[0]), second_ms = Median(ms[1]);
    std::printf("%-6d %4s %14.2f %14.2f %8.2f\n", k, "", first_ms, second_ms, second_ms / first_ms);
    nlohmann::json row = {{"k", k},
                          {"context", context},
                          {"threads", threads},
                          {variants[0].name + "_ms", first_ms},
                          {variants[1].name + "_ms", second_ms},
                          {"params", c.NumParameters()}};
    if (k == 1) {
      const double bytes = StepBytes(*models[0], context);
      row["step_bytes"] = bytes;
      row[variants[0].name + "_gbs"] = bytes / (first_ms * 1e6);
      row[variants[1].name + "_gbs"] = bytes / (second_ms * 1e6);
      std::printf("       1-token step reads %.1f MB: %.1f GB/s %s, %.1f GB/s %s\n", bytes / 1e6,
                  bytes / (first_ms * 1e6), variants[0].name.c_str(), bytes / (second_ms * 1e6),
                  variants[1].name.c_str());
    }
    results.push_back(row);
  }
}

// The CPU's floor rounds of one model: in each, the triad's bandwidth (the higher of its two page
// sizes) and then the 1-token step (the median of `reps`), so that each step is set against the
// bandwidth measured beside it on this noisy machine. The fraction of the floor is the floor's
// ms over the step's.
void AddFloorRounds(const Transformer& m, KvCache* cache, int64_t context, int reps, int rounds,
                    nlohmann::json& row) {
  const double bytes = StepBytes(m, context);
  std::vector<double> fractions;
  for (int r = 0; r < rounds; ++r) {
    const double gbs =
        std::max(StreamTriadGbs(0, ComputeThreads()), StreamTriadGbs(1, ComputeThreads()));
    const double step_ms = TimeForward(m, cache, context, 1, reps);
    const double floor_ms = bytes / (gbs * 1e9) * 1e3;
    fractions.push_back(floor_ms / step_ms);
    row["floor_rounds"].push_back({{"triad_gbs", gbs},
                                   {"floor_ms", floor_ms},
                                   {"step_ms", step_ms},
                                   {"fraction", floor_ms / step_ms}});
    std::printf(
        "  round %d: triad %.1f GB/s, floor %.2f ms, 1-token step %.2f ms: %.2f of the floor\n",
        r + 1, gbs, floor_ms, step_ms, floor_ms / step_ms);
  }
  row["step_bytes"] = bytes;
  row["floor_fraction_median"] = Median(fractions);
  std::printf("  %.1f MB per step (weights, cached keys and values): median %.2f of the floor\n",
              bytes / 1e6, Median(fractions));
}

// What one run measures, the same for every model.
struct BenchPlan {
  std::vector<int> ks;
  int64_t context = 200;
  int reps = 15, threads = 1;
  int floor_rounds = 0;  // CPU: rounds of the step against the triad's floor
  at::Device device = at::kCPU;
  std::string device_name = "cpu";
  double bandwidth_gbs = 0;  // CUDA: the measured copy bandwidth
};

// One model (shape `c`, `weights`) in one dtype, with or without CUDA graphs: the forward of
// each k after `context` tokens, printed as a table row and appended to `results`.
absl::Status MeasureModel(const BenchPlan& plan, const std::string& size, const std::string& dt,
                          bool cuda_graphs, const ModelConfig& c,
                          const std::map<std::string, at::Tensor>& weights,
                          nlohmann::json& results) {
  const bool gpu = !plan.device.is_cpu();
  LoadOptions opts;
  opts.dtype = dt == "bf16" ? at::kBFloat16 : at::kFloat;
  opts.device = plan.device;
  opts.cuda_graphs = cuda_graphs;
  ASSIGN_OR_RETURN(auto model, Transformer::FromTensors(c, weights, opts));
  auto cache = model->NewCache();
  std::vector<int32_t> prompt(plan.context);
  for (int64_t i = 0; i < plan.context; ++i) prompt[i] = (i * 13 + 5) % c.vocab_size;
  SequenceInput in{cache.get(), prompt};
  RETURN_IF_ERROR(model->Forward(std::span<const SequenceInput>(&in, 1)).status());
  nlohmann::json row = {{"model", size},
                        {"dtype", dt},
                        {"params", c.NumParameters()},
                        {"context", plan.context},
                        {"threads", plan.threads}};
  double one = 0;
  std::vector<double> ratios;
  for (int k : plan.ks) {
    double ms = TimeForward(*model, cache.get(), plan.context, k, plan.reps);
    if (k == plan.ks.front()) one = ms;
    ratios.push_back(ms / one);
    row["ms"][std::to_string(k)] = ms;
    row["ratio"][std::to_string(k)] = ms / one;
  }
  row["ar_tokens_per_s"] = 1000.0 / one;
  row["device"] = plan.device_name;
  if (gpu) {
    row["cuda_graphs"] = opts.cuda_graphs;
    AddDeviceRows(*model, cache.get(), plan.context, plan.reps, plan.bandwidth_gbs, one, row);
    row["graphs_captured"] = model->captured_graphs();
  }
  std::printf("%-6s %-5s %7.1fM %10.2f %10.1f", size.c_str(), dt.c_str(), c.NumParameters() / 1e6,
              one, 1000.0 / one);
  for (double r : ratios) std::printf("  %6.2f", r);
  if (gpu) std::printf("  (CUDA graphs %s)", cuda_graphs ? "on" : "off");
  std::printf("\n");
  if (!gpu && plan.floor_rounds > 0) {
    AddFloorRounds(*model, cache.get(), plan.context, plan.reps, plan.floor_rounds, row);
  }
  std::fflush(stdout);
  results.push_back(row);
  return absl::OkStatus();
}

// The --ks list: positive integers.
absl::StatusOr<std::vector<int>> ParseKs(const std::string& list) {
  std::vector<int> ks;
  for (absl::string_view k : absl::StrSplit(list, ',')) {
    int value = 0;
    if (!absl::SimpleAtoi(k, &value) || value < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--ks takes positive integers, got '", k, "'"));
    }
    ks.push_back(value);
  }
  return ks;
}

}  // namespace
}  // namespace specdec::model

int main(int argc, char** argv) {
  using namespace specdec::model;
  CLI::App app{"specdec decoder speed benchmark (random Qwen3-shaped weights)"};
  std::string sizes = "30M,100M", dtypes = "f32,bf16", ks_list = "1,2,4,8,16,32", json_path;
  int64_t context = 200;
  int reps = 15, threads = 0, floor_rounds = 0;
  std::string device_name = "cpu";
  app.add_option("--sizes", sizes,
                 "comma-separated model sizes: 7M, 30M, 100M, qwen3-0.6b, qwen3-4b");
  app.add_option("--device", device_name, "cpu, cuda or cuda:N");
  app.add_option("--dtypes", dtypes, "comma-separated: f32, bf16");
  app.add_option("--ks", ks_list, "comma-separated tokens per forward (the first is the base)");
  app.add_option("--context", context, "tokens already in the KV cache");
  app.add_option("--reps", reps, "timed repetitions per point (median reported)");
  app.add_option("--threads", threads, "compute threads (0 = all cores)");
  app.add_option("--json", json_path, "write results as JSON here");
  app.add_option("--floor", floor_rounds,
                 "CPU: rounds of the 1-token step against the triad's bandwidth floor")
      ->check(CLI::NonNegativeNumber);
  std::string graph_modes = "on";
  app.add_option("--cuda-graphs", graph_modes,
                 "CUDA: on, off or on,off (each model measured with and without graphs)");
  bool compare_packing = false, compare_row_layers = false, compare_read_ahead = false;
  app.add_flag("--compare-packing", compare_packing,
               "bf16 on the CPU: packed against row-major weights, forwards alternating");
  app.add_flag("--compare-row-layers", compare_row_layers,
               "CPU, each of --dtypes: the row layers against ATen's operators, forwards "
               "alternating");
  app.add_flag("--compare-read-ahead", compare_read_ahead,
               "CPU, each of --dtypes: products reading the next matrix ahead against not, "
               "forwards alternating");
  CLI11_PARSE(app, argc, argv);
  const int used_threads = ConfigureComputeThreads(threads);
  auto device = LoadOptions::ParseDevice(device_name);
  if (!device.ok()) {
    std::cerr << device.status() << "\n";
    return 1;
  }
  const bool gpu = !device->is_cpu();
  for (absl::string_view mode : absl::StrSplit(graph_modes, ',')) {
    if (mode != "on" && mode != "off") {
      std::cerr << "--cuda-graphs takes on, off or on,off, got '" << mode << "'\n";
      return 1;
    }
  }
  const bool compare = compare_packing || compare_row_layers || compare_read_ahead;
  if (compare && gpu) {
    std::cerr << "--compare-packing, --compare-row-layers and --compare-read-ahead compare CPU "
                 "loads: drop --device\n";
    return 1;
  }
  double bandwidth_gbs = 0;
  if (gpu) {
    bandwidth_gbs = CopyBandwidthGbs(*device);
    std::printf("device %s: copy bandwidth %.0f GB/s (read + write)\n", device_name.c_str(),
                bandwidth_gbs);
  }

  BenchPlan plan;
  auto ks = ParseKs(ks_list);
  if (!ks.ok()) {
    std::cerr << ks.status().message() << "\n";
    return 1;
  }
  plan.ks = *ks;
  plan.context = context;
  plan.reps = reps;
  plan.threads = used_threads;
  plan.device = *device;
  plan.device_name = device_name;
  plan.bandwidth_gbs = bandwidth_gbs;
  plan.floor_rounds = floor_rounds;
  nlohmann::json results = nlohmann::json::array();
  std::printf("threads=%d context=%lld reps=%d (median ms per forward)\n", used_threads,
              static_cast<long long>(context), reps);
  if (!compare) {
    std::printf("%-6s %-5s %8s %10s %10s", "model", "dtype", "params", "1-tok ms", "AR tok/s");
    for (int k : plan.ks) std::printf("  k=%-2d x", k);
    std::printf("\n");
  }
  for (const std::string& size : std::vector<std::string>(absl::StrSplit(sizes, ','))) {
    ModelConfig c = ShapeFor(size);
    std::map<std::string, at::Tensor> weights;
    if (!gpu) weights = Transformer::RandomWeights(c, 7, 0.02);
    if (compare_packing) {
      LoadVariant variants[2] = {{"packed", {}}, {"row_major", {}}};
      for (LoadVariant& v : variants) v.options.dtype = at::kBFloat16;
      variants[1].options.pack_weights = false;
      std::printf("%s, bf16:\n", size.c_str());
      CompareLoads(c, weights, variants, plan.ks, context, reps, used_threads, results);
      continue;
    }
    if (compare_row_layers || compare_read_ahead) {
      for (const std::string& dt : std::vector<std::string>(absl::StrSplit(dtypes, ','))) {
        LoadVariant variants[2] = {{"row_layers", {}}, {"aten_layers", {}}};
        for (LoadVariant& v : variants) v.options.dtype = dt == "bf16" ? at::kBFloat16 : at::kFloat;
        if (compare_read_ahead) {
          variants[0].name = "read_ahead";
          variants[1].name = "no_read_ahead";
          variants[1].options.read_ahead = false;
        } else {
          variants[1].options.row_layers = false;
        }
        std::printf("%s, %s:\n", size.c_str(), dt.c_str());
        CompareLoads(c, weights, variants, plan.ks, context, reps, used_threads, results);
      }
      continue;
    }
    for (const std::string& dt : std::vector<std::string>(absl::StrSplit(dtypes, ','))) {
      const at::ScalarType dtype = dt == "bf16" ? at::kBFloat16 : at::kFloat;
      if (gpu) weights = DeviceRandomTensors(TransformerTensorSpecs(c), *device, dtype, 0.02);
      for (const std::string& graphs : std::vector<std::string>(absl::StrSplit(graph_modes, ','))) {
        if (absl::Status s = MeasureModel(plan, size, dt, graphs != "off", c, weights, results);
            !s.ok()) {
          std::cerr << s << "\n";
          return 1;
        }
      }
      if (gpu) weights.clear();
    }
  }
  if (!json_path.empty()) {
    std::ofstream(json_path) << results.dump(2) << "\n";
    std::printf("wrote %s\n", json_path.c_str());
  }
  return 0;
}
