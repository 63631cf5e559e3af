#include "clients/cpp/client.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <fstream>

namespace specdec {
namespace {

absl::Status FromGrpc(const grpc::Status& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.error_code()), s.error_message());
}

// A call that fails UNAVAILABLE before the router answered anything (e.g. it raced the GOAWAY of
// a connection the router recycles) is tried again, at most twice; once a response has arrived
// gRPC never retries, so no token is ever delivered twice.
constexpr char kServiceConfig[] = R"({"methodConfig": [{
  "name": [{"service": "specdec.v1.Router"}],
  "retryPolicy": {"maxAttempts": 3, "initialBackoff": "0.05s", "maxBackoff": "0.5s",
                  "backoffMultiplier": 2, "retryableStatusCodes": ["UNAVAILABLE"]}}]})";

}  // namespace

std::unique_ptr<Client> Client::Connect(const std::string& address, const std::string& api_key) {
  return *Connect(address, api_key, ClientTls{});
}

absl::StatusOr<std::unique_ptr<Client>> Client::Connect(const std::string& address,
                                                        const std::string& api_key,
                                                        const ClientTls& tls) {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!tls.ca.empty()) {
    grpc::SslCredentialsOptions ssl;
    for (auto [path, out] :
         {std::pair{&tls.ca, &ssl.pem_root_certs}, std::pair{&tls.cert, &ssl.pem_cert_chain},
          std::pair{&tls.key, &ssl.pem_private_key}}) {
      if (path->empty()) continue;
      std::ifstream in(*path, std::ios::binary);
      if (!in) return absl::InvalidArgumentError("cannot read the TLS file " + *path);
      out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  args.SetServiceConfigJSON(kServiceConfig);
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 1);
  return std::unique_ptr<Client>(new Client(
      v1::Router::NewStub(grpc::CreateCustomChannel(address, credentials, args)), api_key));
}

absl::StatusOr<v1::Summary> Client::GenerateStream(
    const v1::GenerateRequest& request, const std::function<void(const v1::TokenChunk&)>& on_chunk,
    int timeout_ms) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  if (!api_key_.empty()) ctx.AddMetadata("authorization", "Bearer " + api_key_);
  auto reader = stub_->Generate(&ctx, request);
  v1::GenerateResponse resp;
  v1::Summary summary;
  bool have_summary = false;
  while (reader->Read(&resp)) {
    if (resp.has_chunk()) {
      if (on_chunk) on_chunk(resp.chunk());
    } else if (resp.has_summary()) {
      summary = resp.summary();
      have_summary = true;
    }
  }
  grpc::Status s = reader->Finish();
  if (!s.ok()) return FromGrpc(s);
  if (!have_summary) return absl::InternalError("the router closed the stream without a summary");
  return summary;
}

absl::StatusOr<GenerateResult> Client::Generate(const v1::GenerateRequest& request,
                                                int timeout_ms) {
  GenerateResult r;
  auto summary = GenerateStream(
      request,
      [&](const v1::TokenChunk& c) {
        if (c.prompt()) return;
        r.tokens.insert(r.tokens.end(), c.token_ids().begin(), c.token_ids().end());
        r.text += c.text();
      },
      timeout_ms);
  if (!summary.ok()) return summary.status();
  r.summary = *std::move(summary);
  return r;
}

absl::StatusOr<v1::RouterInfo> Client::Info(int timeout_ms) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
  ctx.set_wait_for_ready(true);
  v1::RouterInfo info;
  grpc::Status s = stub_->GetInfo(&ctx, v1::GetInfoRequest(), &info);
  if (!s.ok()) return FromGrpc(s);
  return info;
}

}  // namespace specdec
