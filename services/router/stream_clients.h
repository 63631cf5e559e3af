// Blocking clients for the target and drafter Session streams, used by the router's request
// workers: each call writes one operation and waits for its answer.
#ifndef SPECDEC_SERVICES_ROUTER_STREAM_CLIENTS_H_
#define SPECDEC_SERVICES_ROUTER_STREAM_CLIENTS_H_

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "services/router/cancel_signal.h"
#include "specdec/v1/drafter.grpc.pb.h"
#include "specdec/v1/target.grpc.pb.h"

namespace specdec::services {

// What bounds a request's backend calls: its deadline, and its cancellation (optional), which
// cancels every stream the request has open.
struct CallScope {
  std::chrono::system_clock::time_point deadline;
  CancelSignal* cancel = nullptr;
};

// One open Session stream. Not thread-safe: one request worker uses it. Destroying it, or the
// scope's cancellation, cancels the stream, which releases every handle the stream owns on the
// server (a call blocked on it returns CANCELLED).
template <typename Stub, typename Req, typename Resp>
class SessionClient {
 public:
  static absl::StatusOr<std::unique_ptr<SessionClient>> Open(Stub* stub, const CallScope& scope) {
    auto c = std::unique_ptr<SessionClient>(new SessionClient());
    c->ctx_.set_deadline(scope.deadline);
    c->stream_ = stub->Session(&c->ctx_);
    if (!c->stream_) return absl::UnavailableError("cannot open a Session stream");
    if (scope.cancel != nullptr) {
      c->cancel_ = scope.cancel;
      c->cancel_id_ = scope.cancel->Add([ctx = &c->ctx_] { ctx->TryCancel(); });
    }
    return c;
  }
  ~SessionClient() {
    if (cancel_ != nullptr) cancel_->Remove(cancel_id_);
    ctx_.TryCancel();
    if (stream_) stream_->Finish();
  }

  // Sends `req` and returns the matching response, or the error it carries.
  absl::StatusOr<Resp> Call(Req req, const char* what) {
    if (absl::Status s = Send(std::move(req), what); !s.ok()) return s;
    return Next(what);
  }

  // For operations answered more than once (a target run): Send writes the operation, and each
  // Next returns its next response (or the error it carries). Responses to earlier operations
  // still in flight (a run the caller stopped reading) are skipped.
  absl::Status Send(Req req, const char* what) {
    if (!stream_) return absl::UnavailableError(std::string(what) + ": stream closed");
    req.set_seq(++seq_);
    if (!stream_->Write(req)) return StreamError(what);
    return absl::OkStatus();
  }
  absl::StatusOr<Resp> Next(const char* what) {
    if (!stream_) return absl::UnavailableError(std::string(what) + ": stream closed");
    Resp resp;
    do {
      if (!stream_->Read(&resp)) return StreamError(what);
    } while (resp.seq() < seq_);
    if (resp.has_error()) {
      return absl::Status(static_cast<absl::StatusCode>(resp.error().code()),
                          std::string(what) + ": " + resp.error().message());
    }
    return resp;
  }

 private:
  SessionClient() = default;
  absl::Status StreamError(const char* what) {
    stream_->WritesDone();
    grpc::Status s = stream_->Finish();
    stream_.reset();
    if (s.ok()) return absl::UnavailableError(std::string(what) + ": stream closed");
    return absl::Status(static_cast<absl::StatusCode>(s.error_code()),
                        std::string(what) + ": " + s.error_message());
  }
  grpc::ClientContext ctx_;
  CancelSignal* cancel_ = nullptr;
  uint64_t cancel_id_ = 0;
  std::unique_ptr<grpc::ClientReaderWriter<Req, Resp>> stream_;
  uint64_t seq_ = 0;
};

using TargetClient = SessionClient<v1::Target::Stub, v1::TargetRequest, v1::TargetResponse>;
using DrafterClient = SessionClient<v1::Drafter::Stub, v1::DrafterRequest, v1::DrafterResponse>;

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_STREAM_CLIENTS_H_
