// The ModelInfo that describes a served model, shared by every service that serves one: the
// target (its model, and a hosted DFlash drafter) and the drafter service (its draft models).
#ifndef SPECDEC_SERVICES_COMMON_MODEL_INFO_H_
#define SPECDEC_SERVICES_COMMON_MODEL_INFO_H_

#include <string>

#include "specdec/v1/common.pb.h"

namespace specdec::model {
class DFlashDrafter;
class Transformer;
}  // namespace specdec::model

namespace specdec::services {

// Fills name, architecture, block size, mask token, target layers, layer count, hidden size,
// vocabulary and feature width of `drafter` into `info`.
void FillDFlashInfo(const model::DFlashDrafter& drafter, v1::ModelInfo* info);

// Fills `name`, architecture, vocabulary, hidden size, layer count, context, BOS/EOS, compute
// dtype and device of the decoder `model` into `info`.
void FillTransformerInfo(const model::Transformer& model, const std::string& name,
                         v1::ModelInfo* info);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_MODEL_INFO_H_
