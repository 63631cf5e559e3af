#include "services/target/target_metrics.h"

namespace specdec::services {

TargetMetrics::TargetMetrics(prometheus::Registry& r)
    : ops(prometheus::BuildCounter()
              .Name("specdec_target_operations_total")
              .Help("Session operations by kind and gRPC status code")
              .Register(r)),
      compute(prometheus::BuildHistogram()
                  .Name("specdec_target_compute_seconds")
                  .Help("Forward compute per operation")
                  .Register(r)),
      queue(prometheus::BuildHistogram()
                .Name("specdec_target_queue_seconds")
                .Help("Time an operation waited for the scheduler")
                .Register(r)
                .Add({}, Buckets())),
      kv_bytes(prometheus::BuildGauge()
                   .Name("specdec_kv_cache_bytes")
                   .Help("KV-cache bytes accounted to live handles")
                   .Register(r)
                   .Add({{"service", "target"}})),
      handles(prometheus::BuildGauge()
                  .Name("specdec_kv_handles")
                  .Help("Live KV-cache handles")
                  .Register(r)
                  .Add({{"service", "target"}})),
      sessions(prometheus::BuildGauge()
                   .Name("specdec_active_sessions")
                   .Help("Open Session streams")
                   .Register(r)
                   .Add({{"service", "target"}})),
      batch(prometheus::BuildHistogram()
                .Name("specdec_target_batch_size")
                .Help("Sessions per batched verify forward pass")
                .Register(r)
                .Add({}, BatchBuckets())),
      draft_batch(prometheus::BuildHistogram()
                      .Name("specdec_target_draft_batch_size")
                      .Help("Sessions per batched pass of the target-hosted DFlash drafter")
                      .Register(r)
                      .Add({}, BatchBuckets())),
      draft_failures(prometheus::BuildCounter()
                         .Name("specdec_target_draft_failures_total")
                         .Help("Hosted-drafter blocks that failed (the step ran as AR)")
                         .Register(r)
                         .Add({})) {}

}  // namespace specdec::services
