#include "services/common/model_info.h"

#include <ATen/ATen.h>

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
  info->set_device(d.target().device().str());
}

void FillTransformerInfo(const model::Transformer& m, const std::string& name,
                         v1::ModelInfo* info) {
  const model::ModelConfig& c = m.config();
  info->set_name(name);
  info->set_architecture(model::ArchitectureName(c.architecture));
  info->set_vocab_size(c.vocab_size);
  info->set_hidden_size(c.hidden_size);
  info->set_num_layers(c.num_hidden_layers);
  info->set_max_context(m.max_context());
  info->set_bos_token_id(c.bos_token_id ? *c.bos_token_id : -1);
  for (int32_t e : c.eos_token_ids) info->add_eos_token_ids(e);
  info->set_dtype(m.dtype() == at::kBFloat16 ? "bf16" : "f32");
  info->set_device(m.device().str());
}

}  // namespace specdec::services
