#include "services/common/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace specdec::services {

absl::StatusOr<StartedServer> StartServer(const std::string& address,
                                          const std::vector<grpc::Service*>& services,
                                          const std::vector<std::string>& service_names) {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  StartedServer out;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &out.port);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  // Connections are recycled (GOAWAY; streams in flight finish on the old connection) so that
  // clients re-resolve DNS and find replicas added behind one name (a headless Service).
  int age_ms = 60000;
  if (const char* env = std::getenv("SPECDEC_MAX_CONNECTION_AGE_MS")) age_ms = std::atoi(env);
  if (age_ms > 0) builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, age_ms);
  for (grpc::Service* s : services) builder.RegisterService(s);
  out.server = builder.BuildAndStart();
  if (out.server == nullptr || out.port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", address));
  }
  grpc::HealthCheckServiceInterface* health = out.server->GetHealthCheckService();
  health->SetServingStatus(true);
  for (const std::string& name : service_names) health->SetServingStatus(name, true);
  return out;
}

void DrainAndShutdown(grpc::Server* server, int drain_ms) {
  if (server == nullptr) return;
  if (auto* health = server->GetHealthCheckService()) health->SetServingStatus(false);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(drain_ms));
}

}  // namespace specdec::services
