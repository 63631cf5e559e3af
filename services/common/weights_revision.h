// ModelInfo.revision: a content hash of a checkpoint's weights, so that a drafter or a policy
// can be tied to the exact target it was trained for, and a client can tell two deployments of
// the same model name apart.
#ifndef SPECDEC_SERVICES_COMMON_WEIGHTS_REVISION_H_
#define SPECDEC_SERVICES_COMMON_WEIGHTS_REVISION_H_

#include <string>

#include "absl/status/statusor.h"

namespace specdec::services {

// 16 hex digits of a 64-bit hash over the bytes of every *.safetensors file of the checkpoint
// directory `dir`, in name order (or of `dir` itself when it is a file). Reads every byte once:
// about 0.5 s per GB from the page cache. NOT_FOUND when there is no such file.
absl::StatusOr<std::string> WeightsRevision(const std::string& dir);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_WEIGHTS_REVISION_H_
