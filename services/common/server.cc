#include "services/common/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace specdec::services {

absl::StatusOr<ConnectionLimits> ConnectionLimitsFromEnv() {
  ConnectionLimits l;
  const std::pair<const char*, int*> vars[] = {
      {"SPECDEC_MAX_STREAMS_PER_CONNECTION", &l.max_streams_per_connection},
      {"SPECDEC_KEEPALIVE_MS", &l.keepalive_ms},
      {"SPECDEC_KEEPALIVE_TIMEOUT_MS", &l.keepalive_timeout_ms},
      {"SPECDEC_MAX_CONNECTION_IDLE_MS", &l.max_connection_idle_ms},
      {"SPECDEC_MAX_CONNECTION_AGE_MS", &l.max_connection_age_ms},
  };
  for (const auto& [name, value] : vars) {
    const char* env = std::getenv(name);
    if (env == nullptr || *env == '\0') continue;
    if (!absl::SimpleAtoi(env, value) || *value < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, "=", env, " must be a non-negative integer"));
    }
  }
  if (l.max_streams_per_connection == 0) {
    return absl::InvalidArgumentError("SPECDEC_MAX_STREAMS_PER_CONNECTION must be at least 1");
  }
  return l;
}

absl::StatusOr<StartedServer> StartServer(const std::string& address,
                                          const std::vector<grpc::Service*>& services,
                                          const std::vector<std::string>& service_names,
                                          const TlsFiles& tls) {
  absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> credentials = MakeServerCredentials(tls);
  if (!credentials.ok()) return credentials.status();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  StartedServer out;
  builder.AddListeningPort(address, *credentials, &out.port);
  builder.SetMaxReceiveMessageSize(64 << 20);
  builder.SetMaxSendMessageSize(64 << 20);
  absl::StatusOr<ConnectionLimits> limits = ConnectionLimitsFromEnv();
  if (!limits.ok()) return limits.status();
  builder.AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS, limits->max_streams_per_connection);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, limits->keepalive_ms);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, limits->keepalive_timeout_ms);
  if (limits->max_connection_idle_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS, limits->max_connection_idle_ms);
  }
  // Connections are recycled (GOAWAY; streams in flight finish on the old connection) so that
  // clients re-resolve DNS and find replicas added behind one name (a headless Service).
  if (limits->max_connection_age_ms > 0) {
    builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS, limits->max_connection_age_ms);
  }
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

void StopServer(StartedServer& started, int drain_ms) {
  if (!started.server) return;
  DrainAndShutdown(started.server.get(), drain_ms);
  started.server->Wait();
  started.server.reset();
}

}  // namespace specdec::services
