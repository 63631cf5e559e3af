// The target service's Prometheus metrics.
#ifndef SPECDEC_SERVICES_TARGET_TARGET_METRICS_H_
#define SPECDEC_SERVICES_TARGET_TARGET_METRICS_H_

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "absl/status/status.h"

namespace specdec::services {

// Metric children resolved at startup; the hot path only increments.
struct TargetMetrics {
  explicit TargetMetrics(prometheus::Registry& r);
  static prometheus::Histogram::BucketBoundaries BatchBuckets() {
    return {1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64};
  }
  static prometheus::Histogram::BucketBoundaries Buckets() {
    return {0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2};
  }
  void Op(const char* op, absl::StatusCode code) {
    ops.Add({{"op", op}, {"code", absl::StatusCodeToString(code)}}).Increment();
  }
  prometheus::Family<prometheus::Counter>& ops;
  prometheus::Family<prometheus::Histogram>& compute;
  prometheus::Histogram& queue;
  prometheus::Gauge& kv_bytes;
  prometheus::Gauge& handles;
  prometheus::Gauge& sessions;
  prometheus::Histogram& batch;
  prometheus::Histogram& draft_batch;
  prometheus::Counter& draft_failures;
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_TARGET_TARGET_METRICS_H_
