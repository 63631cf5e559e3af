// The Session stream skeleton over a real in-process gRPC server: operations run on the scheduler
// thread and are answered in order, and an operation whose stream the client cancelled while it
// waited in the queue is dropped unrun, its stream's state freed by stream_done.
#include "services/common/session_loop.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "services/common/server.h"
#include "specdec/v1/target.grpc.pb.h"

namespace specdec::services {
namespace {

using Loop = SessionLoop<v1::TargetRequest, v1::TargetResponse>;
using namespace std::chrono_literals;

// Records what the loop ran, in order; the operation on handle "hold" blocks until Release(),
// and a batch defers the first operation on handle "defer" it sees.
class Recorder {
 public:
  Loop::Hooks Hooks() {
    Loop::Hooks h;
    h.execute = [this](uint64_t owner, const v1::TargetRequest& r, v1::TargetResponse* resp) {
      const std::string& handle = r.release().handle();
      std::unique_lock<std::mutex> lock(mu_);
      ran_.insert(handle);
      order_.push_back(handle);
      cv_.notify_all();
      if (handle == "hold") cv_.wait(lock, [&] { return released_; });
      resp->mutable_released()->set_id(handle);
      return absl::OkStatus();
    };
    h.execute_batch = [this](std::vector<Loop::Op>& ops) {
      for (Loop::Op& op : ops) {
        const std::string& handle = op.request->release().handle();
        std::lock_guard<std::mutex> lock(mu_);
        if (handle == "defer" && !deferred_) {
          deferred_ = op.deferred = true;
          continue;
        }
        ran_.insert(handle);
        order_.push_back(handle);
        op.response->mutable_released()->set_id(handle);
      }
    };
    h.stream_done = [this](uint64_t owner) {
      std::lock_guard<std::mutex> lock(mu_);
      ++streams_done_;
      cv_.notify_all();
    };
    h.sessions = [this](int delta) {
      std::lock_guard<std::mutex> lock(mu_);
      open_streams_ += delta;
      cv_.notify_all();
    };
    return h;
  }
  // Waits up to 10 s for `pred` (called with the lock held).
  template <typename Pred>
  bool WaitFor(Pred pred) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, 10s, pred);
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    released_ = true;
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::set<std::string> ran_;
  std::vector<std::string> order_;
  int streams_done_ = 0, open_streams_ = 0;
  bool released_ = false, deferred_ = false;
};

class TestTarget final : public v1::Target::CallbackService {
 public:
  explicit TestTarget(Loop::Hooks hooks) : loop_(std::move(hooks)) {}
  grpc::ServerBidiReactor<v1::TargetRequest, v1::TargetResponse>* Session(
      grpc::CallbackServerContext*) override {
    return loop_.NewReactor();
  }

