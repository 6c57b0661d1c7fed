// The executor's reports: an event per executed op through the installed hooks (what
// torch.profiler sees in the extension), kernel timings kept apart for forward and
// backward, the stash's bytes after a forward run, and the record of graph passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/profiler.h"
#include "ortmodule_onnx.pb.h"
#include "runtime/program.h"

namespace ortmodule {
namespace {

namespace pb = ::ortmodule_onnx;

// y = Tanh(Relu(x) * x), x: [B, 4] float
std::string small_model() {
  pb::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(18);
  pb::GraphProto* g = m.mutable_graph();
  pb::ValueInfoProto* x = g->add_input();
  x->set_name("x");
  auto* tt = x->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(pb::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("B");
  tt->mutable_shape()->add_dim()->set_dim_value(4);
  const std::vector<std::pair<std::string, std::vector<std::string>>> nodes = {
      {"Relu", {"x"}}, {"Mul", {"Relu_out", "x"}}, {"Tanh", {"Mul_out"}}};
  for (const auto& [op, inputs] : nodes) {
    pb::NodeProto* n = g->add_node();
    n->set_op_type(op);
    n->set_name("layer/" + op);
    for (const std::string& in : inputs) n->add_input(in);
    n->add_output(op + "_out");
  }
  g->add_output()->set_name("Tanh_out");
  return m.SerializeAsString();
}

std::vector<std::string> g_events;
int g_open = 0;

bool g_listening = true;
bool listening() { return g_listening; }

void* begin_event(const std::string& op_type, const std::string& node_name) {
  g_events.push_back(op_type + " " + node_name);
  ++g_open;
  return &g_open;
}

void end_event(void* event) {
  EXPECT_EQ(event, &g_open);
  --g_open;
}

const OpEventHooks kHooks{listening, begin_event, end_event};

Tensor filled(int64_t rows, float value) {
  Tensor t = Tensor::empty(DType::Float32, {rows, 4});
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = value + static_cast<float>(i % 3);
  return t;
}

TEST(OpEvents, OneEventPerStepThroughTheHooks) {
  ProgramOptions o;
  o.wrt = {"x"};
  Program program(small_model(), o);
  const Plan& plan = program.executor().plan();
  g_events.clear();
  set_op_event_hooks(&kHooks);
  std::shared_ptr<RunState> state;
  Tensor x = filled(3, -1.0f);
  std::vector<Tensor> out = program.executor().forward({x}, 0, &state);
  const size_t forward_events = g_events.size();
  program.executor().backward(*state, {filled(3, 1.0f)});
  set_op_event_hooks(nullptr);
  EXPECT_EQ(g_open, 0);
  ASSERT_EQ(forward_events, plan.forward.size());
  ASSERT_EQ(g_events.size(), plan.forward.size() + plan.backward.size());
  for (size_t i = 0; i < plan.forward.size(); ++i)
    EXPECT_EQ(g_events[i], plan.forward[i].node->op_type + " " + plan.forward[i].node->name);
  for (size_t i = 0; i < plan.backward.size(); ++i)
    EXPECT_EQ(g_events[forward_events + i],
              plan.backward[i].node->op_type + " " + plan.backward[i].node->name);
  EXPECT_NE(std::find(g_events.begin(), g_events.end(), "TanhGrad layer/Tanh_grad/TanhGrad"),
            g_events.end());
  // Without hooks, or with hooks but no listener, nothing is reported.
  g_events.clear();
  program.executor().forward({x}, 0, nullptr);
  set_op_event_hooks(&kHooks);
  g_listening = false;
  program.executor().forward({x}, 0, nullptr);
  g_listening = true;
  set_op_event_hooks(nullptr);
  EXPECT_TRUE(g_events.empty());
}

TEST(OpEvents, ForwardAndBackwardTimingsApart) {
  ProgramOptions o;
  o.wrt = {"x"};
  Program program(small_model(), o);
  const Plan& plan = program.executor().plan();
  set_profiling(true);
  profile_snapshot(true);
  for (int run = 0; run < 2; ++run) {
    std::shared_ptr<RunState> state;
    program.executor().forward({filled(5, -1.0f)}, 0, &state);
    program.executor().backward(*state, {filled(5, 1.0f)});
  }
  auto forward = op_snapshot(false, false);
  auto backward = op_snapshot(true, false);
  auto both = profile_snapshot(true);
  set_profiling(false);
  int64_t forward_calls = 0, backward_calls = 0;
  for (const auto& kv : forward) forward_calls += kv.second.calls;
  for (const auto& kv : backward) backward_calls += kv.second.calls;
  // Per op type: each step twice, but the second forward run takes the shape-cached steps'
  // outputs from the first.
  std::map<std::string, int64_t> expected_forward, expected_backward;
  for (const PlanStep& step : plan.forward)
    expected_forward[step.node->op_type] += step.shape_cached ? 1 : 2;
  for (const PlanStep& step : plan.backward) expected_backward[step.node->op_type] += 2;
  std::map<std::string, int64_t> timed_forward, timed_backward;
  for (const auto& kv : forward) timed_forward[kv.first] = kv.second.calls;
  for (const auto& kv : backward) timed_backward[kv.first] = kv.second.calls;
  EXPECT_EQ(timed_forward, expected_forward);
  EXPECT_EQ(timed_backward, expected_backward);
  EXPECT_EQ(forward_calls + backward_calls,
            2 * static_cast<int64_t>(plan.forward.size() + plan.backward.size()) -
                plan.num_shape_cached());
  for (const auto& kv : both) {
    const int64_t f = forward.count(kv.first) ? forward.at(kv.first).calls : 0;
    const int64_t b = backward.count(kv.first) ? backward.at(kv.first).calls : 0;
    EXPECT_EQ(kv.second.calls, f + b) << kv.first;
  }
  EXPECT_TRUE(op_snapshot(false, false).empty());  // profile_snapshot(true) reset both
}

TEST(OpEvents, StashBytesAndPassRecords) {
  ProgramOptions o;
  o.wrt = {"x"};
  Program program(small_model(), o);
  EXPECT_EQ(program.executor().stash_bytes(), -1);
  std::shared_ptr<RunState> state;
  program.executor().forward({filled(6, -1.0f)}, 0, &state);
  // Backward reads forward's intermediate values, each a [6, 4] float32 tensor (the fed x,
  // which it reads too, is not the engine's memory and is not counted).
  const int64_t stash = program.executor().stash_bytes();
  EXPECT_GE(stash, 6 * 4 * 4);
  EXPECT_LT(stash, 4 * 6 * 4 * 4);
  program.executor().backward(*state, {filled(6, 1.0f)});
  bool gradient_building = false;
  for (const PassRecord& r : program.passes()) {
    if (r.name != "gradient_building") continue;
    gradient_building = true;
    EXPECT_TRUE(r.changed);
    EXPECT_EQ(r.nodes_before, 3);
    EXPECT_GT(r.nodes_after, r.nodes_before);
  }
  EXPECT_TRUE(gradient_building);
}

}  // namespace
}  // namespace ortmodule
