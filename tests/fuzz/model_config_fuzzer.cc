// config.json of arbitrary bytes: parsed and validated, or refused with a status.
#include <string_view>

#include "common/model/model_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  (void)specdec::model::ParseModelConfig(
      std::string_view(reinterpret_cast<const char*>(data), size), "fuzz/config.json");
  return 0;
}
