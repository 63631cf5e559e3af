#include "services/common/metrics_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <prometheus/counter.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util/status_matchers.h"

namespace specdec::services {
namespace {

std::string HttpGet(int port, const std::string& path) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return "";
  const std::string req = "GET " + path + " HTTP/1.1\r\nHost: x\r\n\r\n";
  ::send(fd, req.data(), req.size(), 0);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = ::recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return out;
}

TEST(MetricsServer, ServesTheRegistryInTextFormat) {
  MetricsServer m;
  auto& c = prometheus::BuildCounter().Name("specdec_test_total").Help("t").Register(m.registry());
  c.Add({{"code", "OK"}}).Increment(3);
  SPECDEC_ASSERT_OK(m.Listen("127.0.0.1:0"));
  ASSERT_GT(m.port(), 0);
  const std::string resp = HttpGet(m.port(), "/metrics");
  EXPECT_EQ(resp.rfind("HTTP/1.1 200 OK", 0), 0u) << resp;
  EXPECT_NE(resp.find("specdec_test_total{code=\"OK\"} 3"), std::string::npos) << resp;
  EXPECT_EQ(HttpGet(m.port(), "/nope").rfind("HTTP/1.1 404", 0), 0u);
  MetricsServer other;
  SPECDEC_EXPECT_STATUS(other.Listen("127.0.0.1:" + std::to_string(m.port())),
                        absl::StatusCode::kUnavailable, "cannot serve /metrics");
  SPECDEC_EXPECT_STATUS(other.Listen("nonsense"), absl::StatusCode::kInvalidArgument, "address");
  // A bare port is refused, not bound on every interface.
  SPECDEC_EXPECT_STATUS(other.Listen("0"), absl::StatusCode::kInvalidArgument, "needs a host");
  SPECDEC_EXPECT_STATUS(other.Listen(":0"), absl::StatusCode::kInvalidArgument, "needs a host");
}

}  // namespace
}  // namespace specdec::services
