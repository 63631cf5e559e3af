// The `/metrics` endpoint of a service: a prometheus-cpp registry exposed over HTTP.
#ifndef SPECDEC_SERVICES_COMMON_METRICS_SERVER_H_
#define SPECDEC_SERVICES_COMMON_METRICS_SERVER_H_

#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace specdec::services {

// Owns the registry every metric of the process lives in, and (optionally) the HTTP exposer.
// The registry is thread-safe; construct once at startup.
class MetricsServer {
 public:
  MetricsServer() : registry_(std::make_shared<prometheus::Registry>()) {}
  // Serves `/metrics` on `address` ("host:port"; port 0 picks a free one).
  absl::Status Listen(const std::string& address);
  int port() const;  // 0 before Listen
  prometheus::Registry& registry() { return *registry_; }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  std::unique_ptr<prometheus::Exposer> exposer_;
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_METRICS_SERVER_H_
