// The serving skeleton shared by the model-owning services (docs/design.md §1): bidirectional
// Session streams whose operations are queued to one scheduler thread that owns the models. gRPC
// reactors only enqueue and write; they never compute.
#ifndef SPECDEC_SERVICES_COMMON_SESSION_LOOP_H_
#define SPECDEC_SERVICES_COMMON_SESSION_LOOP_H_

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_set>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "services/common/batch_coalescer.h"

namespace specdec::services {

// Req/Resp are a service's stream messages: both have `seq`; Resp has a `result` oneof with an
// `error` (ErrorDetail) member. Thread-safe.
template <typename Req, typename Resp>
class SessionLoop {
 public:
  using Clock = std::chrono::steady_clock;
  // One queued operation as execute_batch sees it.
  struct Op {
    uint64_t owner;
    const Req* request;
    Resp* response;
    absl::Status status;
    // Set by execute_batch for an operation it leaves to the next iteration (e.g. a prompt
    // beyond the iteration's prefill budget, or one with parts still to prefill): not answered
    // now; it runs first in the next
    // iteration, ahead of what was queued since, and its stream's later operations wait behind
    // it.
    bool deferred = false;
  };
  struct Hooks {
    // Runs one operation for stream `owner` on the scheduler thread; a non-OK status becomes an
    // ErrorDetail response and the stream goes on.
    std::function<absl::Status(uint64_t owner, const Req&, Resp*)> execute;
    // Optional continuous batching: runs the queued operations of different streams (each stream
    // at most once, in queue order, at most max_batch) together, e.g. as one batched forward
    // pass, setting every op's status and response (or deferring it, Op::deferred). Unset:
    // `execute` runs them one at a time.
    std::function<void(std::vector<Op>& ops)> execute_batch;
    // With execute_batch: whether an operation alone in its batch goes to execute_batch too (one
    // that execute_batch may defer, e.g. a prompt prefilled in parts); unset or false: `execute`.
    std::function<bool(const Req&)> batch_alone;
    size_t max_batch = 32;
    // With execute_batch: the longest a batch is held for streams expected back soon (see
    // BatchCoalescer; zero: never held).
    std::chrono::microseconds batch_wait_max{0};
    // After every operation, before its response is sent: (request, status, queue seconds,
    // compute seconds (for a batched operation the batch's compute time), the response, which
    // the hook may annotate).
    std::function<void(const Req&, const absl::Status&, double, double, Resp*)> observe;
    // Optional server-side continuation: called after an operation ran, before its response is
    // sent. A returned request is queued for the same stream (to run in a later pass, like an
    // operation the client sent) and answered on the stream like one; the hook may also adjust
    // the response (e.g. say that more answers follow). Nothing is queued once the stream is
    // gone, and the stream does not finish while a continuation is pending. `elapsed`: seconds
    // since the operation was queued (its queueing and its compute).
    std::function<std::optional<Req>(uint64_t owner, const Req&, const absl::Status&,
                                     double elapsed, Resp*)>
        follow_up;
    std::function<void()> periodic;  // about once a second (lease sweeps)
    // The stream ended: free what it owns. Runs on the scheduler thread, after every operation
    // the stream queued, so no operation ever sees its state freed underneath it.
    std::function<void(uint64_t owner)> stream_done;
    std::function<void(int delta)> sessions;  // +1 / -1 as streams open and close
    // Runs first on the scheduler thread (e.g. to put the thread in inference mode).
    std::function<void()> thread_start;
  };

  explicit SessionLoop(Hooks hooks)
      : hooks_(std::move(hooks)),
        coalescer_(CoalescerOptions(hooks_)),
        sender_([this] { SendAnswers(); }),
        loop_([this] { Loop(); }) {}
  ~SessionLoop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    loop_.join();
    {
      std::lock_guard<std::mutex> lock(send_mu_);
      send_stopping_ = true;
    }
    send_cv_.notify_all();
    sender_.join();
  }

  // For the service's Session method.
  grpc::ServerBidiReactor<Req, Resp>* NewReactor() {
    return new Reactor(this, next_stream_.fetch_add(1));
  }

 private:
  class Reactor;
  struct StreamState {
    std::mutex mu;
    Reactor* reactor = nullptr;     // null once the RPC is done
    std::atomic<bool> gone{false};  // cancelled by the client, or done
  };
  struct Work {
    std::shared_ptr<StreamState> stream;
    uint64_t owner;
    Req request;
    Clock::time_point enqueued;
    bool stream_ended = false;  // not an operation: run stream_done for `owner`
  };

