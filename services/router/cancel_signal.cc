#include "services/router/cancel_signal.h"

#include <utility>

namespace specdec::services {

void CancelSignal::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_.exchange(true)) return;
  for (auto& [id, on_cancel] : callbacks_) on_cancel();
}

uint64_t CancelSignal::Add(std::function<void()> on_cancel) {
  std::lock_guard<std::mutex> lock(mu_);
  if (cancelled_.load()) on_cancel();
  const uint64_t id = next_id_++;
  callbacks_.emplace(id, std::move(on_cancel));
  return id;
}

void CancelSignal::Remove(uint64_t id) {
  std::lock_guard<std::mutex> lock(mu_);
  callbacks_.erase(id);
}

}  // namespace specdec::services
