// PCRE2-backed regular expression used by tokenizer pre-tokenizers and normalizers.
#ifndef SPECDEC_COMMON_TOKENIZER_REGEX_H_
#define SPECDEC_COMMON_TOKENIZER_REGEX_H_

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace specdec::tokenizer {

// A compiled pattern (PCRE2 with UTF and Unicode properties, JIT when available); immutable after
// Compile, so FindAll may be called from any number of threads at once.
class Regex {
 public:
  // Compiles `pattern` (taken literally when `literal`). Subjects may hold invalid UTF-8: such
  // bytes never match anything. Fails with INVALID_ARGUMENT carrying PCRE2's message and offset.
  static absl::StatusOr<std::unique_ptr<Regex>> Compile(std::string_view pattern, bool literal);

  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;

  // Returns the [begin, end) byte ranges of all non-empty, non-overlapping matches in `text`,
  // left to right.
  std::vector<std::pair<size_t, size_t>> FindAll(std::string_view text) const;

  const std::string& pattern() const { return pattern_; }

 private:
  Regex(std::string pattern, void* code) : pattern_(std::move(pattern)), code_(code) {}

  std::string pattern_;
  void* code_;  // pcre2_code_8*, kept opaque so the header does not pull in pcre2.h.
};

}  // namespace specdec::tokenizer

#endif  // SPECDEC_COMMON_TOKENIZER_REGEX_H_
