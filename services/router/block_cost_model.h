// The block size of a load-aware speculative step: the one that maximizes every request's
// decode rate at the current load, modelled from the acceptance and pass costs the router
// measures.
#ifndef SPECDEC_SERVICES_ROUTER_BLOCK_COST_MODEL_H_
#define SPECDEC_SERVICES_ROUTER_BLOCK_COST_MODEL_H_

#include <array>
#include <cstdint>
#include <mutex>

namespace specdec::services {

// A lone request decodes fastest with the block BlockPilot picks (about the drafter's training
// block), but under load every request's block adds rows to the target's shared forward pass
// and to the hosted drafter's: 16 requests verifying 16 rows each make a 256-row pass, several
// times the cost of their AR pass, while most of a block's tail is rejected anyway. A smaller
// block gives up a little acceptance for a much cheaper pass.
//
// The model: a step of n requests with block b commits tau(b) tokens per request, where
// tau(b) = 1 + sum over i < b of P(draft position i accepted), measured per position from the
// hosted drafter's steps; and it costs V(n b) + D(n b) + O milliseconds, where V and D are
// straight lines through the measured (rows, ms) of the target's forward passes and of the
// hosted drafter's batched passes (as the target reports them per step), and O is the measured
// rest of a step's wall time at the router (the scheduler, the stream). Until the drafter's
// passes have been seen at different sizes (a lone request drafts one size), D is taken to
// grow with rows as V does, scaled through its measured mean. Each request's rate is
// tau(b) / cost; BestBlock returns its argmax. Whether speculation beats AR at all at this load
// is not decided here (LoadAwareSpeculation measures that); this picks the block the
// speculative arm runs. Observations decay, so the model follows the machine. Thread-safe.
class BlockCostModel {
 public:
  struct Options {
    double decay = 0.998;  // weight a pass's past keeps per new pass observed (0.998: ~500)
    int min_steps = 32;    // speculative steps observed before BestBlock departs from the cap
  };
  static constexpr int kMaxPositions = 64;  // draft positions whose acceptance is tracked

  BlockCostModel() : BlockCostModel(Options{}) {}
  explicit BlockCostModel(Options options);

  // One step of a server-side run as the target reported it. `sessions` sequences shared its
  // forward pass of `pass_rows` rows that took `pass_ms`; a speculative step's block was drafted
  // in a batched drafter pass of `draft_rows` rows that took `draft_ms` (0 and 0 for an AR step).
  // `wall_ms` is the step's time at the router (< 0: unknown, e.g. the first step of a run,
  // which includes the request's round trip).
  struct StepCost {
    int sessions = 1;
    int pass_rows = 0;
    double pass_ms = 0;
    int draft_rows = 0;
    double draft_ms = 0;
    double wall_ms = -1;
  };
  void ObserveStep(const StepCost& step);
  // A speculative step drafted `drafted` tokens and the target accepted the first `accepted`.
  void ObserveAcceptance(int drafted, int accepted);

  // Expected tokens a step with block `block` commits (1 for block <= 1).
  double Tau(int block) const;
  // Expected milliseconds of a step in which `sessions` requests each verify `block` rows
  // (block 1: an AR step); 0 while the model has no pass measured.
  double StepMs(int sessions, int block) const;
  // The block in [2, max_block] with the highest Tau / StepMs for `sessions` requests in flight;
  // max_block until min_steps speculative steps have been observed.
  int BestBlock(int sessions, int max_block) const;
  int64_t SpeculativeSteps() const;

 private:
  // A weighted least-squares line y = a + c x over decayed observations.
  struct Line {
    double w = 0, x = 0, y = 0, xx = 0, xy = 0;
    void Add(double decay, double weight, double xi, double yi);
    // False when x has too little spread for a slope (or the fit is not a cost: a < 0 or c < 0).
    bool Fit(double* a, double* c) const;
    // The fitted line at xi; without a fit, `shape` (a cost curve known up to scale) scaled
    // through the mean, or else the line through the origin and the mean.
    double At(double xi, const Line* shape = nullptr) const;
  };
  double TauLocked(int block) const;
  double StepMsLocked(int sessions, int block) const;

  Options options_;
  mutable std::mutex mu_;
  Line verify_, draft_;
  double overhead_ = 0, overhead_w_ = 0;  // decayed mean of wall - pass - draft ms
  std::array<double, kMaxPositions> drafted_{}, accepted_{};  // decayed counts per position
  int64_t spec_steps_ = 0;
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_BLOCK_COST_MODEL_H_
