// Starting a gRPC server the way every specdec service does: standard health checking, server
// reflection, and a known listening port (port 0 picks a free one, for tests).
#ifndef SPECDEC_SERVICES_COMMON_SERVER_H_
#define SPECDEC_SERVICES_COMMON_SERVER_H_

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "services/common/tls.h"

namespace specdec::services {

// The gRPC status of an absl::Status (the codes are the same numbers).
inline grpc::Status ToGrpc(const absl::Status& s) {
  return grpc::Status(static_cast<grpc::StatusCode>(s.code()), std::string(s.message()));
}

struct StartedServer {
  std::unique_ptr<grpc::Server> server;
  int port = 0;  // the port actually bound
};

// Limits every server applies to its connections; each may be set by an environment variable.
struct ConnectionLimits {
  int max_streams_per_connection = 1024;  // SPECDEC_MAX_STREAMS_PER_CONNECTION; later ones wait
  int keepalive_ms = 60000;               // SPECDEC_KEEPALIVE_MS: ping a connection idle this long
  int keepalive_timeout_ms = 20000;       // SPECDEC_KEEPALIVE_TIMEOUT_MS: close it if no answer
  int max_connection_idle_ms = 300000;    // SPECDEC_MAX_CONNECTION_IDLE_MS: close idle connections
  int max_connection_age_ms = 60000;      // SPECDEC_MAX_CONNECTION_AGE_MS (0 = never)
};
// The defaults above, overridden by the environment; INVALID_ARGUMENT naming a variable that is
// not a non-negative integer.
absl::StatusOr<ConnectionLimits> ConnectionLimitsFromEnv();

// Builds and starts a server on `address` ("host:port") with the given services, gRPC health
// checking (SERVING for the server, "", and for each of `service_names`, the services' full
// names such as "specdec.v1.Router") and reflection, under ConnectionLimitsFromEnv(), with TLS
// from `tls` (MakeServerCredentials; INVALID_ARGUMENT for bad files). UNAVAILABLE
// if the address cannot be bound. Connections are closed gracefully after their maximum age so
// that clients re-resolve the server's DNS name.
absl::StatusOr<StartedServer> StartServer(const std::string& address,
                                          const std::vector<grpc::Service*>& services,
                                          const std::vector<std::string>& service_names,
                                          const TlsFiles& tls = {});

// Marks the server NOT_SERVING on the health service, waits up to `drain_ms` for in-flight calls,
// then shuts down.
void DrainAndShutdown(grpc::Server* server, int drain_ms);

// Drains `started` (DrainAndShutdown), waits for its calls to end and releases it; nothing where
// it runs no server.
void StopServer(StartedServer& started, int drain_ms);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_SERVER_H_
