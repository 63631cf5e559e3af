#include "common/engine/request.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace specdec::engine {

const char* MethodName(Method m) {
  switch (m) {
    case Method::kAr:
      return "AR";
    case Method::kDraftChain:
      return "DRAFT_CHAIN";
    case Method::kDyspecTree:
      return "DYSPEC_TREE";
    case Method::kDflash:
      return "DFLASH";
    case Method::kDflashAdaptive:
      return "DFLASH_ADAPTIVE";
    case Method::kNgram:
      return "NGRAM";
  }
  return "UNKNOWN";
}

absl::StatusOr<Method> ParseMethod(std::string_view name) {
  const std::string upper = absl::AsciiStrToUpper(std::string(name));
  for (Method m : kAllMethods) {
    if (upper == MethodName(m)) return m;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown method '", std::string(name),
                   "'; expected AR, DRAFT_CHAIN, DYSPEC_TREE, DFLASH, DFLASH_ADAPTIVE or NGRAM"));
}

}  // namespace specdec::engine
