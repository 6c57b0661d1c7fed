// Checkpoint regions recomputed in backward (passes/recompute.h) and bridge nodes without
// a host (ops/host_bridge.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "ortmodule_onnx.pb.h"
#include "runtime/program.h"

namespace ortmodule {
namespace {

namespace pb = ::ortmodule_onnx;

void add_input(pb::GraphProto* g, const std::string& name) {
  pb::ValueInfoProto* vi = g->add_input();
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(pb::TensorProto::FLOAT);
  for (int64_t d : {2, 3}) tt->mutable_shape()->add_dim()->set_dim_value(d);
}

pb::NodeProto* add_node(pb::GraphProto* g, const std::string& op, const std::string& a,
                        const std::string& b, const std::string& out, int region) {
  pb::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + out);
  n->add_input(a);
  if (!b.empty()) n->add_input(b);
  n->add_output(out);
  if (region >= 0) {
    auto* prop = n->add_metadata_props();
    prop->set_key("ortmodule.checkpoint_region");
    prop->set_value(std::to_string(region));
  }
  return n;
}

// y = Tanh(x * w) * w, with t = x * w and r = Tanh(t) in checkpoint region `region`
// (-1: no region).
std::string model(int region) {
  pb::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_version(17);
  pb::GraphProto* g = m.mutable_graph();
  add_input(g, "x");
  add_input(g, "w");
  add_node(g, "Mul", "x", "w", "t", region);
  add_node(g, "Tanh", "t", "", "r", region);
  add_node(g, "Mul", "r", "w", "y", -1);
  g->add_output()->set_name("y");
  return m.SerializeAsString();
}

Tensor filled(float start) {
  Tensor t = Tensor::empty(DType::Float32, {2, 3});
  for (int i = 0; i < 6; ++i) t.data<float>()[i] = start + 0.25f * static_cast<float>(i);
  return t;
}

std::vector<Tensor> gradients(Program& program) {
  std::shared_ptr<RunState> state;
  program.executor().forward({filled(-0.6f), filled(0.3f)}, 7, &state);
  Tensor dy = filled(1.0f);
  return program.executor().backward(*state, {dy});
}

bool stashed(const Plan& plan, const std::string& name) {
  for (int id : plan.stash)
    if (plan.value_names[id] == name) return true;
  return false;
}

TEST(Recompute, RegionValuesAreRecomputedNotStashed) {
  ProgramOptions o;
  o.wrt = {"x", "w"};
  Program plain(model(-1), o), checkpointed(model(3), o);
  const Plan& plan = checkpointed.executor().plan();
  // Without the region backward keeps Tanh's output; with it, only the inputs.
  EXPECT_TRUE(stashed(plain.executor().plan(), "r"));
  EXPECT_FALSE(stashed(plan, "r")) << plan.describe();
  EXPECT_FALSE(stashed(plan, "t")) << plan.describe();
  int recomputed = 0;
  for (const PlanStep& s : plan.backward) recomputed += s.node->recomputes != nullptr;
  EXPECT_EQ(recomputed, 2) << plan.describe();  // Mul and Tanh, in backward
  for (const PlanStep& s : plan.forward) EXPECT_EQ(s.node->recomputes, nullptr);

  std::vector<Tensor> expected = gradients(plain), actual = gradients(checkpointed);
  ASSERT_EQ(actual.size(), 2u);
  for (size_t k = 0; k < 2; ++k)
    for (int i = 0; i < 6; ++i)
      EXPECT_FLOAT_EQ(actual[k].data<float>()[i], expected[k].data<float>()[i]);
}

TEST(Recompute, CopiesRunRightBeforeTheirFirstReader) {
  ProgramOptions o;
  o.wrt = {"w"};
  Program program(model(1), o);
  const std::vector<PlanStep>& steps = program.executor().plan().backward;
  // Each recompute step's outputs are read by the step after it or by a later one, and no
  // recompute step comes after the first step that reads the recomputed Tanh.
  size_t first_reader = steps.size(), last_copy = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    if (steps[i].node->recomputes) last_copy = i;
    for (int id : steps[i].inputs)
      if (id >= 0 && program.executor().plan().value_names[id] == "r/recompute")
        first_reader = std::min(first_reader, i);
  }
  EXPECT_LT(last_copy, first_reader) << program.executor().plan().describe();
}

TEST(Bridge, TorchCallWithoutHostFailsClearly) {
  pb::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* own = m.add_opset_import();
  own->set_domain("ai.ortmodule");
  own->set_version(1);
  pb::GraphProto* g = m.mutable_graph();
  add_input(g, "x");
  pb::NodeProto* n = add_node(g, "TorchCall", "x", "", "y", -1);
  n->set_domain("ai.ortmodule");
  g->add_output()->set_name("y");
  Program program(m.SerializeAsString(), ProgramOptions{});
  try {
    program.executor().forward({filled(0.0f)}, 0, nullptr);
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("no PyTorch bridge is installed"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ortmodule
