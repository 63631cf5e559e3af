// API keys: the keys file, the key check, per-key concurrency and token rate, reloads.
#include "services/router/api_keys.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

namespace specdec::services {
namespace {

using ::testing::HasSubstr;

ApiKeyEntry Key(const std::string& id, const std::string& secret, int max_concurrent = 0,
                int64_t tokens_per_minute = 0, bool revoked = false) {
  return {id, Sha256Hex(secret), max_concurrent, tokens_per_minute, revoked};
}

TEST(ApiKeysTest, DigestsAndBearerTokens) {
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(BearerToken("Bearer sk-1"), "sk-1");
  EXPECT_EQ(BearerToken("bearer  sk-1 "), "sk-1");
  EXPECT_EQ(BearerToken("Basic sk-1"), "");
  EXPECT_EQ(BearerToken(""), "");
}

TEST(ApiKeysTest, TheFileIsCheckedEntryByEntry) {
  auto ok = ParseApiKeys(R"({"keys": [{"id": "a", "sha256": ")" + Sha256Hex("x") +
                         R"(", "max_concurrent": 2, "tokens_per_minute": 600}]})");
  ASSERT_TRUE(ok.ok()) << ok.status();
  ASSERT_EQ(ok->size(), 1u);
  EXPECT_EQ((*ok)[0].max_concurrent, 2);
  EXPECT_EQ((*ok)[0].tokens_per_minute, 600);
  EXPECT_FALSE((*ok)[0].revoked);
  const std::string digest = Sha256Hex("x");
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"[]", "{\"keys\""},
      {R"({"keys": [{"sha256": ")" + digest + R"("}]})", "keys[0].id"},
      {R"({"keys": [{"id": "a", "sha256": "abc"}]})", "keys[0].sha256"},
      {R"({"keys": [{"id": "a", "sha256": ")" + digest + R"(", "max_concurrent": -1}]})",
       "keys[0].max_concurrent"},
      {R"({"keys": [{"id": "a", "sha256": ")" + digest + R"(", "revoked": "yes"}]})",
       "keys[0].revoked"},
      {R"({"keys": [{"id": "a", "sha256": ")" + digest + R"("}, {"id": "a", "sha256": ")" +
           Sha256Hex("y") + R"("}]})",
       "keys[1].id"},
  };
  for (const auto& [json, where] : bad) {
    auto r = ParseApiKeys(json);
    ASSERT_FALSE(r.ok()) << json;
    EXPECT_THAT(r.status().message(), HasSubstr(where)) << json;
  }
}

TEST(ApiKeysTest, MissingWrongAndRevokedKeysAreRefused) {
  prometheus::Registry registry;
  auto keys =
      ApiKeys::FromEntries({Key("a", "sk-a"), Key("gone", "sk-gone", 0, 0, true)}, registry);
  EXPECT_EQ(keys->Admit("").status().code(), absl::StatusCode::kUnauthenticated);
  EXPECT_EQ(keys->Admit("Bearer sk-b").status().code(), absl::StatusCode::kUnauthenticated);
  auto revoked = keys->Admit("Bearer sk-gone");
  EXPECT_EQ(revoked.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(revoked.status().message(), HasSubstr("gone"));
  EXPECT_EQ(keys->Authenticate("Bearer sk-gone").code(), absl::StatusCode::kPermissionDenied);
  auto granted = keys->Admit("Bearer sk-a");
  ASSERT_TRUE(granted.ok()) << granted.status();
  EXPECT_EQ(granted->key_id(), "a");
  EXPECT_TRUE(keys->Authenticate("Bearer sk-a").ok());
}

TEST(ApiKeysTest, AKeyOverItsConcurrencyWaitsAndOthersDoNot) {
  prometheus::Registry registry;
  auto keys = ApiKeys::FromEntries({Key("one", "sk-1", 1), Key("other", "sk-2", 1)}, registry);
  {
    auto first = keys->Admit("Bearer sk-1");
    ASSERT_TRUE(first.ok());
    auto second = keys->Admit("Bearer sk-1");
    EXPECT_EQ(second.status().code(), absl::StatusCode::kResourceExhausted);
    EXPECT_GT(RetryAfterMs(second.status()), 0);
    EXPECT_TRUE(keys->Admit("Bearer sk-2").ok());  // released at once: a temporary
  }
  EXPECT_TRUE(keys->Admit("Bearer sk-1").ok());  // the first grant was released
}

TEST(ApiKeysTest, AKeyOverItsTokenRateIsToldWhenToRetry) {
  prometheus::Registry registry;
  auto keys = ApiKeys::FromEntries({Key("slow", "sk-s", 0, 600), Key("fast", "sk-f")}, registry);
  const auto t0 = SteadyClock::now();
  {
    auto g = keys->Admit("Bearer sk-s", t0);
    ASSERT_TRUE(g.ok());
    g->Charge(700);  // the bucket of 600 is 100 tokens in debt: 10 s at 10 tokens/s
  }
  auto over = keys->Admit("Bearer sk-s", t0 + std::chrono::seconds(1));
  EXPECT_EQ(over.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(over.status().message(), HasSubstr("600 tokens per minute"));
  EXPECT_NEAR(RetryAfterMs(over.status()), 9000, 2);
  EXPECT_TRUE(keys->Admit("Bearer sk-f", t0 + std::chrono::seconds(1)).ok());
  EXPECT_TRUE(keys->Admit("Bearer sk-s", t0 + std::chrono::milliseconds(10100)).ok());
}

TEST(ApiKeysTest, TheFileIsReadAgainWhenItChanges) {
  const std::string path = ::testing::TempDir() + "/api_keys_test.json";
  auto write = [&](bool revoked) {
    std::ofstream(path) << R"({"keys": [{"id": "a", "sha256": ")" << Sha256Hex("sk-a")
                        << R"(", "revoked": )" << (revoked ? "true" : "false") << "}]}";
  };
  write(false);
  prometheus::Registry registry;
  auto keys = ApiKeys::Load(path, registry);
  ASSERT_TRUE(keys.ok()) << keys.status();
  const auto t0 = SteadyClock::now();
  EXPECT_TRUE((*keys)->Admit("Bearer sk-a", t0).ok());
  const auto before = std::filesystem::last_write_time(path);
  write(true);
  std::filesystem::last_write_time(path, before + std::chrono::seconds(5));
  EXPECT_EQ((*keys)->Admit("Bearer sk-a", t0 + std::chrono::seconds(2)).status().code(),
            absl::StatusCode::kPermissionDenied);
  // A broken file keeps the keys in force.
  std::ofstream(path) << "{broken";
  std::filesystem::last_write_time(path, before + std::chrono::seconds(10));
  EXPECT_EQ((*keys)->Admit("Bearer sk-a", t0 + std::chrono::seconds(4)).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ApiKeys::Load(path, registry).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace specdec::services
