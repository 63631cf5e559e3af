// The router's Prometheus metrics (docs/design.md §6): vLLM's spec-decode counters under the
// specdec_ prefix plus acceptance, block size, speedup, latency, outcome, backend and
// load-awareness metrics, and the one place that fills them from a request's steps and
// statistics.
#ifndef SPECDEC_SERVICES_ROUTER_ROUTER_METRICS_H_
#define SPECDEC_SERVICES_ROUTER_ROUTER_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <string>

#include "common/engine/request.h"
#include "common/engine/step_loop.h"

namespace specdec::services {

class LoadAwareSpeculation;

prometheus::Histogram::BucketBoundaries LatencyBuckets();

// Families are registered once; children are created per label set on first use. Thread-safe
// (prometheus-cpp's metrics are).
struct RouterMetrics {
  explicit RouterMetrics(prometheus::Registry& registry);

  // One verify step of a request of `method` (labels: method, model).
  void ObserveStep(const std::string& method, const std::string& model,
                   const engine::StepInfo& step);
  // A request that ran to its end; `estimated_speedup` <= 0: not estimated.
  void ObserveRequest(const std::string& method, const std::string& model,
                      const engine::DecodeStats& stats, double estimated_speedup);
  // The load-aware learner's state, after a load-aware request.
  void ObserveLoadAware(const LoadAwareSpeculation& load_aware);

  // Spec-decode counters and acceptance.
  prometheus::Family<prometheus::Counter>& drafts;
  prometheus::Family<prometheus::Counter>& draft_tokens;
  prometheus::Family<prometheus::Counter>& accepted;
  prometheus::Family<prometheus::Counter>& accepted_pos;
  prometheus::Family<prometheus::Histogram>& step_tau;
  prometheus::Family<prometheus::Histogram>& request_tau;
  prometheus::Family<prometheus::Counter>& block_size;
  prometheus::Family<prometheus::Histogram>& speedup;
  // Latency and outcomes.
  prometheus::Family<prometheus::Histogram>& stage;
  prometheus::Histogram& ttft;
  prometheus::Histogram& itl;
  prometheus::Histogram& e2e;
  prometheus::Family<prometheus::Counter>& outcomes;
  prometheus::Family<prometheus::Counter>& fallbacks;
  // Load, admission and backends.
  prometheus::Gauge& active;
  prometheus::Gauge& queued;
  prometheus::Histogram& queue_wait;
  prometheus::Family<prometheus::Gauge>& replica_healthy;
  prometheus::Family<prometheus::Counter>& replica_picks;
  // Load-aware speculation.
  prometheus::Family<prometheus::Counter>& load_aware;
  prometheus::Family<prometheus::Counter>& load_aware_steps;
  prometheus::Family<prometheus::Gauge>& load_aware_rate;
  prometheus::Family<prometheus::Gauge>& load_aware_advantage;
  prometheus::Family<prometheus::Gauge>& load_aware_pairs;
  prometheus::Family<prometheus::Gauge>& load_aware_interval;
  prometheus::Family<prometheus::Gauge>& load_aware_unmeasured;
  prometheus::Gauge& load_aware_epoch;
  prometheus::Family<prometheus::Counter>& load_aware_block;
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_ROUTER_METRICS_H_
