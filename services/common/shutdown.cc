#include "services/common/shutdown.h"

#include <semaphore.h>

#include <csignal>

namespace specdec::services {
namespace {
sem_t g_signal_sem;
void OnSignal(int) { sem_post(&g_signal_sem); }  // async-signal-safe
}  // namespace

void WaitForShutdownSignal() {
  sem_init(&g_signal_sem, 0, 0);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  while (sem_wait(&g_signal_sem) != 0) {
  }
}

}  // namespace specdec::services
