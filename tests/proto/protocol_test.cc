// The wire contract: services expose the documented RPCs with the documented streaming kinds,
// and every operation message survives a serialize/parse round trip.
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include "specdec/v1/drafter.grpc.pb.h"
#include "specdec/v1/policy.grpc.pb.h"
#include "specdec/v1/router.grpc.pb.h"
#include "specdec/v1/target.grpc.pb.h"

namespace specdec::v1 {
namespace {

using google::protobuf::DescriptorPool;
using google::protobuf::MethodDescriptor;

const MethodDescriptor* Method(const std::string& service, const std::string& rpc) {
  const auto* s = DescriptorPool::generated_pool()->FindServiceByName("specdec.v1." + service);
  return s == nullptr ? nullptr : s->FindMethodByName(rpc);
}

TEST(Protocol, ServicesExposeDocumentedRpcs) {
  struct Want {
    const char* service;
    const char* rpc;
    bool client_streaming, server_streaming;
  };
  for (const Want& w :
       {Want{"Target", "Session", true, true}, Want{"Target", "GetInfo", false, false},
        Want{"Drafter", "Session", true, true}, Want{"Drafter", "GetInfo", false, false},
        Want{"Policy", "PredictBlockSize", false, false}, Want{"Router", "Generate", false, true},
        Want{"Router", "GetInfo", false, false}}) {
    const MethodDescriptor* m = Method(w.service, w.rpc);
    ASSERT_NE(m, nullptr) << w.service << "." << w.rpc;
    EXPECT_EQ(m->client_streaming(), w.client_streaming) << w.service << "." << w.rpc;
    EXPECT_EQ(m->server_streaming(), w.server_streaming) << w.service << "." << w.rpc;
  }
}

template <typename M>
M RoundTrip(const M& m) {
  std::string bytes;
  EXPECT_TRUE(m.SerializeToString(&bytes));
  M back;
  EXPECT_TRUE(back.ParseFromString(bytes));
  EXPECT_EQ(back.SerializeAsString(), bytes);
  return back;
}

TEST(Protocol, TargetMessagesRoundTrip) {
  TargetRequest prefill;
  prefill.set_seq(1);
  prefill.mutable_prefill()->add_tokens(1);
  prefill.mutable_prefill()->add_tokens(42);
  prefill.mutable_prefill()->add_capture_layers(3);
  prefill.mutable_prefill()->mutable_sampling()->set_temperature(0.7f);
  auto p = RoundTrip(prefill);
  ASSERT_EQ(p.op_case(), TargetRequest::kPrefill);
  EXPECT_EQ(p.prefill().tokens(1), 42);

  TargetRequest verify;
  verify.set_seq(2);
  auto* v = verify.mutable_verify();
  v->set_handle("t0/17");
  for (int t : {5, 6, 7}) v->add_tokens(t);
  for (int p : {-1, 0, 0}) v->add_tree_parents(p);
  v->set_proposal(TargetVerify::SAMPLED);
  v->mutable_draft_probs()->set_dtype(F32);
  v->mutable_draft_probs()->add_shape(3);
  v->mutable_draft_probs()->add_shape(4);
  v->mutable_draft_probs()->set_data(std::string(48, '\0'));
  auto vb = RoundTrip(verify);
  EXPECT_EQ(vb.verify().tree_parents(0), -1);
  EXPECT_EQ(vb.verify().draft_probs().data().size(), 48u);

  TargetResponse res;
  res.set_seq(2);
  res.mutable_verify()->set_num_accepted(1);
  res.mutable_verify()->add_committed(6);
  res.mutable_verify()->set_next_token(9);
  EXPECT_EQ(RoundTrip(res).result_case(), TargetResponse::kVerify);
  TargetResponse err;
  err.mutable_error()->set_code(5);
  err.mutable_error()->set_message("handle 't0/99' is unknown or expired");
  EXPECT_EQ(RoundTrip(err).error().code(), 5);
}

TEST(Protocol, DrafterPolicyRouterMessagesRoundTrip) {
  DrafterRequest open;
  open.mutable_open()->set_kind(DFLASH_DRAFTER);
  EXPECT_EQ(RoundTrip(open).open().kind(), DFLASH_DRAFTER);
  DrafterRequest block;
  block.mutable_draft_block()->set_block_size(16);
  block.mutable_draft_block()->mutable_new_features()->set_dtype(BF16);
  EXPECT_EQ(RoundTrip(block).draft_block().block_size(), 16);
  DrafterRequest tree;
  tree.mutable_draft_tree()->set_budget(64);
  tree.mutable_draft_tree()->set_threshold(0.05f);
  EXPECT_FLOAT_EQ(RoundTrip(tree).draft_tree().threshold(), 0.05f);

  PredictBlockSizeResponse pr;
  pr.set_block_size(15);
  for (int b : {14, 15, 16, 17, 18}) pr.add_candidates(b);
  EXPECT_EQ(RoundTrip(pr).candidates_size(), 5);

  GenerateRequest g;
  g.set_text("def fib(n):");
  g.set_method(DFLASH_ADAPTIVE);
  g.set_max_new_tokens(64);
  auto gb = RoundTrip(g);
  EXPECT_EQ(gb.prompt_case(), GenerateRequest::kText);
  EXPECT_EQ(gb.method(), DFLASH_ADAPTIVE);
  GenerateResponse s;
  s.mutable_summary()->set_finish_reason(STOP);
  s.mutable_summary()->mutable_stats()->set_tau(4.5);
  s.mutable_summary()->mutable_stats()->add_accepted_per_position(10);
  EXPECT_DOUBLE_EQ(RoundTrip(s).summary().stats().tau(), 4.5);
}

TEST(Protocol, MethodEnumMatchesEngineNames) {
  // The router maps these names onto engine methods; renaming one breaks clients.
  for (const char* name : {"AR", "DRAFT_CHAIN", "DYSPEC_TREE", "DFLASH", "DFLASH_ADAPTIVE"}) {
    specdec::v1::Method m;
    EXPECT_TRUE(Method_Parse(name, &m)) << name;
  }
}

}  // namespace
}  // namespace specdec::v1
