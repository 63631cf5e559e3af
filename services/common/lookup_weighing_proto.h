// LookupWeighing (common/engine/lookup_weighing.h) on the wire: target.proto's
// PromptLookup.weighing, which the router sends with a run and the target carries from each of the
// run's steps to the next. Torch-free.
#ifndef SPECDEC_SERVICES_COMMON_LOOKUP_WEIGHING_PROTO_H_
#define SPECDEC_SERVICES_COMMON_LOOKUP_WEIGHING_PROTO_H_

#include "absl/status/statusor.h"
#include "common/engine/lookup_weighing.h"
#include "specdec/v1/target.pb.h"

namespace specdec::services {

// The weighing a message describes, or INVALID_ARGUMENT naming the field
// ("run.lookup.weighing.<name>") where a size, range or value breaks target.proto's rules.
absl::StatusOr<engine::LookupWeighing> WeighingFromProto(const v1::LookupWeighing& proto);
void WeighingToProto(const engine::LookupWeighing& weighing, v1::LookupWeighing* proto);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_LOOKUP_WEIGHING_PROTO_H_
