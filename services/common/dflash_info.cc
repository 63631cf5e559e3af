#include "services/common/dflash_info.h"

#include "common/model/dflash_drafter.h"
#include "common/model/transformer.h"

namespace specdec::services {

void FillDFlashInfo(const model::DFlashDrafter& d, v1::ModelInfo* info) {
  info->set_name("dflash");
  info->set_architecture("dflash");
  info->set_block_size(d.config().block_size);
  info->set_mask_token_id(d.config().mask_token_id);
  for (int64_t id : d.config().target_layer_ids) info->add_target_layer_ids(id);
  info->set_num_layers(d.config().layers.num_hidden_layers);
  info->set_hidden_size(d.config().layers.hidden_size);
  info->set_vocab_size(d.target().config().vocab_size);
  info->set_feature_width(static_cast<int64_t>(d.config().target_layer_ids.size()) *
                          d.target().config().hidden_size);
}

}  // namespace specdec::services
