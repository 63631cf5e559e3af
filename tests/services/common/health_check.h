// grpc.health.v1.Health/Check through a generic stub, for tests of servers that register no
// service of their own.
#ifndef SPECDEC_TESTS_SERVICES_COMMON_HEALTH_CHECK_H_
#define SPECDEC_TESTS_SERVICES_COMMON_HEALTH_CHECK_H_

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <string>

namespace specdec::services::testing_util {

// The status of a health Check of the server `channel` reaches, within `timeout_ms`.
inline grpc::Status HealthCheck(const std::shared_ptr<grpc::Channel>& channel, int timeout_ms) {
  grpc::GenericStub stub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  grpc::Slice empty(std::string(""));  // HealthCheckRequest{service: ""}
  grpc::ByteBuffer request(&empty, 1), response;
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status status;
  stub.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                 [&](grpc::Status s) {
                   std::lock_guard<std::mutex> lock(mu);
                   status = s;
                   done = true;
                   cv.notify_all();
                 });
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return done; });
  return status;
}

}  // namespace specdec::services::testing_util

#endif  // SPECDEC_TESTS_SERVICES_COMMON_HEALTH_CHECK_H_
