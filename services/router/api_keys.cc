#include "services/router/api_keys.h"

#include <openssl/sha.h>

#include <cmath>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "services/common/log.h"

namespace specdec::services {

namespace {

constexpr char kRetryPayload[] = "type.specdec.dev/retry_after_ms";

absl::Status EntryError(size_t i, const std::string& field, const std::string& what) {
  return absl::InvalidArgumentError(absl::StrCat("keys[", i, "].", field, " ", what));
}

absl::StatusOr<ApiKeyEntry> ParseEntry(const nlohmann::json& k, size_t i) {
  if (!k.is_object())
    return absl::InvalidArgumentError(absl::StrCat("keys[", i, "] must be an object"));
  ApiKeyEntry e;
  if (!k.contains("id") || !k["id"].is_string() || k["id"].get<std::string>().empty()) {
    return EntryError(i, "id", "must be a non-empty string");
  }
  e.id = k["id"].get<std::string>();
  if (!k.contains("sha256") || !k["sha256"].is_string()) {
    return EntryError(i, "sha256", "must be the key's SHA-256 as 64 hex digits");
  }
  e.sha256 = absl::AsciiStrToLower(k["sha256"].get<std::string>());
  if (e.sha256.size() != 64 ||
      e.sha256.find_first_not_of("0123456789abcdef") != std::string::npos) {
    return EntryError(i, "sha256", "must be the key's SHA-256 as 64 hex digits");
  }
  for (const char* field : {"max_concurrent", "tokens_per_minute"}) {
    if (!k.contains(field)) continue;
    if (!k[field].is_number_integer() || k[field].get<int64_t>() < 0) {
      return EntryError(i, field, "must be a non-negative integer (0 = unlimited)");
    }
  }
  e.max_concurrent = k.value("max_concurrent", 0);
  e.tokens_per_minute = k.value("tokens_per_minute", int64_t{0});
  if (k.contains("revoked") && !k["revoked"].is_boolean()) {
    return EntryError(i, "revoked", "must be true or false");
  }
  e.revoked = k.value("revoked", false);
  return e;
}

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read the API keys file ", path));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

absl::StatusOr<std::vector<ApiKeyEntry>> ParseApiKeys(std::string_view json) {
  nlohmann::json j = nlohmann::json::parse(json, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("keys") || !j["keys"].is_array()) {
    return absl::InvalidArgumentError("the API keys file must be JSON: {\"keys\": [...]}");
  }
  std::vector<ApiKeyEntry> out;
  std::map<std::string, size_t> ids, digests;
  for (size_t i = 0; i < j["keys"].size(); ++i) {
    absl::StatusOr<ApiKeyEntry> e = ParseEntry(j["keys"][i], i);
    if (!e.ok()) return e.status();
    if (!ids.emplace(e->id, i).second) return EntryError(i, "id", "repeats another key's id");
    if (!digests.emplace(e->sha256, i).second) {
      return EntryError(i, "sha256", "repeats another key's digest");
    }
    out.push_back(*std::move(e));
  }
  return out;
}

std::string Sha256Hex(std::string_view key) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(key.data()), key.size(), digest);
  std::string hex;
  for (unsigned char c : digest) absl::StrAppendFormat(&hex, "%02x", c);
  return hex;
}

std::string BearerToken(std::string_view authorization) {
  std::string value(authorization);
  constexpr size_t kScheme = 7;  // "Bearer "
  if (value.size() <= kScheme || absl::AsciiStrToLower(value.substr(0, kScheme)) != "bearer ") {
    return "";
  }
  return std::string(absl::StripAsciiWhitespace(value.substr(kScheme)));
}

int64_t RetryAfterMs(const absl::Status& status) {
  auto p = status.GetPayload(kRetryPayload);
  int64_t ms = 0;
  return p && absl::SimpleAtoi(std::string(*p), &ms) ? ms : 0;
}

