// The cost model behind block choice: the acceptance per draft position and the costs of the
// target's and the drafter's passes as measured on this machine, and the block that maximizes a
// request's decode rate at a given load (the router's load awareness; CostAwareHook for
// DFLASH_ADAPTIVE everywhere).
#ifndef SPECDEC_COMMON_ENGINE_BLOCK_COST_MODEL_H_
#define SPECDEC_COMMON_ENGINE_BLOCK_COST_MODEL_H_

#include <array>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "common/engine/prompt_lookup.h"

namespace specdec::engine {

// Where a verify costs about one step (a GPU, a lone request) a lone request decodes fastest
// with about the drafter's training block, but every block's rows cost something: on a CPU a
// 17-row verify of the pack costs several 1-row steps, and under load every request's block adds
// rows to the target's shared forward pass and to the hosted drafter's (16 requests verifying 16
// rows each make a 256-row pass), while most of a block's tail is rejected anyway. A smaller
// block gives up a little acceptance for a much cheaper pass.
//
// The model: a step of n requests with block b commits tau(b) tokens per request, where
// tau(b) = 1 + sum over i < b of P(draft position i accepted), measured per position from the
// drafted steps; and it costs V(n b) + D(n b) + O milliseconds, where V and D are the measured
// (rows, ms) of the target's forward passes and of the drafter's passes (as the sides report
// them per step): decayed means per row count, interpolated between measured counts, and beyond
// them straight lines fitted through all of them, and never more than a larger pass's mean; O is
// the measured rest of a step's wall time: of a lone request, a time of its own, for AR and for
// drafted steps apart (at the router: the scheduler, the stream); under load (n >= 2), a share
// of the step's passes, since a request that is not ready when a pass forms waits for that pass
// to end, so that the rest grows with the rows every request verifies. Until the drafter's
// passes have been seen at different sizes (a lone request drafts one size), D is taken to
// grow with rows as V does, scaled through its measured mean. Acceptance depends on the
// sampling temperature (at T=1 a drafter's token is accepted with the target's probability of
// it, at T=0 only when it is the target's argmax), so it is kept per temperature class
// (AcceptanceClass); a class with no step measured at a position answers with every class's
// steps together. Each request's rate is
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
  static constexpr int kAcceptanceClasses = 4;
  // The temperature class whose acceptance a request shares: 0 for greedy decoding (T = 0),
  // 1 for 0 < T <= 0.5, 2 for 0.5 < T <= 1, 3 above 1 (NaN: 0).
  static int AcceptanceClass(double temperature);

  BlockCostModel() : BlockCostModel(Options{}) {}
  explicit BlockCostModel(Options options);

  // One step of a server-side run as the target reported it. `sessions` sequences shared its
  // forward pass of `pass_rows` rows that took `pass_ms`; a speculative step's block was drafted
  // in a batched drafter pass of `draft_rows` rows that took `draft_ms` (0 and 0 for an AR step).
  // `wall_ms` is the step's time at the router (< 0: unknown, e.g. the first step of a run,
  // which includes the request's round trip). `prompt_rows` of the pass's rows were new
  // requests' prompts that joined it: such a pass does not price the sequences' rows (a prompt's
  // rows cost less each than as many rows spread over the sequences, 0.05 against 0.075 ms on
  // the pack at 16 requests, so its passes made lookups under load look cheap), only the rest.
  struct StepCost {
    int sessions = 1;
    int pass_rows = 0;
    int prompt_rows = 0;
    double pass_ms = 0;
    int draft_rows = 0;
    double draft_ms = 0;
    double wall_ms = -1;
  };
  void ObserveStep(const StepCost& step);
  // A speculative step of a request in `acceptance_class` drafted `drafted` tokens and the target
  // accepted the first `accepted`.
  void ObserveAcceptance(int drafted, int accepted, int acceptance_class);
  // The same for a prompt-lookup step whose suffix match was `match` tokens long (its acceptance
  // is the sequence's repetition, not the drafter's: kept apart, and per match length, since a
  // 3-token match is accepted far more often than a 1-token one; 0: unknown, kept apart too).
  void ObserveLookup(int drafted, int accepted, int acceptance_class, int match);

