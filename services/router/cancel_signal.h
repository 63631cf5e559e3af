// A request's cancellation: set once, by the client cancelling its Generate call or going away,
// and passed on at once to the backend calls the request has open, so that a request blocked on a
// queued backend operation ends without waiting for it (and the backends drop the operation and
// free the request's handles).
#ifndef SPECDEC_SERVICES_ROUTER_CANCEL_SIGNAL_H_
#define SPECDEC_SERVICES_ROUTER_CANCEL_SIGNAL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace specdec::services {

// Thread-safe.
class CancelSignal {
 public:
  // Sets the signal and runs every registered callback (once; later calls do nothing).
  void Cancel();
  bool cancelled() const { return cancelled_.load(); }
  // Registers `on_cancel` (it must not block); runs it at once when the signal is already set.
  // Returns the id for Remove.
  uint64_t Add(std::function<void()> on_cancel);
  // Unregisters; once it returns, the callback is not running and never runs.
  void Remove(uint64_t id);

 private:
  std::mutex mu_;
  std::atomic<bool> cancelled_{false};
  uint64_t next_id_ = 1;
  std::map<uint64_t, std::function<void()>> callbacks_;
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_CANCEL_SIGNAL_H_