  class Reactor final : public grpc::ServerBidiReactor<Req, Resp> {
   public:
    Reactor(SessionLoop* loop, uint64_t id)
        : loop_(loop), id_(id), state_(std::make_shared<StreamState>()) {
      state_->reactor = this;
      if (loop_->hooks_.sessions) loop_->hooks_.sessions(+1);
      this->StartRead(&request_);
    }
    void OnReadDone(bool ok) override {
      std::lock_guard<std::mutex> lock(mu_);
      if (!ok) {
        reads_done_ = true;
        MaybeFinishLocked();
        return;
      }
      ++pending_;
      loop_->Enqueue(Work{state_, id_, std::move(request_), Clock::now()});
      request_.Clear();
      this->StartRead(&request_);
    }
    // An operation the server queued for this stream itself (a continuation): answered by a
    // later Send like any other.
    void AddPending() {
      std::lock_guard<std::mutex> lock(mu_);
      ++pending_;
    }
    void Send(Resp response) {
      std::lock_guard<std::mutex> lock(mu_);
      --pending_;
      if (finished_) return;
      outbox_.push_back(std::move(response));
      if (!writing_) {
        writing_ = true;
        this->StartWrite(&outbox_.front());
      }
    }
    void OnWriteDone(bool ok) override {
      std::lock_guard<std::mutex> lock(mu_);
      outbox_.pop_front();
      if (!ok) {
        writing_ = false;
        if (!finished_) {
          finished_ = true;
          this->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "client stream closed"));
        }
        return;
      }
      if (!outbox_.empty() && !finished_) {
        this->StartWrite(&outbox_.front());
      } else {
        writing_ = false;
        MaybeFinishLocked();
      }
    }
    void OnCancel() override {
      state_->gone = true;
      std::lock_guard<std::mutex> lock(mu_);
      if (!finished_) {
        finished_ = true;
        this->Finish(grpc::Status(grpc::StatusCode::CANCELLED, "cancelled by the client"));
      }
    }
    void OnDone() override {
      {
        std::lock_guard<std::mutex> lock(state_->mu);
        state_->reactor = nullptr;
        state_->gone = true;
      }
      loop_->Enqueue(Work{nullptr, id_, Req(), Clock::now(), true});
      if (loop_->hooks_.sessions) loop_->hooks_.sessions(-1);
      delete this;
    }

   private:
    void MaybeFinishLocked() {
      if (reads_done_ && pending_ == 0 && !writing_ && !finished_) {
        finished_ = true;
        this->Finish(grpc::Status::OK);
      }
    }
    SessionLoop* loop_;
    uint64_t id_;
    std::shared_ptr<StreamState> state_;
    Req request_;
    std::mutex mu_;
    std::deque<Resp> outbox_;
    bool writing_ = false, reads_done_ = false, finished_ = false;
    int pending_ = 0;
  };

  void Enqueue(Work w) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(std::move(w));
    }
    cv_.notify_one();
  }

  static BatchCoalescer::Options CoalescerOptions(const Hooks& h) {
    BatchCoalescer::Options o;
    o.max_wait = h.execute_batch && h.max_batch > 1 ? h.batch_wait_max : Clock::duration::zero();
    return o;
  }

  // Moves the queue into `items`, telling the coalescer which streams came back.
  void TakeQueueLocked(std::deque<Work>& items) {
    for (Work& w : queue_) {
      if (!w.stream_ended) coalescer_.Arrived(w.owner, w.enqueued);
      items.push_back(std::move(w));
    }
    queue_.clear();
  }

  void Loop() {
    if (hooks_.thread_start) hooks_.thread_start();
    auto last_periodic = Clock::now();
    while (true) {
      std::deque<Work> items = std::exchange(carried_, {});
      deferred_owners_.clear();
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait_for(lock, std::chrono::milliseconds(200),
                     [&] { return stopping_ || !queue_.empty() || !items.empty(); });
        if (stopping_ && queue_.empty()) return;
        TakeQueueLocked(items);
        // Hold the batch briefly for streams expected back within a fraction of a step.
        if (coalescer_.enabled() && !items.empty()) {
          const std::optional<Clock::time_point> until = coalescer_.WaitUntil(Clock::now());
          while (until && !stopping_ && coalescer_.Awaited(Clock::now()) > 0) {
            if (!cv_.wait_until(lock, *until, [&] { return stopping_ || !queue_.empty(); })) break;
            TakeQueueLocked(items);
          }
        }
      }
      if (hooks_.periodic && Clock::now() - last_periodic > std::chrono::milliseconds(200)) {
        hooks_.periodic();
        last_periodic = Clock::now();
      }
      std::vector<Work*> batch;
      for (Work& w : items) {
        if (w.stream_ended) {
          RunBatch(batch);
          if (hooks_.stream_done) hooks_.stream_done(w.owner);
          coalescer_.Ended(w.owner);
          continue;
        }
        // An operation of a stream the client cancelled is dropped unrun: nobody reads its answer,
        // and what the stream holds is freed by its stream_done.
        if (w.stream->gone) continue;
        bool seen = false;
        for (Work* b : batch) seen = seen || b->owner == w.owner;
        // A stream's next operation depends on its previous one: it goes in the next batch.
        if (seen || batch.size() >= std::max<size_t>(1, hooks_.max_batch)) RunBatch(batch);
        if (deferred_owners_.contains(w.owner)) {
          carried_.push_back(std::move(w));  // behind its stream's deferred operation
          continue;
        }
        batch.push_back(&w);
      }
      RunBatch(batch);
    }
  }

  // An answer on its way to its stream.
  struct Answer {
    std::shared_ptr<StreamState> stream;
    Resp response;
  };

  // The sender thread: writes the answers the scheduler queued, in order, to the streams still
  // there. Writing an answer (serializing it, and often the socket write, which gRPC may run on
  // the calling thread) took about 8% of the target's scheduler thread at 4 concurrent runs on
  // the CPU; here it overlaps the next iteration's passes.
  void SendAnswers() {
    std::vector<Answer> sending;
    while (true) {
      {
        std::unique_lock<std::mutex> lock(send_mu_);
        send_cv_.wait(lock, [&] { return send_stopping_ || !answers_.empty(); });
        if (answers_.empty()) return;  // stopping, and everything sent
        sending.swap(answers_);
      }
      for (Answer& a : sending) {
        std::lock_guard<std::mutex> lock(a.stream->mu);
        if (a.stream->reactor != nullptr) a.stream->reactor->Send(std::move(a.response));
      }
      sending.clear();
    }
  }

  // Runs the collected operations, answers them and clears `batch`.
  void RunBatch(std::vector<Work*>& batch) {
    if (batch.empty()) return;
    std::vector<Resp> resps(batch.size());
    std::vector<Op> ops;
    std::vector<double> compute(batch.size());
    const auto t0 = Clock::now();
    for (size_t i = 0; i < batch.size(); ++i) {
      resps[i].set_seq(batch[i]->request.seq());
      ops.push_back(Op{batch[i]->owner, &batch[i]->request, &resps[i], absl::OkStatus()});
    }
    if (hooks_.execute_batch &&
        (batch.size() > 1 || (hooks_.batch_alone && hooks_.batch_alone(batch[0]->request)))) {
      hooks_.execute_batch(ops);
      const double c = std::chrono::duration<double>(Clock::now() - t0).count();
      std::fill(compute.begin(), compute.end(), c);
    } else {
      for (size_t i = 0; i < ops.size(); ++i) {
        const auto ti = Clock::now();
        ops[i].status = hooks_.execute(ops[i].owner, *ops[i].request, ops[i].response);
        compute[i] = std::chrono::duration<double>(Clock::now() - ti).count();
      }
    }
    coalescer_.Computed(std::chrono::duration<double>(Clock::now() - t0).count());
    std::vector<Answer> answers;
    for (size_t i = 0; i < batch.size(); ++i) {
      Work& w = *batch[i];
      if (ops[i].deferred) {
        deferred_owners_.insert(w.owner);
        carried_.push_back(std::move(w));
        continue;
      }
      Resp& resp = resps[i];
      const absl::Status& s = ops[i].status;
      const double queued = std::chrono::duration<double>(t0 - w.enqueued).count();
      if (hooks_.observe) hooks_.observe(w.request, s, queued, compute[i], &resp);
      std::optional<Req> next;
      if (hooks_.follow_up) {
        const double elapsed = std::chrono::duration<double>(Clock::now() - w.enqueued).count();
        next = hooks_.follow_up(w.owner, w.request, s, elapsed, &resp);
      }
      if (!s.ok()) {
        resp.clear_result();
        auto* e = resp.mutable_error();
        e->set_code(static_cast<int>(s.code()));
        e->set_message(std::string(s.message()));
        if (s.code() == absl::StatusCode::kResourceExhausted) e->set_retry_after_ms(100);
      }
      {
        std::lock_guard<std::mutex> lock(w.stream->mu);
        const bool alive = w.stream->reactor != nullptr;
        if (alive) {
          // Counted before this answer goes out, so the stream cannot finish in between.
          if (next) w.stream->reactor->AddPending();
          answers.push_back(Answer{w.stream, std::move(resp)});
        }
        coalescer_.Sent(w.owner, Clock::now());
        // Queued under the stream's lock, so it is ahead of the stream's end in the queue.
        if (alive && next) {
          next->set_seq(w.request.seq());
          Enqueue(Work{w.stream, w.owner, *std::move(next), Clock::now()});
        }
      }
    }
    batch.clear();
    if (answers.empty()) return;
    {
      std::lock_guard<std::mutex> lock(send_mu_);
      for (Answer& a : answers) answers_.push_back(std::move(a));
    }
    send_cv_.notify_one();
  }

  Hooks hooks_;
  BatchCoalescer coalescer_;  // scheduler thread only
  // Operations execute_batch deferred, and those of their streams queued behind them: the next
  // iteration's first. Scheduler thread only.
  std::deque<Work> carried_;
  std::unordered_set<uint64_t> deferred_owners_;  // streams with an operation in carried_
  std::atomic<uint64_t> next_stream_{1};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Work> queue_;
  bool stopping_ = false;
  // Answers for the sender thread, in order.
  std::mutex send_mu_;
  std::condition_variable send_cv_;
  std::vector<Answer> answers_;
  bool send_stopping_ = false;
  std::thread sender_;
  std::thread loop_;  // last: starts after every other member is ready
};

}  // namespace specdec::services

#endif  // SPECDEC_SERVICES_COMMON_SESSION_LOOP_H_
