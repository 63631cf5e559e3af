#include "services/router/generate_reactor.h"

#include "services/common/server.h"
#include "services/router/api_keys.h"

namespace specdec::services {

GenerateReactor::GenerateReactor(std::shared_ptr<Outbox> box, grpc::CallbackServerContext* ctx)
    : box_(std::move(box)), ctx_(ctx) {
  box_->reader = this;
}

void GenerateReactor::Pump() {
  if (box_->finished || box_->writing) return;
  if (!box_->queue.empty()) {
    box_->writing = true;
    StartWrite(&box_->queue.front());
  } else if (box_->finish_requested) {
    box_->finished = true;
    // A retry hint (RESOURCE_EXHAUSTED) travels as trailing metadata.
    if (const int64_t ms = RetryAfterMs(box_->status); ms > 0) {
      ctx_->AddTrailingMetadata("retry-after-ms", std::to_string(ms));
    }
    Finish(ToGrpc(box_->status));
  }
}

void GenerateReactor::OnWriteDone(bool ok) {
  std::lock_guard<std::mutex> lock(box_->mu);
  box_->queue.pop_front();
  box_->writing = false;
  if (!ok) {
    box_->cancel.Cancel();
    if (!box_->finished) {
      box_->finished = true;
      Finish(grpc::Status(grpc::StatusCode::CANCELLED, "client went away"));
    }
    return;
  }
  Pump();
}

void GenerateReactor::OnCancel() { box_->cancel.Cancel(); }

void GenerateReactor::OnDone() {
  {
    std::lock_guard<std::mutex> lock(box_->mu);
    box_->reader = nullptr;
    box_->cancel.Cancel();
  }
  delete this;
}

}  // namespace specdec::services
