#include "services/router/generate_reactor.h"

namespace specdec::services {

GenerateReactor::GenerateReactor(std::shared_ptr<Outbox> box) : box_(std::move(box)) {
  box_->reader = this;
}

void GenerateReactor::Pump() {
  if (box_->finished || box_->writing) return;
  if (!box_->queue.empty()) {
    box_->writing = true;
    StartWrite(&box_->queue.front());
  } else if (box_->finish_requested) {
    box_->finished = true;
    Finish(box_->status);
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
