// The `/metrics` endpoint of a service: a prometheus-cpp registry served in the Prometheus text
// format by a small loopback-grade HTTP/1.1 server of our own. (prometheus-cpp's civetweb
// exposer cannot start inside a process that links Debian's libtorch, and takes seconds to
// stop.)
#ifndef SPECDEC_SERVICES_COMMON_METRICS_SERVER_H_
#define SPECDEC_SERVICES_COMMON_METRICS_SERVER_H_

#include <prometheus/registry.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"

namespace specdec::services {

// Owns the registry every metric of the process lives in, and the HTTP endpoint. The registry
// is thread-safe; Listen once at startup; the destructor stops the endpoint.
class MetricsServer {
 public:
  MetricsServer() : registry_(std::make_shared<prometheus::Registry>()) {}
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Serves GET /metrics on `address` ("host:port"; port 0 picks a free one). A bare port is
  // INVALID_ARGUMENT (every interface is 0.0.0.0:PORT, asked for explicitly). UNAVAILABLE if the
  // address cannot be bound.
  absl::Status Listen(const std::string& address);
  int port() const { return port_; }  // 0 before Listen
  prometheus::Registry& registry() { return *registry_; }
  // The current exposition text (what GET /metrics returns).
  std::string Render() const;

 private:
  void Serve();
  std::shared_ptr<prometheus::Registry> registry_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_METRICS_SERVER_H_
