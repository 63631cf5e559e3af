// Tokenized corpora on disk: a flat array of int32 token ids, each document as BOS ... EOS.
#ifndef SPECDEC_TRAIN_TOKEN_FILE_H_
#define SPECDEC_TRAIN_TOKEN_FILE_H_

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tokenizer/tokenizer.h"

namespace specdec::train {

// Encodes every document as [BOS] ids [EOS] (BOS/EOS from the tokenizer; FAILED_PRECONDITION if
// it lacks them), concatenated, using `threads` threads; the order is the input order.
absl::StatusOr<std::vector<int32_t>> TokenizeDocuments(const tokenizer::Tokenizer& tokenizer,
                                                       std::span<const std::string> documents,
                                                       int threads);

// File format: "SDTOK1\0\0", uint64 count, then count little-endian int32 ids. Written atomically.
absl::Status WriteTokenFile(const std::string& path, std::span<const int32_t> ids);
// INVALID_ARGUMENT for a wrong magic or a size that does not match the count.
absl::StatusOr<std::vector<int32_t>> ReadTokenFile(const std::string& path);

}  // namespace specdec::train

#endif  // SPECDEC_TRAIN_TOKEN_FILE_H_
