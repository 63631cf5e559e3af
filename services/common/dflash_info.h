// The ModelInfo that describes a DFlash drafter, shared by every service that serves one (the
// drafter service, and the target service when it hosts the drafter).
#ifndef SPECDEC_SERVICES_COMMON_DFLASH_INFO_H_
#define SPECDEC_SERVICES_COMMON_DFLASH_INFO_H_

#include "specdec/v1/common.pb.h"

namespace specdec::model {
class DFlashDrafter;
}

namespace specdec::services {

// Fills name, architecture, block size, mask token, target layers, layer count, hidden size,
// vocabulary and feature width of `drafter` into `info`.
void FillDFlashInfo(const model::DFlashDrafter& drafter, v1::ModelInfo* info);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_DFLASH_INFO_H_
