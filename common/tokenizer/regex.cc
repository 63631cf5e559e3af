#include "common/tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"

namespace specdec::tokenizer {
namespace {

pcre2_code* Code(void* p) { return static_cast<pcre2_code*>(p); }
// Debian's abseil is built without std::string_view aliasing: convert explicitly.
absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace

absl::StatusOr<std::unique_ptr<Regex>> Regex::Compile(std::string_view pattern, bool literal) {
  uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
  options |= literal ? PCRE2_LITERAL : PCRE2_UCP;  // PCRE2_LITERAL rejects PCRE2_UCP.
  int error_code = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error_code, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR buffer[256];
    pcre2_get_error_message(error_code, buffer, sizeof(buffer));
    return absl::InvalidArgumentError(absl::StrCat("cannot compile regex '", AV(pattern),
                                                   "' at offset ", error_offset, ": ",
                                                   reinterpret_cast<const char*>(buffer)));
  }
  pcre2_jit_compile(code,
                    PCRE2_JIT_COMPLETE);  // Optional speed-up; the interpreter is the fallback.
  return std::unique_ptr<Regex>(new Regex(std::string(pattern), code));
}

Regex::~Regex() { pcre2_code_free(Code(code_)); }

std::vector<std::pair<size_t, size_t>> Regex::FindAll(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> out;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(Code(code_), nullptr);
  if (md == nullptr) return out;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t start = 0;
  while (start <= text.size()) {
    const int rc = pcre2_match(Code(code_), subject, text.size(), start, 0, md, nullptr);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH or a resource limit: no further matches.
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    const size_t begin = ov[0];
    const size_t end = ov[1];
    if (end > begin) {
      out.emplace_back(begin, end);
      start = end;
    } else {
      // Empty match: step over one byte and any continuation bytes after it.
      start = begin + 1;
      while (start < text.size() && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) ++start;
    }
  }
  pcre2_match_data_free(md);
  return out;
}

}  // namespace specdec::tokenizer
