// API keys at the router: bearer tokens checked for every Generate call and every HTTP request
// but /health, read from a keys file that stores only their SHA-256 digests, each with its own
// limits: requests at once and a token rate. docs/design.md section 1.8 describes the file.
#ifndef SPECDEC_SERVICES_ROUTER_API_KEYS_H_
#define SPECDEC_SERVICES_ROUTER_API_KEYS_H_

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/util/clock.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/registry.h"

namespace specdec::services {

// One key of the keys file.
struct ApiKeyEntry {
  std::string id;                 // names the key in metrics and logs (never the key itself)
  std::string sha256;             // lowercase hex digest of the key
  int max_concurrent = 0;         // requests at once; 0 = unlimited
  int64_t tokens_per_minute = 0;  // prompt + completion tokens; 0 = unlimited
  bool revoked = false;
};

// Parses the keys file's JSON: {"keys": [{"id", "sha256", "max_concurrent", "tokens_per_minute",
// "revoked"}]}. INVALID_ARGUMENT naming the entry and field at fault.
absl::StatusOr<std::vector<ApiKeyEntry>> ParseApiKeys(std::string_view json);

// Lowercase hex SHA-256 of `key`.
std::string Sha256Hex(std::string_view key);

// The key that an `Authorization` value ("Bearer <key>") presents; "" when there is none.
std::string BearerToken(std::string_view authorization);

// The keys and their usage. Thread-safe.
class ApiKeys {
 public:
  // Reads `path`; the file is read again when its modification time changes (checked at most once
  // a second), so keys are added, changed and revoked without a restart. Usage survives reloads.
  static absl::StatusOr<std::unique_ptr<ApiKeys>> Load(const std::string& path,
                                                       prometheus::Registry& registry);
  // Keys given directly (tests); never reloaded.
  static std::unique_ptr<ApiKeys> FromEntries(std::vector<ApiKeyEntry> entries,
                                              prometheus::Registry& registry);

  // One admitted request's hold on its key: releases the concurrency slot when destroyed, and
  // charges the tokens the request used.
  class Grant {
   public:
    Grant() = default;
    Grant(Grant&& other) noexcept;
    Grant& operator=(Grant&& other) noexcept;
    ~Grant();
    const std::string& key_id() const { return key_id_; }
    void Charge(int64_t tokens);

   private:
    friend class ApiKeys;
    ApiKeys* keys_ = nullptr;
    std::string key_id_;
  };

  // The grant for a request presenting `authorization`: UNAUTHENTICATED when it presents no key or
  // an unknown one, PERMISSION_DENIED for a revoked key, RESOURCE_EXHAUSTED over the key's
  // concurrency or token rate (RetryAfterMs tells when to retry).
  absl::StatusOr<Grant> Admit(std::string_view authorization,
                              SteadyClock::time_point now = SteadyClock::now());
  // Only the identity: UNAUTHENTICATED or PERMISSION_DENIED as Admit, no limit applied or taken
  // (requests that generate nothing, such as GET /v1/models).
  absl::Status Authenticate(std::string_view authorization);

 private:
  struct Usage {
    int active = 0;
    double bucket = 0;  // tokens that may still be spent; negative = debt
    SteadyClock::time_point refilled{};
    bool initialized = false;
  };
  ApiKeys(std::string path, prometheus::Registry& registry);
  void Install(std::vector<ApiKeyEntry> entries);
  void MaybeReload(SteadyClock::time_point now);
  void Refill(const ApiKeyEntry& key, Usage& usage, SteadyClock::time_point now) const;
  void Release(const std::string& id);
  void AddTokens(const std::string& id, int64_t tokens);
  void Count(const std::string& id, const absl::Status& status);
  // The key `authorization` presents, or why none is usable. Called with mu_ held.
  absl::StatusOr<const ApiKeyEntry*> Identify(std::string_view authorization);

  const std::string path_;  // "" = never reloaded
  std::mutex mu_;
  std::map<std::string, ApiKeyEntry> by_digest_;
  std::map<std::string, Usage> usage_;  // by key id
  std::filesystem::file_time_type mtime_{};
  SteadyClock::time_point checked_{};
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Counter>* tokens_;
  prometheus::Family<prometheus::Gauge>* active_;
};

// A RESOURCE_EXHAUSTED status's retry hint in milliseconds (0 when it carries none).
int64_t RetryAfterMs(const absl::Status& status);
// Attaches a retry hint to `status`.
absl::Status WithRetryAfter(absl::Status status, int64_t retry_after_ms);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_API_KEYS_H_
