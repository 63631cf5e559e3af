#include "services/common/lookup_weighing_proto.h"

#include <cmath>
#include <span>

#include "absl/strings/str_cat.h"
#include "common/engine/request_limits.h"
#include "common/util/status_macros.h"

namespace specdec::services {
namespace {

constexpr char kField[] = "run.lookup.weighing.";

// Copies `values` into `out` (of out.size() values): each finite and in [0, most].
absl::Status Take(const google::protobuf::RepeatedField<float>& values, const char* name,
                  double most, std::span<double> out) {
  if (static_cast<size_t>(values.size()) != out.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kField, name, " must hold ", out.size(), " values, got ", values.size()));
  }
  for (int i = 0; i < values.size(); ++i) {
    const float v = values[i];
    if (!std::isfinite(v) || v < 0 || v > most) {
      return absl::InvalidArgumentError(
          absl::StrCat(kField, name, "[", i, "] must be in [0, ", most, "], got ", v));
    }
    out[static_cast<size_t>(i)] = v;
  }
  return absl::OkStatus();
}

void Put(std::span<const double> values, google::protobuf::RepeatedField<float>* out) {
  out->Clear();
  for (double v : values) out->Add(static_cast<float>(v));
}

}  // namespace

absl::StatusOr<engine::LookupWeighing> WeighingFromProto(const v1::LookupWeighing& proto) {
  engine::LookupWeighing w;
  const int steps = proto.step_ms().size();
  if (steps > engine::kMaxDraftLength + 1) {
    return absl::InvalidArgumentError(absl::StrCat(kField, "step_ms holds at most ",
                                                   engine::kMaxDraftLength + 1,
                                                   " values (1 .. 65 rows), got ", steps));
  }
  constexpr double kAny = 1e30;
  w.rows_ms.assign(static_cast<size_t>(steps) + 1, 0.0);
  RETURN_IF_ERROR(Take(proto.step_ms(), "step_ms", kAny, std::span<double>(w.rows_ms).subspan(1)));
  if (!std::isfinite(proto.alternative_rate()) || proto.alternative_rate() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        kField, "alternative_rate must be finite and >= 0, got ", proto.alternative_rate()));
  }
  w.alternative_rate = proto.alternative_rate();
  if (!(proto.decay() >= 0 && proto.decay() <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kField, "decay must be in [0, 1], got ", proto.decay()));
  }
  w.decay = proto.decay();
  RETURN_IF_ERROR(Take(proto.first_prior(), "first_prior", 1, w.priors.first));
  RETURN_IF_ERROR(Take(proto.first_drafted(), "first_drafted", kAny, w.odds.first_drafted));
  RETURN_IF_ERROR(Take(proto.first_accepted(), "first_accepted", kAny, w.odds.first_accepted));
  RETURN_IF_ERROR(Take(proto.reached(), "reached", kAny, w.odds.reached));
  RETURN_IF_ERROR(Take(proto.accepted(), "accepted", kAny, w.odds.accepted));
  return w;
}

void WeighingToProto(const engine::LookupWeighing& w, v1::LookupWeighing* proto) {
  const std::span<const double> rows(w.rows_ms);
  Put(rows.empty() ? rows : rows.subspan(1), proto->mutable_step_ms());
  proto->set_alternative_rate(static_cast<float>(w.alternative_rate));
  proto->set_decay(static_cast<float>(w.decay));
  Put(w.priors.first, proto->mutable_first_prior());
  Put(w.odds.first_drafted, proto->mutable_first_drafted());
  Put(w.odds.first_accepted, proto->mutable_first_accepted());
  Put(w.odds.reached, proto->mutable_reached());
  Put(w.odds.accepted, proto->mutable_accepted());
}

}  // namespace specdec::services