  // Expected tokens a step with block `block` commits in `acceptance_class` (1 for block <= 1).
  double Tau(int block, int acceptance_class) const;
  // The measured share of steps that drafted position `position` (0-based) and had it accepted in
  // `acceptance_class` (every class's, where that class has none at this position), with the
  // (decayed) number of such steps in `weight`; 0 and 0 before any.
  double AcceptedShare(int position, int acceptance_class, double* weight) const;
  // AcceptedShare of prompt-lookup steps of a `match`-token suffix match.
  double LookupShare(int position, int acceptance_class, int match, double* weight) const;
  // Expected milliseconds of a step in which `sessions` requests each verify `block` rows
  // (block 1: an AR step); 0 while the model has no pass measured.
  double StepMs(int sessions, int block) const;
  // Expected milliseconds of a step that verifies `rows` rows per request with no drafter pass
  // (a prompt-lookup draft): the target's pass and the rest of an AR step; 0 while unmeasured.
  double DrafterlessStepMs(int sessions, int rows) const;
  // What a block decision weighs, read under one lock (CostAwareHook reads it once per decision
  // instead of once per candidate): StepMs(sessions, b) for b in [1, max_block],
  // DrafterlessStepMs(sessions, r) for r in [1, max_rows], AcceptedShare(i, acceptance_class)
  // for i < max_block - 1, and LookupShare(0, acceptance_class, m) for every match length m.
  struct Reading {
    std::vector<double> step_ms;              // [b]; [0] unused
    std::vector<double> drafterless_ms;       // [r]; [0] unused
    std::vector<double> share, share_weight;  // [i]
    std::array<double, kLookupMaxMatch + 1> lookup_share{}, lookup_weight{};  // [match]
  };
  Reading Read(int sessions, int max_block, int max_rows, int acceptance_class) const;
  // The block in [2, max_block] with the highest Tau / StepMs for `sessions` requests in flight
  // in `acceptance_class`; max_block until min_steps speculative steps have been observed.
  int BestBlock(int sessions, int max_block, int acceptance_class) const;
  int64_t SpeculativeSteps() const;
  // How many decisions a request of `acceptance_class` waits before it drafts the block (kBlock)
  // or verifies the lookup (kLookup) that its predictions decline, a probe of its own acceptance
  // (CostAwareHook); `initial` until a request sets it. Kept per class and shared by its
  // requests, so that where probes keep losing (the pack's drafter at T = 1) a new request does
  // not start probing from the shortest wait again; one that pays shortens it for all.
  enum class ProbeKind { kBlock = 0, kLookup = 1 };
  int ProbeWait(ProbeKind kind, int acceptance_class, int initial) const;
  void SetProbeWait(ProbeKind kind, int acceptance_class, int wait);
  // Numbers the block decisions taken on this model: 0, 1, 2, ... (for exploration schedules).
  int64_t NextDecision();
  // Counts a decision of a request of `acceptance_class` that did not draft, returning how many
  // such decisions the class has made since one of its steps last drafted (this one included);
  // ResetUndrafted starts the count again. Kept per class and shared by its requests, so that
  // short requests (a hosted run decides once per 16 tokens) still reach the probe wait.
  int64_t CountUndraftedDecision(int acceptance_class);
  void ResetUndrafted(int acceptance_class);
  // Whether a request of `acceptance_class` that starts while both its probe waits are at their
  // longest measures the drafter (speculates and probes; CostAwareHook::Speculates runs the others
  // without it): the first such request does, then the first after `initial` more, each wait
  // after that twice the one before up to `longest` (a request that meets the waits at their
  // longest again finds that the last measuring request's probes lost too); ResetLosing (a
  // decision to speculate shortened the class's wait) starts again.
  bool NextLosingRequestMeasures(int acceptance_class, int initial, int longest);
  void ResetLosing(int acceptance_class);

