#include "services/router/admission.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace specdec::services {

absl::Status AdmissionQueue::Admit(std::chrono::system_clock::time_point deadline,
                                   const std::function<bool()>& cancelled, double* waited_seconds) {
  using Steady = std::chrono::steady_clock;
  const auto t0 = Steady::now();
  auto waited = [&] {
    const double s = std::chrono::duration<double>(Steady::now() - t0).count();
    if (waited_seconds) *waited_seconds = s;
    return s;
  };
  std::unique_lock<std::mutex> lock(mu_);
  if (options_.max_active <= 0 || (queue_.empty() && active_ < options_.max_active)) {
    ++active_;
    waited();
    return absl::OkStatus();
  }
  if (static_cast<int>(queue_.size()) >= options_.max_waiting) {
    waited();
    return absl::ResourceExhaustedError(absl::StrCat(
        "the router is at capacity: ", active_, " requests in flight (--max-active-requests) and ",
        queue_.size(), " queued (--max-queued-requests); retry later"));
  }
  const uint64_t me = next_ticket_++;
  queue_.push_back(me);
  const auto give_up = Steady::now() + options_.timeout;
  absl::Status result = absl::OkStatus();
  while (true) {
    if (queue_.front() == me && active_ < options_.max_active) break;
    if (cancelled && cancelled()) {
      result = absl::CancelledError("cancelled by the client while queued");
      break;
    }
    if (std::chrono::system_clock::now() >= deadline) {
      result = absl::DeadlineExceededError(absl::StrCat(
          "the deadline passed while the request was queued for ",
          static_cast<int64_t>(waited() * 1000), " ms behind ", active_, " requests in flight"));
      break;
    }
    if (Steady::now() >= give_up) {
      result = absl::ResourceExhaustedError(
          absl::StrCat("the router is at capacity: queued ", options_.timeout.count(),
                       " ms (--queue-timeout-ms) behind ", active_,
                       " requests in flight (--max-active-requests); retry later"));
      break;
    }
    // Wake on a release, at the queue timeout, and every 20 ms to poll cancellation and the
    // client's deadline (a timeout shorter than the poll still ends on time).
    cv_.wait_until(lock, std::min(give_up, Steady::now() + std::chrono::milliseconds(20)));
  }
  queue_.erase(std::find(queue_.begin(), queue_.end(), me));
  if (result.ok()) ++active_;
  lock.unlock();
  cv_.notify_all();  // the next in line may be at the front now
  waited();
  return result;
}

void AdmissionQueue::Release() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    active_ = std::max(0, active_ - 1);
  }
  cv_.notify_all();
}

int AdmissionQueue::active() const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_;
}

int AdmissionQueue::waiting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return static_cast<int>(queue_.size());
}

}  // namespace specdec::services