absl::Status WithRetryAfter(absl::Status status, int64_t retry_after_ms) {
  status.SetPayload(kRetryPayload, absl::Cord(std::to_string(retry_after_ms)));
  return status;
}

ApiKeys::ApiKeys(std::string path, prometheus::Registry& registry)
    : path_(std::move(path)),
      requests_(&prometheus::BuildCounter()
                     .Name("specdec_api_key_requests_total")
                     .Help("Requests by API key id and outcome of the key check")
                     .Register(registry)),
      tokens_(&prometheus::BuildCounter()
                   .Name("specdec_api_key_tokens_total")
                   .Help("Prompt and completion tokens charged to each API key id")
                   .Register(registry)),
      active_(&prometheus::BuildGauge()
                   .Name("specdec_api_key_active_requests")
                   .Help("Requests holding a slot of each API key id")
                   .Register(registry)) {}

absl::StatusOr<std::unique_ptr<ApiKeys>> ApiKeys::Load(const std::string& path,
                                                       prometheus::Registry& registry) {
  absl::StatusOr<std::string> text = ReadFile(path);
  if (!text.ok()) return text.status();
  absl::StatusOr<std::vector<ApiKeyEntry>> entries = ParseApiKeys(*text);
  if (!entries.ok())
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", entries.status().message()));
  std::unique_ptr<ApiKeys> keys(new ApiKeys(path, registry));
  std::error_code ec;
  keys->mtime_ = std::filesystem::last_write_time(path, ec);
  keys->Install(*std::move(entries));
  return keys;
}

std::unique_ptr<ApiKeys> ApiKeys::FromEntries(std::vector<ApiKeyEntry> entries,
                                              prometheus::Registry& registry) {
  std::unique_ptr<ApiKeys> keys(new ApiKeys("", registry));
  keys->Install(std::move(entries));
  return keys;
}

void ApiKeys::Install(std::vector<ApiKeyEntry> entries) {
  by_digest_.clear();
  for (ApiKeyEntry& e : entries) by_digest_[e.sha256] = std::move(e);
}

void ApiKeys::MaybeReload(SteadyClock::time_point now) {
  if (path_.empty() || now - checked_ < std::chrono::seconds(1)) return;
  checked_ = now;
  std::error_code ec;
  const auto mtime = std::filesystem::last_write_time(path_, ec);
  if (ec || mtime == mtime_) return;
  absl::StatusOr<std::string> text = ReadFile(path_);
  absl::StatusOr<std::vector<ApiKeyEntry>> entries =
      text.ok() ? ParseApiKeys(*text) : absl::StatusOr<std::vector<ApiKeyEntry>>(text.status());
  if (!entries.ok()) {  // a file caught mid-write, or broken: keep the keys in force
    Log(LogLevel::kWarning, "api_keys",
        absl::StrCat(" path=", LogValue(path_),
                     " reload=failed message=", LogValue(entries.status().message())));
    return;
  }
  mtime_ = mtime;
  Install(*std::move(entries));
  Log(LogLevel::kInfo, "api_keys",
      absl::StrCat(" path=", LogValue(path_), " reload=ok keys=", by_digest_.size()));
}

void ApiKeys::Refill(const ApiKeyEntry& key, Usage& usage, SteadyClock::time_point now) const {
  const double capacity = static_cast<double>(key.tokens_per_minute);
  if (!usage.initialized) {
    usage.bucket = capacity;
    usage.refilled = now;
    usage.initialized = true;
    return;
  }
  const double ms = std::chrono::duration<double, std::milli>(now - usage.refilled).count();
  usage.bucket = std::min(capacity, usage.bucket + ms * capacity / 60000.0);
  usage.refilled = now;
}

