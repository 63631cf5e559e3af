// The responses a request's worker produces, handed to whatever delivers them to the client: the
// gRPC Generate reactor (generate_reactor.h) or an HTTP stream (http_front.h). One worker writes,
// one reader drains; the client's cancel travels the other way.
#ifndef SPECDEC_SERVICES_ROUTER_OUTBOX_H_
#define SPECDEC_SERVICES_ROUTER_OUTBOX_H_

#include <deque>
#include <mutex>

#include "absl/status/status.h"
#include "services/router/cancel_signal.h"
#include "specdec/v1/router.pb.h"

namespace specdec::services {

// Delivers an Outbox's responses. Pump() is called with the box's mutex held whenever a response
// or the finish was queued; it must not block.
class OutboxReader {
 public:
  virtual ~OutboxReader() = default;
  virtual void Pump() = 0;
};

// Thread-safe through `mu`. Outlives its reader.
struct Outbox {
  std::mutex mu;
  std::deque<v1::GenerateResponse> queue;
  bool writing = false, finish_requested = false, finished = false;
  absl::Status status;             // the request's outcome, payloads (retry hints) included
  CancelSignal cancel;             // the client cancelled or went away
  OutboxReader* reader = nullptr;  // null once the client is gone or served
};

// Queues a response for the client (dropped once the reader is gone).
void Push(Outbox& box, v1::GenerateResponse response);
// Ends the stream with `status` after the queued responses.
void FinishBox(Outbox& box, absl::Status status);

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_ROUTER_OUTBOX_H_
