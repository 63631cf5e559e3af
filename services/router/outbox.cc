#include "services/router/outbox.h"

namespace specdec::services {

void Push(Outbox& box, v1::GenerateResponse response) {
  std::lock_guard<std::mutex> lock(box.mu);
  if (box.reader == nullptr || box.finished) return;
  box.queue.push_back(std::move(response));
  box.reader->Pump();
}

void FinishBox(Outbox& box, absl::Status status) {
  std::lock_guard<std::mutex> lock(box.mu);
  if (box.reader == nullptr || box.finished) return;
  box.finish_requested = true;
  box.status = std::move(status);
  box.reader->Pump();
}

}  // namespace specdec::services
