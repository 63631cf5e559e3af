// The gRPC side of a Generate call: an Outbox's responses written one at a time by the RPC's
// reactor, and the cancellation the client signals.
#ifndef SPECDEC_SERVICES_ROUTER_GENERATE_REACTOR_H_
#define SPECDEC_SERVICES_ROUTER_GENERATE_REACTOR_H_

#include <grpcpp/grpcpp.h>

#include <memory>

#include "services/router/outbox.h"
#include "specdec/v1/router.grpc.pb.h"

namespace specdec::services {

// Writes an Outbox's responses to the client; deletes itself when the RPC is done.
class GenerateReactor final : public grpc::ServerWriteReactor<v1::GenerateResponse>,
                              public OutboxReader {
 public:
  GenerateReactor(std::shared_ptr<Outbox> box, grpc::CallbackServerContext* ctx);
  // Starts the next write or the finish. Called with box_->mu held.
  void Pump() override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  std::shared_ptr<Outbox> box_;
  grpc::CallbackServerContext* ctx_;
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_GENERATE_REACTOR_H_