 private:
  // A weighted least-squares line y = a + c x over decayed observations.
  struct Line {
    double w = 0, x = 0, y = 0, xx = 0, xy = 0;
    // The last fit the passes allowed (kept_c < 0: none yet). A lone request that stops drafting
    // runs 1-row passes only: its spread decays away within about a second, and a line through
    // the origin then priced a 2-row step at twice a 1-row one (1.3 times on the pack's CPU), so
    // that its lookups stopped for good.
    double kept_a = 0, kept_c = -1;
    void Add(double decay, double weight, double xi, double yi);
    // False when x has too little spread for a slope (or the fit is not a cost: a < 0 or c < 0).
    bool Fit(double* a, double* c) const;
    // The fitted line at xi; without a fit, the last fit's shape scaled through the mean, else
    // `shape`'s (a cost curve known up to scale), else the line through the origin and the mean.
    double At(double xi, const Line* shape = nullptr) const;
  };
  // Decayed mean costs per row count: a pass's cost is not a straight line in its rows (on a
  // CPU, a few rows cost little more than one), so a cost between two measured row counts is
  // interpolated between them; beyond them the line answers.
  struct Curve {
    struct Point {
      int rows = 0;
      double weight = 0, weighted_ms = 0;  // both divided by `scale`
    };
    // Sorted by rows. Every observation decays every point alike, so the decay is kept once, in
    // `scale` (a point's weight is weight * scale): an observation then touches one point, not
    // all of them (a step's observation follows a pass that left the caches cold).
    std::vector<Point> points;
    double scale = 1;
    void Add(double decay, double weight, int rows, double ms);
    // The mean cost measured at `rows` rows, else interpolated between the nearest measured row
    // counts on either side, else `line` (with `shape`); capped by the least mean measured at
    // `rows` rows or more: a pass never costs more than a larger one, so a stale or noisy mean is
    // capped by the larger passes'. Points of under half a pass's weight (decayed) do not count.
    double At(int rows, const Line& line, const Line* shape = nullptr) const;
    // At(rows) for every rows in [0, most], in one pass over the points.
    std::vector<double> AtEach(int most, const Line& line, const Line* shape = nullptr) const;
  };
  struct Mean {
    double w = 0, sum = 0;
  };
  // Decayed counts of steps that drafted a position and had it accepted, per class.
  struct Acceptance {
    std::array<std::array<double, kMaxPositions>, kAcceptanceClasses> drafted{}, accepted{};
    void Add(double decay, int drafted_tokens, int accepted_tokens, int acceptance_class);
    // The class's share at `position` (every class's, where the class has none there).
    double Share(int position, int acceptance_class, double* weight) const;
  };
  double TauLocked(int block, int acceptance_class) const;
  // The rest of a lone request's step beyond its passes, as measured for steps of its kind
  // (drafted or not), else of the other kind; 0 before any.
  double OverheadMsLocked(bool drafted) const;
  // A step of `sessions` requests whose passes take `passes_ms`, with the rest of its time: a
  // share of the passes under load where one was measured, else OverheadMsLocked.
  double WithRestLocked(int sessions, double passes_ms, bool drafted) const;
  double StepMsLocked(int sessions, int block) const;
  double DrafterlessStepMsLocked(int sessions, int rows) const;

  Options options_;
  mutable std::mutex mu_;
  Line verify_, draft_;
  Curve verify_curve_, draft_curve_;
  // Decayed means of wall - pass - draft ms, of a lone request's AR steps and drafted steps.
  Mean ar_overhead_, spec_overhead_;
  // Decayed mean of (wall - pass - draft) / (pass + draft) of steps in passes of 2+ sessions.
  Mean shared_rest_;
  Acceptance drafter_acceptance_;
  std::array<Acceptance, kLookupMaxMatch + 1> lookup_acceptance_;    // [match]
  std::array<std::array<int, kAcceptanceClasses>, 2> probe_wait_{};  // 0: unset
  int64_t spec_steps_ = 0;
  int64_t decisions_ = 0;
  // Per class: requests without the drafter since the last measuring one, and the wait before
  // the next (0: none measured since ResetLosing).
  std::array<int64_t, kAcceptanceClasses> losing_requests_{}, measure_wait_{};
  std::array<int64_t, kAcceptanceClasses> undrafted_decisions_{};
};

}  // namespace specdec::engine

#endif  // SPECDEC_COMMON_ENGINE_BLOCK_COST_MODEL_H_
