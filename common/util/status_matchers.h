// GoogleTest helpers for absl::Status / absl::StatusOr (Debian's abseil ships no matchers).
#ifndef SPECDEC_COMMON_UTIL_STATUS_MATCHERS_H_
#define SPECDEC_COMMON_UTIL_STATUS_MATCHERS_H_

#include <gtest/gtest.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace specdec::testing_util {
inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}
}  // namespace specdec::testing_util

#define SPECDEC_ASSERT_OK(expr)                                              \
  do {                                                                       \
    auto&& specdec_v_ = (expr);                                              \
    const auto& specdec_s_ = ::specdec::testing_util::GetStatus(specdec_v_); \
    ASSERT_TRUE(specdec_s_.ok()) << specdec_s_.ToString();                   \
  } while (0)
#define SPECDEC_EXPECT_OK(expr)                                              \
  do {                                                                       \
    auto&& specdec_v_ = (expr);                                              \
    const auto& specdec_s_ = ::specdec::testing_util::GetStatus(specdec_v_); \
    EXPECT_TRUE(specdec_s_.ok()) << specdec_s_.ToString();                   \
  } while (0)
// Asserts a StatusOr is OK and moves its value into `lhs`.
#define SPECDEC_ASSERT_OK_AND_ASSIGN(lhs, expr) \
  SPECDEC_ASSERT_OK_AND_ASSIGN_IMPL_(SPECDEC_CONCAT_(specdec_sor_, __LINE__), lhs, expr)
#define SPECDEC_ASSERT_OK_AND_ASSIGN_IMPL_(sor, lhs, expr) \
  auto sor = (expr);                                       \
  ASSERT_TRUE(sor.ok()) << sor.status().ToString();        \
  lhs = std::move(sor).value()
#ifndef SPECDEC_CONCAT_
#define SPECDEC_CONCAT_INNER_(a, b) a##b
#define SPECDEC_CONCAT_(a, b) SPECDEC_CONCAT_INNER_(a, b)
#endif
// Expects a status with the given absl::StatusCode whose message contains `substr`.
#define SPECDEC_EXPECT_STATUS(expr, want_code, substr)                           \
  do {                                                                           \
    auto&& specdec_v_ = (expr);                                                  \
    const auto& specdec_s_ = ::specdec::testing_util::GetStatus(specdec_v_);     \
    EXPECT_EQ(specdec_s_.code(), (want_code)) << specdec_s_.ToString();          \
    EXPECT_NE(std::string(specdec_s_.message()).find(substr), std::string::npos) \
        << "message: " << specdec_s_.message() << " lacks: " << (substr);        \
  } while (0)

#endif  // SPECDEC_COMMON_UTIL_STATUS_MATCHERS_H_
