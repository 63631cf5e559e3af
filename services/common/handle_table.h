// Per-request state behind opaque KV-cache handles (docs/design.md §1): leases, a memory budget,
// owner streams, re-attach, and the status codes clients rely on.
#ifndef SPECDEC_SERVICES_COMMON_HANDLE_TABLE_H_
#define SPECDEC_SERVICES_COMMON_HANDLE_TABLE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

namespace specdec::services {

// Handles look like "<replica>/<serial>-<nonce>". Unknown or expired handles are NOT_FOUND; a
// handle minted by another replica is FAILED_PRECONDITION; use from a stream that does not own
// it is FAILED_PRECONDITION (Attach it first); a request over the byte budget is
// RESOURCE_EXHAUSTED. Thread-safe; the pointer Acquire returns stays valid until the handle is
// released or expires, so callers serialize use and release on one scheduler thread.
template <typename T>
class HandleTable {
 public:
  using Clock = std::chrono::steady_clock;
  struct Options {
    std::string replica = "local";
    int64_t budget_bytes = int64_t{8} << 30;
    std::chrono::milliseconds lease{60000};
    std::function<Clock::time_point()> now = [] { return Clock::now(); };
  };
  // A model server's table options from its flags (--replica, --kv-budget-bytes, --lease-ms):
  // `ServerOptions` has fields of those names.
  template <typename ServerOptions>
  static Options FromServerFlags(const ServerOptions& flags) {
    Options o;
    o.replica = flags.replica;
    o.budget_bytes = flags.kv_budget_bytes;
    o.lease = std::chrono::milliseconds(flags.lease_ms);
    return o;
  }

  explicit HandleTable(Options options)
      : options_(std::move(options)), nonce_(std::random_device{}()) {}

  // Admits `value` needing `bytes` for stream `owner`; returns its handle.
  absl::StatusOr<std::string> Create(std::unique_ptr<T> value, int64_t bytes, uint64_t owner) {
    std::lock_guard<std::mutex> lock(mu_);
    if (bytes < 0 || bytes_ + bytes > options_.budget_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("KV-cache budget exhausted on replica ", options_.replica, ": ", bytes_,
                       " bytes in use + ", bytes, " requested > budget ", options_.budget_bytes,
                       "; retry later or on another replica"));
    }
    const std::string id =
        absl::StrCat(options_.replica, "/", ++serial_, "-", static_cast<uint32_t>(nonce_()));
    entries_[id] = Entry{std::move(value), bytes, owner, options_.now()};
    bytes_ += bytes;
    return id;
  }

  // The value behind `handle`, renewing its lease. `owner` must be the stream holding it.
  absl::StatusOr<T*> Acquire(const std::string& handle, uint64_t owner) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = FindLocked(handle);
    if (!it.ok()) return it.status();
    Entry& e = (*it)->second;
    if (e.owner != owner) {
      return absl::FailedPreconditionError(
          absl::StrCat("handle '", handle, "' belongs to another stream; Attach it first"));
    }
    e.last_used = options_.now();
    return e.value.get();
  }

  // Moves a live handle to stream `owner` (a reconnecting router).
  absl::Status Attach(const std::string& handle, uint64_t owner) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = FindLocked(handle);
    if (!it.ok()) return it.status();
    (*it)->second.owner = owner;
    (*it)->second.last_used = options_.now();
    return absl::OkStatus();
  }

  // Changes the bytes accounted to a handle (its cache grew); RESOURCE_EXHAUSTED over budget.
  absl::Status Resize(const std::string& handle, int64_t bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = FindLocked(handle);
    if (!it.ok()) return it.status();
    Entry& e = (*it)->second;
    if (bytes_ - e.bytes + bytes > options_.budget_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat("KV-cache budget exhausted on replica ",
                                                       options_.replica, " while growing '", handle,
                                                       "'"));
    }
    bytes_ += bytes - e.bytes;
    e.bytes = bytes;
    return absl::OkStatus();
  }

  absl::Status Release(const std::string& handle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = FindLocked(handle);
    if (!it.ok()) return it.status();
    EraseLocked(*it);
    return absl::OkStatus();
  }

  // Releases every handle owned by `owner` (its stream ended). Returns how many.
  int ReleaseOwner(uint64_t owner) {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (it->second.owner == owner) {
        bytes_ -= it->second.bytes;
        it = entries_.erase(it);
        ++n;
      } else {
        ++it;
      }
    }
    return n;
  }

  // Frees every handle idle for longer than the lease. Returns how many.
  int ExpireIdle() {
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = options_.now();
    int n = 0;
    for (auto it = entries_.begin(); it != entries_.end();) {
      if (now - it->second.last_used > options_.lease) {
        bytes_ -= it->second.bytes;
        it = entries_.erase(it);
        ++n;
      } else {
        ++it;
      }
    }
    return n;
  }

  int64_t bytes_in_use() const {
    std::lock_guard<std::mutex> lock(mu_);
    return bytes_;
  }
  size_t size() const {
    std::lock_guard<std::mutex> lock(mu_);
    return entries_.size();
  }
  const std::string& replica() const { return options_.replica; }
  // The idle timeout of a lease, and when a lease renewed now ends (system clock, Unix ms): what
  // a KvHandle reports as lease_ms and lease_expires_unix_ms.
  std::chrono::milliseconds lease() const { return options_.lease; }
  int64_t LeaseExpiresUnixMs() const {
    const auto now = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::system_clock::now().time_since_epoch());
    return (now + options_.lease).count();
  }

 private:
  struct Entry {
    std::unique_ptr<T> value;
    int64_t bytes = 0;
    uint64_t owner = 0;
    Clock::time_point last_used;
  };
  using Map = std::map<std::string, Entry>;

  absl::StatusOr<typename Map::iterator> FindLocked(const std::string& handle) {
    const std::string prefix = options_.replica + "/";
    if (handle.compare(0, prefix.size(), prefix) != 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("handle '", handle, "' was not minted by replica '", options_.replica, "'"));
    }
    auto it = entries_.find(handle);
    if (it == entries_.end()) {
      return absl::NotFoundError(absl::StrCat("handle '", handle, "' is unknown or expired"));
    }
    if (options_.now() - it->second.last_used > options_.lease) {
      EraseLocked(it);
      return absl::NotFoundError(absl::StrCat("handle '", handle, "' expired"));
    }
    return it;
  }

  void EraseLocked(typename Map::iterator it) {
    bytes_ -= it->second.bytes;
    entries_.erase(it);
  }

  Options options_;
  mutable std::mutex mu_;
  Map entries_;
  int64_t bytes_ = 0;
  uint64_t serial_ = 0;
  std::mt19937 nonce_;
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_HANDLE_TABLE_H_
