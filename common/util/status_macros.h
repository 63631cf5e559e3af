// Thin status-propagation macros for abseil 20220623, which ships none.
#ifndef SPECDEC_COMMON_UTIL_STATUS_MACROS_H_
#define SPECDEC_COMMON_UTIL_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SPECDEC_CONCAT_INNER_(a, b) a##b
#define SPECDEC_CONCAT_(a, b) SPECDEC_CONCAT_INNER_(a, b)

// Returns from the enclosing function if `expr` (an absl::Status) is not OK.
#define RETURN_IF_ERROR(expr)                          \
  do {                                                 \
    ::absl::Status specdec_status_ = (expr);           \
    if (!specdec_status_.ok()) return specdec_status_; \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` evaluates a StatusOr, returns its status on error, and
// otherwise moves the value into the declaration on the left.
#define ASSIGN_OR_RETURN(lhs, expr) \
  SPECDEC_ASSIGN_OR_RETURN_IMPL_(SPECDEC_CONCAT_(specdec_statusor_, __LINE__), lhs, expr)

#define SPECDEC_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                   \
  if (!statusor.ok()) return std::move(statusor).status();  \
  lhs = std::move(statusor).value()

#endif  // SPECDEC_COMMON_UTIL_STATUS_MACROS_H_
