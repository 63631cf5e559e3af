// The wire contract of specdec.v1: services expose the documented RPCs with the documented
// streaming kinds, every operation message survives a serialize/parse round trip, the API
// matches the recorded snapshot (tests/proto/specdec_v1_api.golden: removing, renumbering or
// retyping anything is a breaking change and fails here), and every declaration is documented.
#include <google/protobuf/descriptor.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "specdec/v1/drafter.grpc.pb.h"
#include "specdec/v1/policy.grpc.pb.h"
#include "specdec/v1/router.grpc.pb.h"
#include "specdec/v1/target.grpc.pb.h"

namespace specdec::v1 {
namespace {

using google::protobuf::Descriptor;
using google::protobuf::DescriptorPool;
using google::protobuf::EnumDescriptor;
using google::protobuf::FieldDescriptor;
using google::protobuf::FileDescriptor;
using google::protobuf::MethodDescriptor;
using google::protobuf::ServiceDescriptor;

const std::string kSourceDir = SPECDEC_SOURCE_DIR;
const char* const kProtoFiles[] = {"common", "target", "drafter", "policy", "router"};

const MethodDescriptor* FindRpc(const std::string& service, const std::string& rpc) {
  const auto* s = DescriptorPool::generated_pool()->FindServiceByName("specdec.v1." + service);
  return s == nullptr ? nullptr : s->FindMethodByName(rpc);
}

TEST(Protocol, ServicesExposeExactlyTheDocumentedRpcs) {
  struct Want {
    const char* service;
    const char* rpc;
    bool client_streaming, server_streaming;
  };
  const std::vector<Want> wants = {{"Target", "Session", true, true},
                                   {"Target", "GetInfo", false, false},
                                   {"Drafter", "Session", true, true},
                                   {"Drafter", "GetInfo", false, false},
                                   {"Policy", "PredictBlockSize", false, false},
                                   {"Policy", "GetInfo", false, false},
                                   {"Router", "Generate", false, true},
                                   {"Router", "GetInfo", false, false}};
  for (const Want& w : wants) {
    const MethodDescriptor* m = FindRpc(w.service, w.rpc);
    ASSERT_NE(m, nullptr) << w.service << "." << w.rpc;
    EXPECT_EQ(m->client_streaming(), w.client_streaming) << w.service << "." << w.rpc;
    EXPECT_EQ(m->server_streaming(), w.server_streaming) << w.service << "." << w.rpc;
  }
  for (const char* service : {"Target", "Drafter", "Policy", "Router"}) {
    const auto* s =
        DescriptorPool::generated_pool()->FindServiceByName(std::string("specdec.v1.") + service);
    ASSERT_NE(s, nullptr) << service;
    const auto n = std::count_if(wants.begin(), wants.end(),
                                 [&](const Want& w) { return std::string(w.service) == service; });
    EXPECT_EQ(s->method_count(), n) << service << " has an rpc this test does not know";
  }
  EXPECT_EQ(FindRpc("Target", "Session")->input_type(), TargetRequest::descriptor());
  EXPECT_EQ(FindRpc("Drafter", "Session")->output_type(), DrafterResponse::descriptor());
  EXPECT_EQ(FindRpc("Router", "GetInfo")->output_type(), RouterInfo::descriptor());
}

// The names of a oneof's fields, in declaration order.
std::vector<std::string> OneofFields(const Descriptor* d, const std::string& oneof) {
  std::vector<std::string> names;
  const auto* o = d->FindOneofByName(oneof);
  if (o == nullptr) return names;
  for (int i = 0; i < o->field_count(); ++i) names.push_back(o->field(i)->name());
  return names;
}

TEST(Protocol, SessionOperationsAreOneofs) {
  using V = std::vector<std::string>;
  EXPECT_EQ(OneofFields(TargetRequest::descriptor(), "op"),
            (V{"prefill", "verify", "release", "attach", "run"}));
  EXPECT_EQ(OneofFields(TargetResponse::descriptor(), "result"),
            (V{"prefill", "verify", "released", "attached", "error"}));
  EXPECT_EQ(OneofFields(DrafterRequest::descriptor(), "op"),
            (V{"open", "extend", "draft_block", "draft_chain", "draft_tree", "commit", "release",
               "attach"}));
  EXPECT_EQ(OneofFields(DrafterResponse::descriptor(), "result"),
            (V{"opened", "extended", "drafted", "committed", "released", "attached", "error"}));
  EXPECT_EQ(OneofFields(GenerateRequest::descriptor(), "prompt"), (V{"text", "token_ids"}));
  EXPECT_EQ(OneofFields(GenerateResponse::descriptor(), "item"), (V{"chunk", "summary"}));
  // Both session requests carry the pipelining sequence number as field 1.
  for (const Descriptor* d : {TargetRequest::descriptor(), TargetResponse::descriptor(),
                              DrafterRequest::descriptor(), DrafterResponse::descriptor()}) {
    const FieldDescriptor* seq = d->FindFieldByName("seq");
    ASSERT_NE(seq, nullptr) << d->full_name();
    EXPECT_EQ(seq->number(), 1);
    EXPECT_EQ(seq->type(), FieldDescriptor::TYPE_UINT64);
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

void SetBf16(Tensor* t, int64_t rows, int64_t cols) {
  t->set_dtype(BF16);
  t->add_shape(rows);
  t->add_shape(cols);
  t->set_data(std::string(static_cast<size_t>(rows * cols * 2), '\x3f'));
}

TEST(Protocol, TargetMessagesRoundTrip) {
  TargetRequest prefill;
  prefill.set_seq(1);
  auto* pf = prefill.mutable_prefill();
  for (int t : {1, 42, 7}) pf->add_tokens(t);
  pf->add_capture_layers(1);
  pf->add_capture_layers(3);
  pf->set_return_logits(true);
  pf->set_reserve_tokens(160);
  pf->mutable_sampling()->set_temperature(0.7f);
  pf->mutable_sampling()->set_top_k(40);
  pf->mutable_sampling()->set_top_p(0.9f);
  pf->mutable_sampling()->set_seed(1234);
  auto p = RoundTrip(prefill);
  ASSERT_EQ(p.op_case(), TargetRequest::kPrefill);
  EXPECT_EQ(p.prefill().tokens(1), 42);
  EXPECT_EQ(p.prefill().sampling().seed(), 1234u);

  TargetResponse prefilled;
  prefilled.set_seq(1);
  auto* pr = prefilled.mutable_prefill();
  pr->mutable_handle()->set_id("t0/17");
  pr->mutable_handle()->set_replica("target-0");
  pr->mutable_handle()->set_lease_ms(30000);
  pr->mutable_handle()->set_length(3);
  pr->set_first_token(99);
  pr->mutable_last_logits()->set_dtype(F32);
  pr->mutable_last_logits()->add_shape(8);
  pr->mutable_last_logits()->set_data(std::string(32, '\0'));
  SetBf16(pr->mutable_features(), 3, 16);
  auto prb = RoundTrip(prefilled);
  EXPECT_EQ(prb.prefill().handle().replica(), "target-0");
  EXPECT_EQ(prb.prefill().features().data().size(), 96u);

  // Tree verify.
  TargetRequest verify;
  verify.set_seq(2);
  auto* v = verify.mutable_verify();
  v->set_handle("t0/17");
  for (int t : {5, 6, 7, 8}) v->add_tokens(t);
  for (int parent : {-1, 0, 0, 1}) v->add_tree_parents(parent);
  v->set_proposal(TargetVerify::SAMPLED);
  v->set_expected_length(3);
  v->set_return_features(true);
  auto vb = RoundTrip(verify);
  EXPECT_EQ(vb.verify().tree_parents(0), -1);
  EXPECT_EQ(vb.verify().expected_length(), 3);

  // A server-side run with hosted drafting.
  TargetRequest run;
  run.set_seq(3);
  auto* rn = run.mutable_run();
  rn->set_handle("t0/17");
  rn->set_last_token(9);
  rn->set_max_tokens(64);
  rn->add_stop_token_ids(2);
  rn->set_draft_block_size(8);
  rn->set_max_ms(12.5f);
  auto rb = RoundTrip(run);
  ASSERT_EQ(rb.op_case(), TargetRequest::kRun);
  EXPECT_EQ(rb.run().max_tokens(), 64);
  EXPECT_EQ(rb.run().draft_block_size(), 8);
  EXPECT_FLOAT_EQ(rb.run().max_ms(), 12.5f);

  // Chain verify with dense q; DFlash one-hot verify.
  TargetRequest chain;
  chain.mutable_verify()->set_proposal(TargetVerify::SAMPLED);
  chain.mutable_verify()->mutable_draft_probs()->set_dtype(F32);
  chain.mutable_verify()->mutable_draft_probs()->add_shape(3);
  chain.mutable_verify()->mutable_draft_probs()->add_shape(4);
  chain.mutable_verify()->mutable_draft_probs()->set_data(std::string(48, '\0'));
  EXPECT_EQ(RoundTrip(chain).verify().draft_probs().data().size(), 48u);
  TargetRequest one_hot;
  one_hot.mutable_verify()->set_proposal(TargetVerify::ONE_HOT);
  EXPECT_EQ(RoundTrip(one_hot).verify().proposal(), TargetVerify::ONE_HOT);

  TargetResponse res;
  res.set_seq(2);
  auto* vr = res.mutable_verify();
  vr->set_num_accepted(2);
  vr->add_accepted_rows(1);
  vr->add_accepted_rows(3);
  for (int t : {6, 8, 11}) vr->add_committed(t);
  vr->set_next_token(11);
  vr->set_length(6);
  SetBf16(vr->mutable_features(), 3, 16);
  vr->set_run_left(4);
  auto vrb = RoundTrip(res);
  EXPECT_EQ(vrb.result_case(), TargetResponse::kVerify);
  EXPECT_EQ(vrb.verify().committed_size(), vrb.verify().num_accepted() + 1);
  EXPECT_EQ(vrb.verify().run_left(), 4);

  TargetRequest release;
  release.mutable_release()->set_handle("t0/17");
  EXPECT_EQ(RoundTrip(release).op_case(), TargetRequest::kRelease);
  TargetRequest attach;
  attach.mutable_attach()->set_handle("t0/17");
  EXPECT_EQ(RoundTrip(attach).op_case(), TargetRequest::kAttach);
  TargetResponse released;
  released.mutable_released()->set_id("t0/17");
  EXPECT_EQ(RoundTrip(released).result_case(), TargetResponse::kReleased);

  TargetResponse err;
  err.set_seq(3);
  err.mutable_error()->set_code(5);
  err.mutable_error()->set_message("handle 't0/99' is unknown or expired");
  err.mutable_error()->set_field("verify.handle");
  auto eb = RoundTrip(err);
  EXPECT_EQ(eb.error().code(), 5);
  EXPECT_EQ(eb.error().field(), "verify.handle");
}

TEST(Protocol, DrafterMessagesRoundTrip) {
  DrafterRequest open;
  open.mutable_open()->set_kind(DFLASH_DRAFTER);
  open.mutable_open()->mutable_sampling()->set_temperature(1.f);
  EXPECT_EQ(RoundTrip(open).open().kind(), DFLASH_DRAFTER);

  DrafterRequest extend;
  extend.mutable_extend()->set_handle("d0/1");
  SetBf16(extend.mutable_extend()->mutable_features(), 5, 32);
  EXPECT_EQ(RoundTrip(extend).extend().features().shape(0), 5);

  DrafterRequest block;
  block.set_seq(4);
  block.mutable_draft_block()->set_block_size(16);
  block.mutable_draft_block()->set_last_token(17);
  SetBf16(block.mutable_draft_block()->mutable_new_features(), 2, 32);
  auto bb = RoundTrip(block);
  EXPECT_EQ(bb.draft_block().block_size(), 16);
  EXPECT_EQ(bb.draft_block().new_features().dtype(), BF16);

  DrafterRequest chain;
  chain.mutable_draft_chain()->set_length(4);
  EXPECT_EQ(RoundTrip(chain).draft_chain().length(), 4);

  DrafterRequest tree;
  tree.mutable_draft_tree()->set_budget(64);
  tree.mutable_draft_tree()->set_max_depth(8);
  tree.mutable_draft_tree()->set_threshold(0.05f);
  EXPECT_FLOAT_EQ(RoundTrip(tree).draft_tree().threshold(), 0.05f);

  DrafterRequest commit;
  commit.mutable_commit()->add_accepted(6);
  EXPECT_EQ(RoundTrip(commit).commit().accepted(0), 6);

  DrafterResponse drafted;
  drafted.set_seq(4);
  auto* d = drafted.mutable_drafted();
  for (int t : {6, 7, 8}) d->add_tokens(t);
  for (int parent : {-1, -1, 0}) d->add_tree_parents(parent);
  for (float s : {0.6f, 0.3f, 0.4f}) d->add_node_scores(s);
  d->set_forward_passes(2);
  auto db = RoundTrip(drafted);
  EXPECT_EQ(db.result_case(), DrafterResponse::kDrafted);
  EXPECT_EQ(db.drafted().tree_parents(2), 0);
  EXPECT_EQ(db.drafted().forward_passes(), 2);

  DrafterResponse opened;
  opened.mutable_opened()->set_id("d0/1");
  EXPECT_EQ(RoundTrip(opened).opened().id(), "d0/1");
}

TEST(Protocol, PolicyRouterAndInfoMessagesRoundTrip) {
  PredictBlockSizeRequest req;
  req.mutable_logits()->set_dtype(F32);
  req.mutable_logits()->add_shape(4);
  req.mutable_logits()->set_data(std::string(16, '\0'));
  req.set_model("specdec-pack-target");
  EXPECT_EQ(RoundTrip(req).model(), "specdec-pack-target");
  PredictBlockSizeResponse pr;
  pr.set_block_size(15);
  for (int b : {14, 15, 16, 17, 18}) pr.add_candidates(b);
  for (float s : {0.1f, 2.f, 1.f, -1.f, 0.f}) pr.add_scores(s);
  pr.set_policy_version("abc123");
  auto prb = RoundTrip(pr);
  EXPECT_EQ(prb.candidates_size(), 5);
  EXPECT_EQ(prb.scores_size(), prb.candidates_size());

  GenerateRequest g;
  g.set_text("def fib(n):");
  g.set_method(DFLASH_ADAPTIVE);
  g.set_max_new_tokens(64);
  g.add_stop("\n\n");
  g.add_stop_token_ids(2);
  g.set_echo(true);
  g.mutable_sampling()->set_temperature(1.f);
  auto gb = RoundTrip(g);
  EXPECT_EQ(gb.prompt_case(), GenerateRequest::kText);
  EXPECT_EQ(gb.method(), DFLASH_ADAPTIVE);
  EXPECT_EQ(gb.stop(0), "\n\n");
  GenerateRequest ids;
  for (int t : {1, 2, 3}) ids.mutable_token_ids()->add_ids(t);
  EXPECT_EQ(RoundTrip(ids).prompt_case(), GenerateRequest::kTokenIds);

  GenerateResponse c;
  c.mutable_chunk()->add_token_ids(5);
  c.mutable_chunk()->set_text("x");
  c.mutable_chunk()->set_index(3);
  c.mutable_chunk()->mutable_step()->set_committed(1);
  EXPECT_EQ(RoundTrip(c).chunk().index(), 3);
  GenerateResponse s;
  auto* sum = s.mutable_summary();
  sum->set_finish_reason(STOP);
  sum->set_stop_string("\n\n");
  auto* st = sum->mutable_stats();
  st->set_method(DFLASH_ADAPTIVE);
  st->set_tau(4.5);
  st->set_block_size(16);
  st->add_accepted_per_position(10);
  st->mutable_timings()->set_verify_ms(12.5);
  st->set_estimated_speedup(2.1);
  sum->mutable_usage()->set_completion_tokens(64);
  auto sb = RoundTrip(s);
  EXPECT_DOUBLE_EQ(sb.summary().stats().tau(), 4.5);
  EXPECT_DOUBLE_EQ(sb.summary().stats().timings().verify_ms(), 12.5);

  RouterInfo info;
  info.mutable_target()->set_vocab_size(8192);
  info.mutable_target()->set_max_context(2048);
  auto* dm = info.mutable_drafter()->add_draft_models();
  dm->set_kind(AR_DRAFT_LM);
  dm->mutable_model()->set_vocab_size(8192);
  info.add_methods(AR);
  info.add_methods(DFLASH);
  info.set_default_method(DFLASH);
  auto ib = RoundTrip(info);
  EXPECT_EQ(ib.drafter().draft_models(0).kind(), AR_DRAFT_LM);
  EXPECT_EQ(ib.methods_size(), 2);
}

TEST(Protocol, EnumNamesAreStable) {
  // The router and the CLI map these names; renaming one breaks clients.
  for (const char* name : {"AR", "DRAFT_CHAIN", "DYSPEC_TREE", "DFLASH", "DFLASH_ADAPTIVE"}) {
    specdec::v1::Method m;
    EXPECT_TRUE(Method_Parse(name, &m)) << name;
  }
  EXPECT_EQ(Method_Name(DFLASH_ADAPTIVE), "DFLASH_ADAPTIVE");
  EXPECT_EQ(DType_Name(BF16), "BF16");
  EXPECT_EQ(DraftModelKind_Name(DFLASH_DRAFTER), "DFLASH_DRAFTER");
  EXPECT_EQ(FinishReason_Name(LENGTH), "LENGTH");
  // Zero values mean "unset" everywhere.
  EXPECT_EQ(METHOD_UNSPECIFIED, 0);
  EXPECT_EQ(DTYPE_UNSPECIFIED, 0);
  EXPECT_EQ(TargetVerify::PROPOSAL_UNSPECIFIED, 0);
}

// ---- API snapshot -------------------------------------------------------------------------

std::string FieldType(const FieldDescriptor* f) {
  if (f->message_type() != nullptr) return f->message_type()->full_name();
  if (f->enum_type() != nullptr) return f->enum_type()->full_name();
  return f->type_name();
}

void DumpEnum(const EnumDescriptor* e, std::vector<std::string>& out) {
  out.push_back("enum " + e->full_name());
  for (int i = 0; i < e->value_count(); ++i) {
    out.push_back("enum_value " + e->full_name() + "." + e->value(i)->name() + " = " +
                  std::to_string(e->value(i)->number()));
  }
}

void DumpMessage(const Descriptor* d, std::vector<std::string>& out) {
  out.push_back("message " + d->full_name());
  for (int i = 0; i < d->field_count(); ++i) {
    const FieldDescriptor* f = d->field(i);
    std::string line = "field " + f->full_name() + " = " + std::to_string(f->number()) + " : " +
                       (f->is_repeated() ? "repeated " : "") + FieldType(f);
    if (f->real_containing_oneof() != nullptr) {
      line += " oneof " + f->real_containing_oneof()->name();
    }
    out.push_back(line);
  }
  for (int i = 0; i < d->enum_type_count(); ++i) DumpEnum(d->enum_type(i), out);
  for (int i = 0; i < d->nested_type_count(); ++i) DumpMessage(d->nested_type(i), out);
}

// One line per declaration, fully qualified, so that a set difference names what changed.
std::vector<std::string> DumpApi() {
  std::vector<std::string> out;
  for (const char* name : kProtoFiles) {
    const FileDescriptor* f = DescriptorPool::generated_pool()->FindFileByName(
        std::string("specdec/v1/") + name + ".proto");
    EXPECT_NE(f, nullptr) << name;
    if (f == nullptr) continue;
    EXPECT_EQ(f->package(), "specdec.v1");
    for (int i = 0; i < f->enum_type_count(); ++i) DumpEnum(f->enum_type(i), out);
    for (int i = 0; i < f->message_type_count(); ++i) DumpMessage(f->message_type(i), out);
    for (int i = 0; i < f->service_count(); ++i) {
      const ServiceDescriptor* s = f->service(i);
      out.push_back("service " + s->full_name());
      for (int j = 0; j < s->method_count(); ++j) {
        const MethodDescriptor* m = s->method(j);
        out.push_back("rpc " + m->full_name() + "(" + (m->client_streaming() ? "stream " : "") +
                      m->input_type()->full_name() + ") returns (" +
                      (m->server_streaming() ? "stream " : "") + m->output_type()->full_name() +
                      ")");
      }
    }
  }
  return out;
}

TEST(Protocol, ApiMatchesSnapshot) {
  // Make sure every file is linked in and registered.
  ASSERT_NE(TargetRequest::descriptor(), nullptr);
  ASSERT_NE(DrafterRequest::descriptor(), nullptr);
  ASSERT_NE(PredictBlockSizeRequest::descriptor(), nullptr);
  ASSERT_NE(GenerateRequest::descriptor(), nullptr);
  const std::vector<std::string> api = DumpApi();
  const std::string path = kSourceDir + "/tests/proto/specdec_v1_api.golden";
  if (const char* update = std::getenv("SPECDEC_UPDATE_GOLDEN"); update && *update == '1') {
    std::ofstream out(path);
    out << "# specdec.v1 API snapshot, checked by tests/proto/protocol_test.cc.\n"
        << "# Regenerate after an intended, compatible addition:\n"
        << "#   SPECDEC_UPDATE_GOLDEN=1 <build>/tests/proto/protocol_test\n";
    for (const std::string& line : api) out << line << "\n";
    GTEST_SKIP() << "wrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in.good()) << "missing " << path;
  std::set<std::string> golden;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') golden.insert(line);
  }
  const std::set<std::string> now(api.begin(), api.end());
  std::ostringstream breaking, added;
  for (const std::string& line : golden) {
    if (!now.contains(line)) breaking << "  " << line << "\n";
  }
  for (const std::string& line : now) {
    if (!golden.contains(line)) added << "  " << line << "\n";
  }
  EXPECT_TRUE(breaking.str().empty())
      << "BREAKING wire change: these declarations were removed, renumbered or retyped "
         "(reserve the numbers instead; add new fields with new numbers):\n"
      << breaking.str();
  EXPECT_TRUE(added.str().empty())
      << "new declarations not yet in the snapshot (if intended, regenerate with "
         "SPECDEC_UPDATE_GOLDEN=1):\n"
      << added.str();
}

// Every service, rpc, message and enum declaration in the .proto sources carries a comment
// (on the line above or trailing): the field contracts live there.
TEST(Protocol, EveryDeclarationIsDocumented) {
  const std::regex decl(R"(^\s*(service|rpc|message|enum)\s+(\w+))");
  for (const char* name : kProtoFiles) {
    const std::string path = kSourceDir + "/proto/specdec/v1/" + name + ".proto";
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << path;
    std::string prev, line;
    int undocumented = 0;
    for (int n = 1; std::getline(in, line); ++n) {
      std::smatch m;
      if (std::regex_search(line, m, decl)) {
        const bool above = prev.find("//") != std::string::npos;
        const bool trailing = line.find("//") != std::string::npos;
        if (!above && !trailing) {
          ADD_FAILURE() << path << ":" << n << ": undocumented " << m[1] << " " << m[2];
          ++undocumented;
        }
      }
      prev = line;
    }
    EXPECT_EQ(undocumented, 0) << path;
  }
}

}  // namespace
}  // namespace specdec::v1