 private:
  Loop loop_;
};

v1::TargetRequest ReleaseOp(const std::string& handle, uint64_t seq) {
  v1::TargetRequest r;
  r.set_seq(seq);
  r.mutable_release()->set_handle(handle);
  return r;
}

// A Target service of the loop over the Recorder's hooks, served on a free port.
class SessionLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto started = StartServer("127.0.0.1:0", {&service_}, {"specdec.v1.Target"});
    ASSERT_TRUE(started.ok()) << started.status();
    server_ = std::move(started->server);
    stub_ = v1::Target::NewStub(grpc::CreateChannel(absl::StrCat("127.0.0.1:", started->port),
                                                    grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  Recorder rec_;
  TestTarget service_{rec_.Hooks()};
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<v1::Target::Stub> stub_;
};

TEST_F(SessionLoopTest, AnOperationOfACancelledStreamIsDroppedUnrun) {
  Recorder& rec = rec_;
  v1::Target::Stub* stub = stub_.get();

  // Stream A's operation occupies the scheduler thread.
  grpc::ClientContext ctx_a;
  auto a = stub->Session(&ctx_a);
  ASSERT_TRUE(a->Write(ReleaseOp("hold", 1)));
  ASSERT_TRUE(rec.WaitFor([&] { return rec.ran_.count("hold") == 1; }));

  // Stream B's operation waits in the queue behind it; then B's client cancels.
  grpc::ClientContext ctx_b;
  auto b = stub->Session(&ctx_b);
  ASSERT_TRUE(b->Write(ReleaseOp("queued", 1)));
  ASSERT_TRUE(rec.WaitFor([&] { return rec.open_streams_ == 2; }));
  std::this_thread::sleep_for(300ms);  // for the server to read it (loopback: well under 1 ms)
  ctx_b.TryCancel();
  EXPECT_EQ(b->Finish().error_code(), grpc::StatusCode::CANCELLED);
  ASSERT_TRUE(rec.WaitFor([&] { return rec.open_streams_ == 1; }));  // B's RPC is done

  rec.Release();
  v1::TargetResponse resp;
  ASSERT_TRUE(a->Read(&resp));
  EXPECT_EQ(resp.seq(), 1u);
  EXPECT_EQ(resp.released().id(), "hold");
  ASSERT_TRUE(rec.WaitFor([&] { return rec.streams_done_ == 1; }));  // B's state freed
  {
    std::lock_guard<std::mutex> lock(rec.mu_);
    EXPECT_EQ(rec.ran_.count("queued"), 0u) << "the cancelled stream's operation ran";
  }

  // A is still served.
  ASSERT_TRUE(a->Write(ReleaseOp("next", 2)));
  ASSERT_TRUE(a->Read(&resp));
  EXPECT_EQ(resp.seq(), 2u);
  EXPECT_EQ(resp.released().id(), "next");
  a->WritesDone();
  EXPECT_TRUE(a->Finish().ok());
}

TEST_F(SessionLoopTest, ADeferredOperationRunsNextIterationOnceAndItsStreamWaitsBehindIt) {
  Recorder& rec = rec_;
  v1::Target::Stub* stub = stub_.get();

  // Stream H's operation occupies the scheduler thread while A (two operations, the first one
  // deferred) and B queue behind it, to be taken in one iteration: A1, B, A2.
  grpc::ClientContext ctx_h, ctx_a, ctx_b;
  auto h = stub->Session(&ctx_h);
  ASSERT_TRUE(h->Write(ReleaseOp("hold", 1)));
  ASSERT_TRUE(rec.WaitFor([&] { return rec.ran_.count("hold") == 1; }));
  auto a = stub->Session(&ctx_a);
  auto b = stub->Session(&ctx_b);
  ASSERT_TRUE(a->Write(ReleaseOp("defer", 1)));
  ASSERT_TRUE(b->Write(ReleaseOp("b", 1)));
  ASSERT_TRUE(rec.WaitFor([&] { return rec.open_streams_ == 3; }));
  // For the server to read them (loopback: well under 1 ms), A1 and B before A2.
  std::this_thread::sleep_for(300ms);
  ASSERT_TRUE(a->Write(ReleaseOp("a2", 2)));
  std::this_thread::sleep_for(300ms);
  rec.Release();

  v1::TargetResponse resp;
  ASSERT_TRUE(h->Read(&resp));
  ASSERT_TRUE(b->Read(&resp));
  EXPECT_EQ(resp.released().id(), "b");
  // A's answers come once each, in its order, the deferred one first.
  ASSERT_TRUE(a->Read(&resp));
  EXPECT_EQ(resp.seq(), 1u);
  EXPECT_EQ(resp.released().id(), "defer");
  ASSERT_TRUE(a->Read(&resp));
  EXPECT_EQ(resp.seq(), 2u);
  EXPECT_EQ(resp.released().id(), "a2");
  for (auto* s : {&h, &a, &b}) {
    (*s)->WritesDone();
    EXPECT_TRUE((*s)->Finish().ok());
  }
  {
    std::lock_guard<std::mutex> lock(rec.mu_);
    EXPECT_TRUE(rec.deferred_);
    EXPECT_EQ(rec.order_, (std::vector<std::string>{"hold", "b", "defer", "a2"}));
  }
}

}  // namespace
}  // namespace specdec::services
