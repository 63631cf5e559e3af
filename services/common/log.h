// Structured log lines on stderr: one line per event, `<UTC time> <LEVEL> <event> key=value ...`,
// written whole (lines of concurrent threads never interleave). Thread-safe.
#ifndef SPECDEC_SERVICES_COMMON_LOG_H_
#define SPECDEC_SERVICES_COMMON_LOG_H_

#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace specdec::services {

enum class LogLevel { kError = 0, kWarning = 1, kInfo = 2 };

// "error", "warning" or "info" (the --log-level flags); INVALID_ARGUMENT otherwise.
absl::StatusOr<LogLevel> ParseLogLevel(std::string_view name);
// Lines above `level` are dropped; the default is kInfo.
void SetLogLevel(LogLevel level);
bool LogEnabled(LogLevel level);

// Writes `event` and its fields (already formatted as ` key=value` pairs) at `level`.
void Log(LogLevel level, std::string_view event, std::string_view fields);

// A logfmt value: bare when it is a plain word, else double-quoted with \ and " escaped and
// control characters as \n, \t or \xNN.
std::string LogValue(absl::string_view value);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_LOG_H_
