// The body of every service's Run<Name>Server: start, report the ports, serve until SIGINT or
// SIGTERM, then drain and stop. While serving, a HeapTrimmer returns freed heap memory to the OS
// every SPECDEC_HEAP_TRIM_MS milliseconds (default 5000; 0 = never) once at least 8 MiB are free.
#ifndef SPECDEC_SERVICES_COMMON_RUN_SERVER_H_
#define SPECDEC_SERVICES_COMMON_RUN_SERVER_H_

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <string>

#include "services/common/heap_trimmer.h"
#include "services/common/shutdown.h"

namespace specdec::services {

// `Server` has a static Start(options) -> StatusOr<unique_ptr<Server>>, port(), metrics_port()
// and Shutdown(). Returns the process exit code.
template <typename Server, typename Options>
int RunUntilSignal(const char* name, const Options& options) {
  auto server = Server::Start(options);
  if (!server.ok()) {
    std::cerr << name << ": " << server.status() << "\n";
    return 1;
  }
  std::cerr << name << ": serving on port " << (*server)->port() << ", /metrics on port "
            << (*server)->metrics_port() << " (allocator " << HeapAllocatorName() << ")\n";
  const char* trim_ms = std::getenv("SPECDEC_HEAP_TRIM_MS");
  HeapTrimmer trimmer(std::chrono::milliseconds(trim_ms ? std::atoll(trim_ms) : 5000),
                      int64_t{8} << 20);
  WaitForShutdownSignal();
  std::cerr << name << ": draining\n";
  (*server)->Shutdown();
  return 0;
}

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_RUN_SERVER_H_