absl::StatusOr<ApiKeys::Grant> ApiKeys::Admit(std::string_view authorization,
                                              SteadyClock::time_point now) {
  std::lock_guard<std::mutex> lock(mu_);
  MaybeReload(now);
  absl::StatusOr<const ApiKeyEntry*> identified = Identify(authorization);
  if (!identified.ok()) {
    Count("-", identified.status());
    return identified.status();
  }
  const ApiKeyEntry& key = **identified;
  absl::Status refused;
  Usage& usage = usage_[key.id];
  if (key.revoked) {
    refused = absl::PermissionDeniedError(absl::StrCat("API key ", key.id, " is revoked"));
  } else if (key.max_concurrent > 0 && usage.active >= key.max_concurrent) {
    refused = WithRetryAfter(absl::ResourceExhaustedError(
                                 absl::StrCat("API key ", key.id, " has its ", key.max_concurrent,
                                              " concurrent requests running; retry later")),
                             1000);
  } else if (key.tokens_per_minute > 0) {
    Refill(key, usage, now);
    if (usage.bucket <= 0) {
      const int64_t wait_ms =
          static_cast<int64_t>(
              std::ceil(-usage.bucket * 60000.0 / static_cast<double>(key.tokens_per_minute))) +
          1;
      refused = WithRetryAfter(absl::ResourceExhaustedError(absl::StrFormat(
                                   "API key %s is over its %d tokens per minute; retry in %.1f s",
                                   key.id, key.tokens_per_minute, wait_ms / 1000.0)),
                               wait_ms);
    }
  }
  Count(key.id, refused);
  if (!refused.ok()) return refused;
  ++usage.active;
  active_->Add({{"key_id", key.id}}).Increment();
  Grant g;
  g.keys_ = this;
  g.key_id_ = key.id;
  return g;
}

absl::StatusOr<const ApiKeyEntry*> ApiKeys::Identify(std::string_view authorization) {
  const std::string token = BearerToken(authorization);
  if (token.empty()) {
    return absl::UnauthenticatedError(
        "an API key is required: send it as \"Authorization: Bearer <key>\"");
  }
  auto it = by_digest_.find(Sha256Hex(token));
  if (it == by_digest_.end()) return absl::UnauthenticatedError("the API key is not valid");
  return &it->second;
}

absl::Status ApiKeys::Authenticate(std::string_view authorization) {
  std::lock_guard<std::mutex> lock(mu_);
  MaybeReload(SteadyClock::now());
  absl::StatusOr<const ApiKeyEntry*> key = Identify(authorization);
  if (!key.ok()) return key.status();
  if ((*key)->revoked) {
    return absl::PermissionDeniedError(absl::StrCat("API key ", (*key)->id, " is revoked"));
  }
  return absl::OkStatus();
}

void ApiKeys::Count(const std::string& id, const absl::Status& status) {
  requests_->Add({{"key_id", id}, {"code", absl::StatusCodeToString(status.code())}}).Increment();
}

void ApiKeys::Release(const std::string& id) {
  std::lock_guard<std::mutex> lock(mu_);
  --usage_[id].active;
  active_->Add({{"key_id", id}}).Decrement();
}

void ApiKeys::AddTokens(const std::string& id, int64_t tokens) {
  std::lock_guard<std::mutex> lock(mu_);
  Usage& usage = usage_[id];
  usage.bucket -= static_cast<double>(tokens);
  tokens_->Add({{"key_id", id}}).Increment(static_cast<double>(tokens));
}

ApiKeys::Grant::Grant(Grant&& other) noexcept
    : keys_(std::exchange(other.keys_, nullptr)), key_id_(std::move(other.key_id_)) {}

ApiKeys::Grant& ApiKeys::Grant::operator=(Grant&& other) noexcept {
  if (this != &other) {
    if (keys_ != nullptr) keys_->Release(key_id_);
    keys_ = std::exchange(other.keys_, nullptr);
    key_id_ = std::move(other.key_id_);
  }
  return *this;
}

ApiKeys::Grant::~Grant() {
  if (keys_ != nullptr) keys_->Release(key_id_);
}

void ApiKeys::Grant::Charge(int64_t tokens) {
  if (keys_ != nullptr && tokens > 0) keys_->AddTokens(key_id_, tokens);
}

}  // namespace specdec::services
