// RouterServer::Start refuses options it cannot serve before it connects to any backend.
#include <gtest/gtest.h>

#include "services/router/router_service.h"

namespace specdec::services {
namespace {

TEST(RouterStartTest, AModelNameThatIsNotUtf8IsRefusedBeforeConnecting) {
  RouterServerOptions ro;
  ro.address = "127.0.0.1:0";
  ro.metrics_address = "";
  ro.target_address = "127.0.0.1:1";  // nothing listens: reaching it would fail differently
  ro.model_name = "pack-\xff";
  ro.warmup_tokens = 0;
  auto router = RouterServer::Start(ro);
  ASSERT_FALSE(router.ok());
  EXPECT_EQ(router.status().code(), absl::StatusCode::kInvalidArgument) << router.status();
  EXPECT_NE(router.status().message().find("--model-name must be UTF-8"), std::string::npos)
      << router.status();
}

}  // namespace
}  // namespace specdec::services
