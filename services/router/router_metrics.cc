#include "services/router/router_metrics.h"

#include <chrono>
#include <utility>

#include "services/router/load_aware.h"

namespace specdec::services {
namespace {

using prometheus::Counter;
using prometheus::Family;
using prometheus::Gauge;
using prometheus::Histogram;

Family<Counter>& Counters(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildCounter().Name(name).Help(help).Register(r);
}
Family<Gauge>& Gauges(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildGauge().Name(name).Help(help).Register(r);
}
Family<Histogram>& Histograms(prometheus::Registry& r, const char* name, const char* help) {
  return prometheus::BuildHistogram().Name(name).Help(help).Register(r);
}
Histogram& Latency(prometheus::Registry& r, const char* name, const char* help) {
  return Histograms(r, name, help).Add({}, LatencyBuckets());
}

}  // namespace

prometheus::Histogram::BucketBoundaries LatencyBuckets() {
  return {0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 30};
}

RouterMetrics::RouterMetrics(prometheus::Registry& r)
    : drafts(Counters(r, "specdec_spec_decode_num_drafts_total",
                      "Speculative steps (target verify passes with drafts)")),
      draft_tokens(
          Counters(r, "specdec_spec_decode_num_draft_tokens_total", "Draft tokens proposed")),
      accepted(
          Counters(r, "specdec_spec_decode_num_accepted_tokens_total", "Draft tokens accepted")),
      accepted_pos(Counters(r, "specdec_spec_decode_num_accepted_tokens_per_pos_total",
                            "Accepted draft tokens by draft position")),
      step_tau(Histograms(r, "specdec_acceptance_length_step",
                          "Tokens committed per target verify pass")),
      request_tau(Histograms(r, "specdec_acceptance_length_request",
                             "Mean acceptance length (tau) per request")),
      block_size(
          Counters(r, "specdec_block_size_chosen_total", "DFlash block sizes used, per request")),
      speedup(Histograms(r, "specdec_estimated_speedup",
                         "Per request: generated tokens x measured AR step time / decode time")),
      stage(Histograms(r, "specdec_stage_latency_seconds", "Per-request time in each stage")),
      ttft(Latency(r, "specdec_time_to_first_token_seconds", "Time to first token")),
      itl(Latency(r, "specdec_inter_token_latency_seconds",
                  "Mean time between streamed tokens, per request")),
      e2e(Latency(r, "specdec_request_latency_seconds", "End-to-end request latency")),
      outcomes(Counters(r, "specdec_requests_total", "Finished requests by gRPC status code")),
      fallbacks(Counters(r, "specdec_fallbacks_total",
                         "Requests that degraded (drafter -> AR, policy -> default size)")),
      active(Gauges(r, "specdec_active_requests", "Requests in flight").Add({})),
      queued(Gauges(r, "specdec_queued_requests",
                    "Requests waiting for admission (--max-active-requests)")
                 .Add({})),
      queue_wait(Latency(r, "specdec_queue_wait_seconds", "Time requests waited for admission")),
      replica_healthy(Gauges(r, "specdec_replica_healthy",
                             "1 while a backend replica answers its health check SERVING")),
      replica_picks(
          Counters(r, "specdec_replica_picks_total", "Requests sent to each backend replica")),
      load_aware(Counters(r, "specdec_load_aware_choices_total",
                          "Load-aware speculation epochs by load level (requests in flight) "
                          "and the arm chosen for them (AR or speculative)")),
      load_aware_steps(Counters(r, "specdec_load_aware_steps_total",
                                "Steps of DFLASH_ADAPTIVE requests by the arm load-aware "
                                "speculation ran them as")),
      load_aware_rate(Gauges(r, "specdec_load_aware_decode_rate",
                             "Measured output tokens/s per request in flight by load level "
                             "and arm (decayed mean over the arm's epochs)")),
      load_aware_advantage(Gauges(r, "specdec_load_aware_log_advantage",
                                  "Median log(speculative / AR epoch rate) over the recent "
                                  "paired epochs, by load level")),
      load_aware_pairs(
          Gauges(r, "specdec_load_aware_pairs", "Paired epochs measured so far, by load level")),
      load_aware_interval(Gauges(r, "specdec_load_aware_explore_interval_epochs",
                                 "Epochs between explorations of the other arm, by load "
                                 "level (backoff included; 0: it does not explore, a "
                                 "lower level having found AR at least as fast)")),
      load_aware_unmeasured(Gauges(r, "specdec_load_aware_unmeasured_epochs",
                                   "Epochs whose steps were too slow to measure within the "
                                   "epoch, by load level (cumulative)")),
      load_aware_epoch(Gauges(r, "specdec_load_aware_epoch_seconds",
                              "Length of the load-aware epochs beginning now (the mean "
                              "lifetime of finished requests, within the router's bounds)")
                           .Add({})),
      load_aware_block(Counters(r, "specdec_load_aware_block_size_total",
                                "Load-aware speculative runs by load level and the block size "
                                "they drafted (the step-cost model's pick, at most "
                                "BlockPilot's)")) {}

void RouterMetrics::ObserveStep(const std::string& method, const std::string& model,
                                const engine::StepInfo& step) {
  const prometheus::Labels labels = {{"method", method}, {"model", model}};
  step_tau.Add(labels, Histogram::BucketBoundaries{1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 24, 32})
      .Observe(step.accepted + 1);
  if (step.drafted == 0) return;
  drafts.Add(labels).Increment();
  draft_tokens.Add(labels).Increment(step.drafted);
  accepted.Add(labels).Increment(step.accepted);
  for (int32_t i = 0; i < step.accepted && i < step.positions; ++i) {
    accepted_pos.Add({{"method", method}, {"model", model}, {"position", std::to_string(i)}})
        .Increment();
  }
}

void RouterMetrics::ObserveRequest(const std::string& method, const std::string& model,
                                   const engine::DecodeStats& stats, double estimated_speedup) {
  request_tau
      .Add({{"method", method}, {"model", model}},
           Histogram::BucketBoundaries{1, 1.5, 2, 3, 4, 5, 6, 8, 10, 12, 16})
      .Observe(stats.tau());
  if (stats.block_size > 0) {
    block_size.Add({{"block_size", std::to_string(stats.block_size)}}).Increment();
  }
  if (estimated_speedup > 0) {
    speedup
        .Add({{"method", method}},
             Histogram::BucketBoundaries{0.5, 0.75, 1, 1.25, 1.5, 2, 2.5, 3, 4, 5, 6})
        .Observe(estimated_speedup);
  }
  if (stats.drafter_fallback || stats.hosted_draft_failures > 0) {
    fallbacks.Add({{"kind", "drafter"}}).Increment();
  }
  if (stats.policy_fallback) fallbacks.Add({{"kind", "policy"}}).Increment();
  ttft.Observe(stats.ttft_ms / 1000.0);
  if (stats.committed_tokens > 0) itl.Observe(stats.mean_itl_ms / 1000.0);
  for (auto [name, ms] :
       {std::pair{"prefill", stats.prefill_ms}, std::pair{"policy", stats.policy_ms},
        std::pair{"draft", stats.draft_ms}, std::pair{"verify", stats.verify_ms}}) {
    stage.Add({{"stage", name}}, LatencyBuckets()).Observe(ms / 1000.0);
  }
}

void RouterMetrics::ObserveLoadAware(const LoadAwareSpeculation& la) {
  using Arm = LoadAwareSpeculation::Arm;
  load_aware_epoch.Set(std::chrono::duration<double>(la.EpochLength()).count());
  for (int level = 0; level < LoadAwareSpeculation::kLevels; ++level) {
    const char* name = LoadAwareSpeculation::LevelName(level);
    bool seen = false;
    for (Arm arm : {Arm::kAr, Arm::kSpeculative}) {
      if (la.Epochs(level, arm) == 0) continue;
      seen = true;
      load_aware_rate.Add({{"level", name}, {"arm", LoadAwareSpeculation::ArmName(arm)}})
          .Set(la.Rate(level, arm));
    }
    if (!seen && la.Unmeasured(level) == 0) continue;
    load_aware_advantage.Add({{"level", name}}).Set(la.LogAdvantage(level));
    load_aware_pairs.Add({{"level", name}}).Set(static_cast<double>(la.Pairs(level)));
    load_aware_interval.Add({{"level", name}}).Set(la.ExploreInterval(level));
    load_aware_unmeasured.Add({{"level", name}}).Set(static_cast<double>(la.Unmeasured(level)));
  }
}

}  // namespace specdec::services
