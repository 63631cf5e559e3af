// The client side of a Generate call: the responses a request's worker produces, queued and
// written one at a time by the RPC's reactor, and the cancellation the client signals.
#ifndef SPECDEC_SERVICES_ROUTER_GENERATE_REACTOR_H_
#define SPECDEC_SERVICES_ROUTER_GENERATE_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>

#include "services/router/cancel_signal.h"
#include "specdec/v1/router.grpc.pb.h"

namespace specdec::services {

class GenerateReactor;

// Responses a worker produced, written one at a time by the reactor. Outlives the reactor.
// Thread-safe through `mu`.
struct Outbox {
  std::mutex mu;
  std::deque<v1::GenerateResponse> queue;
  bool writing = false, finish_requested = false, finished = false;
  grpc::Status status;
  CancelSignal cancel;                 // the client cancelled or went away
  GenerateReactor* reactor = nullptr;  // null once the RPC is done
};

// Writes an Outbox's responses to the client; deletes itself when the RPC is done.
class GenerateReactor final : public grpc::ServerWriteReactor<v1::GenerateResponse> {
 public:
  explicit GenerateReactor(std::shared_ptr<Outbox> box);
  // Starts the next write or the finish. Called with box_->mu held.
  void Pump();
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  std::shared_ptr<Outbox> box_;
};

// Queues a response for the client (dropped once the RPC is done).
void Push(Outbox& box, v1::GenerateResponse response);
// Ends the RPC with `status` after the queued responses.
void FinishBox(Outbox& box, grpc::Status status);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_GENERATE_REACTOR_H_
