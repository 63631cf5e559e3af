// Process-level shutdown signal for service mains.
#ifndef SPECDEC_SERVICES_COMMON_SHUTDOWN_H_
#define SPECDEC_SERVICES_COMMON_SHUTDOWN_H_

namespace specdec::services {

// Installs SIGINT/SIGTERM handlers and blocks until one arrives.
void WaitForShutdownSignal();

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_SHUTDOWN_H_
