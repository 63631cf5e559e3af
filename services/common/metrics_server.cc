#include "services/common/metrics_server.h"

#include "absl/strings/str_cat.h"

namespace specdec::services {

absl::Status MetricsServer::Listen(const std::string& address) {
  try {
    exposer_ = std::make_unique<prometheus::Exposer>(address);
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve /metrics on ", address, ": ", e.what()));
  }
  exposer_->RegisterCollectable(registry_);
  return absl::OkStatus();
}

int MetricsServer::port() const {
  if (!exposer_) return 0;
  auto ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports[0];
}

}  // namespace specdec::services
