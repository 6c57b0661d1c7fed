// Loader validation, IR ordering, planner lifetimes and buffer reuse, and an
// end-to-end forward/backward of a tiny graph.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "base/allocator.h"
#include "grad/gradient_builder.h"
#include "ops/load_model.h"
#include "ops/op_table.h"
#include "ortmodule_onnx.pb.h"
#include "passes/cse.h"
#include "plan/plan.h"
#include "runtime/executor.h"
#include "runtime/program.h"

namespace ortmodule {
namespace {

namespace pb = ::ortmodule_onnx;

pb::ValueInfoProto* add_float_input(pb::GraphProto* g, const std::string& name,
                                    std::initializer_list<int64_t> dims) {
  pb::ValueInfoProto* vi = g->add_input();
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(pb::TensorProto::FLOAT);
  for (int64_t d : dims) tt->mutable_shape()->add_dim()->set_dim_value(d);
  return vi;
}

void add_output(pb::GraphProto* g, const std::string& name) {
  pb::ValueInfoProto* vi = g->add_output();
  vi->set_name(name);
  vi->mutable_type()->mutable_tensor_type()->set_elem_type(pb::TensorProto::FLOAT);
}

pb::NodeProto* add_node(pb::GraphProto* g, const std::string& op,
                        std::initializer_list<const char*> in,
                        std::initializer_list<const char*> out) {
  pb::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + std::to_string(g->node_size()));
  for (const char* s : in) n->add_input(s);
  for (const char* s : out) n->add_output(s);
  return n;
}

// y = Relu(x * w) + x, loss-free: two consumers of x, a broadcast-free chain.
pb::ModelProto small_model() {
  pb::ModelProto m;
  m.set_ir_version(8);
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  pb::GraphProto* g = m.mutable_graph();
  add_float_input(g, "x", {2, 3});
  add_float_input(g, "w", {2, 3});
  add_node(g, "Mul", {"x", "w"}, {"t"});
  add_node(g, "Relu", {"t"}, {"r"});
  add_node(g, "Add", {"r", "x"}, {"y"});
  add_output(g, "y");
  return m;
}

std::string bytes(const pb::ModelProto& m) { return m.SerializeAsString(); }

std::string error_of(const std::string& data) {
  try {
    load_model(data);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(Loader, LoadsValidModel) {
  auto g = load_model(bytes(small_model()));
  ASSERT_EQ(g->nodes().size(), 3u);
  EXPECT_EQ(g->inputs().size(), 2u);
  EXPECT_EQ(g->outputs()[0]->name, "y");
  EXPECT_EQ(g->value("y")->dtype, DType::Float32);
}

TEST(Loader, RejectsGarbageBytes) {
  std::string err = error_of("this is not a protobuf \xff\xff\xff");
  EXPECT_NE(err.find("do not parse as an ONNX ModelProto"), std::string::npos) << err;
}

TEST(Loader, RejectsUnknownOpAndListsSupported) {
  pb::ModelProto m = small_model();
  m.mutable_graph()->mutable_node(1)->set_op_type("STFT");
  std::string err = error_of(bytes(m));
  EXPECT_NE(err.find("unsupported op: STFT node"), std::string::npos) << err;
  EXPECT_NE(err.find("Supported ops: "), std::string::npos) << err;
  EXPECT_NE(err.find("Relu"), std::string::npos) << err;
}

TEST(Loader, RejectsBadOpset) {
  pb::ModelProto m = small_model();
  m.mutable_opset_import(0)->set_version(99);
  EXPECT_NE(error_of(bytes(m)).find("opset 99 is not supported"), std::string::npos);
}

TEST(Loader, RejectsOpBelowItsFirstOpset) {
  pb::ModelProto m = small_model();
  m.mutable_opset_import(0)->set_version(11);
  add_node(m.mutable_graph(), "Gelu", {"y"}, {"s"});  // Gelu is opset 20
  std::string err = error_of(bytes(m));
  EXPECT_NE(err.find("is not supported at opset 11"), std::string::npos) << err;
}

TEST(Loader, RejectsDanglingValue) {
  pb::ModelProto m = small_model();
  m.mutable_graph()->mutable_node(2)->set_input(1, "nowhere");
  std::string err = error_of(bytes(m));
  EXPECT_NE(err.find("input 'nowhere'"), std::string::npos) << err;
  EXPECT_NE(err.find("not a graph input, an initializer or the output of any node"),
            std::string::npos);
}

TEST(Loader, RejectsMissingFedInitializer) {
  LoadOptions o;
  o.feed_initializers = {"weight_that_does_not_exist"};
  try {
    load_model(bytes(small_model()), o);
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("weight_that_does_not_exist"), std::string::npos);
  }
}

TEST(Loader, RejectsCycle) {
  pb::ModelProto m;
  m.add_opset_import()->set_version(17);
  pb::GraphProto* g = m.mutable_graph();
  add_float_input(g, "x", {2});
  add_node(g, "Add", {"x", "b"}, {"a"});
  add_node(g, "Relu", {"a"}, {"b"});
  add_output(g, "a");
  std::string err = error_of(bytes(m));
  EXPECT_NE(err.find("cycle"), std::string::npos) << err;
}

TEST(Loader, RejectsMissingGraphOutput) {
  pb::ModelProto m = small_model();
  add_output(m.mutable_graph(), "ghost");
  EXPECT_NE(error_of(bytes(m)).find("graph output 'ghost'"), std::string::npos);
}

TEST(Graph, TopologicalSortOrdersProducersFirst) {
  Graph g;
  Value* x = g.new_value("x");
  g.mutable_inputs().push_back(x);
  Value* a = g.new_value("a");
  Value* b = g.new_value("b");
  g.add_node("Relu", "", {a}, {b}, "second");
  g.add_node("Neg", "", {x}, {a}, "first");
  g.topological_sort();
  auto nodes = g.nodes();
  EXPECT_EQ(nodes[0]->name, "first");
  EXPECT_EQ(nodes[1]->name, "second");
}

TEST(Graph, NewValueNamesAreUnique) {
  Graph g;
  Value* a = g.new_value("v");
  Value* b = g.new_value("v");
  EXPECT_NE(a->name, b->name);
}

TEST(Planner, ReleasesValuesAfterLastUseAndStashesForBackward) {
  auto g = load_model(bytes(small_model()));
  GradientGraphInfo info = build_gradient_graph(*g, {g->value("w")});
  Plan plan = make_plan(*g, PlanRequest{info.output_grads, info.input_grads, {}});
  // The three forward ops plus the Shape nodes whose results backward needs to undo
  // broadcasting (they read only forward values, so they run in forward).
  size_t shape_nodes = 0;
  for (const PlanStep& s : plan.forward) shape_nodes += s.node->op_type == "Shape";
  EXPECT_EQ(plan.forward.size() - shape_nodes, 3u) << plan.describe();
  // Relu's output is read by backward (ReluGrad) and must be stashed; t (Mul's output) is not.
  auto in_stash = [&](const std::string& name) {
    for (int id : plan.stash)
      if (plan.value_names[id] == name) return true;
    return false;
  };
  EXPECT_TRUE(in_stash("r"));
  EXPECT_TRUE(in_stash("x"));
  EXPECT_FALSE(in_stash("t"));
  // t dies at Relu, its only consumer.
  const PlanStep* relu_step = nullptr;
  for (const PlanStep& s : plan.forward)
    if (s.node->op_type == "Relu") relu_step = &s;
  ASSERT_NE(relu_step, nullptr);
  const PlanStep& relu = *relu_step;
  bool releases_t = false;
  for (int id : relu.release_after) releases_t |= plan.value_names[id] == "t";
  EXPECT_TRUE(releases_t) << plan.describe();
  // No gradient work for x, which was not requested.
  for (const PlanStep& s : plan.backward) EXPECT_NE(s.node->op_type, "Sum") << plan.describe();
}

TEST(Planner, BackwardStagesEndWhereEachGradientIsFinal) {
  // y = Relu(Relu(x * w1) * w2): w2's gradient is final long before w1's and x's.
  pb::ModelProto m = small_model();
  pb::GraphProto* graph = m.mutable_graph();
  graph->clear_node();
  graph->clear_output();
  add_float_input(graph, "w2", {2, 3});
  add_node(graph, "Mul", {"x", "w"}, {"t1"});
  add_node(graph, "Relu", {"t1"}, {"r1"});
  add_node(graph, "Mul", {"r1", "w2"}, {"t2"});
  add_node(graph, "Relu", {"t2"}, {"y"});
  add_output(graph, "y");
  auto g = load_model(bytes(m));
  GradientGraphInfo info = build_gradient_graph(*g, {g->value("x"), g->value("w"), g->value("w2")});
  Plan plan = make_plan(*g, PlanRequest{info.output_grads, info.input_grads, {}});
  ASSERT_FALSE(plan.backward_stages.empty());
  EXPECT_EQ(plan.backward_stages.back().end, plan.backward.size()) << plan.describe();
  std::vector<int> stage_of(3, -1);
  size_t begin = 0;
  for (size_t k = 0; k < plan.backward_stages.size(); ++k) {
    const BackwardStage& stage = plan.backward_stages[k];
    EXPECT_GT(stage.end, begin) << plan.describe();
    for (int w : stage.wrt) {
      EXPECT_EQ(stage_of[w], -1) << "gradient " << w << " handed out twice";
      stage_of[w] = static_cast<int>(k);
      // Produced inside this stage, and read by no later step.
      const int id = plan.input_grads[w];
      size_t producer = plan.backward.size();
      for (size_t i = 0; i < plan.backward.size(); ++i)
        for (int out : plan.backward[i].outputs)
          if (out == id) producer = i;
      EXPECT_GE(producer, begin) << plan.describe();
      EXPECT_LT(producer, stage.end) << plan.describe();
    }
    begin = stage.end;
  }
  for (int k = 0; k < 3; ++k) EXPECT_GE(stage_of[k], 0) << "gradient " << k << " never handed out";
  EXPECT_LT(stage_of[2], stage_of[1]) << plan.describe();  // w2 before w
}

TEST(Planner, DeferredBackwardWorkThatMakesAGradientItselfStays) {
  // Backward work flagged to run just in time (Node::run_in_backward: a fused tree that took
  // in a recompute copy) is placed before its first reader; where it has none because it
  // writes a requested gradient itself, it stays in the plan, in graph order.
  auto g = load_model(bytes(small_model()));
  GradientGraphInfo info = build_gradient_graph(*g, {g->value("x"), g->value("w")});
  Plan before = make_plan(*g, PlanRequest{info.output_grads, info.input_grads, {}});
  ASSERT_EQ(info.input_grads.size(), 2u);
  for (Value* grad : info.input_grads) {
    ASSERT_NE(grad, nullptr);
    ASSERT_NE(grad->producer, nullptr);
    grad->producer->run_in_backward = true;
  }
  Plan plan = make_plan(*g, PlanRequest{info.output_grads, info.input_grads, {}});
  EXPECT_EQ(plan.backward.size(), before.backward.size()) << plan.describe();
  for (const Value* grad : info.input_grads) {
    size_t made = 0;
    for (const PlanStep& s : plan.backward)
      for (int out : s.outputs) made += out == grad->id;
    EXPECT_EQ(made, 1u) << grad->name << " is made by no step:\n" << plan.describe();
  }
}

TEST(Planner, InPlaceReuseOfDeadBuffer) {
  // Forward only: Relu writes into Mul's dead output, Add into Relu's.
  Program program(bytes(small_model()), ProgramOptions{});
  Tensor x = Tensor::empty(DType::Float32, {2, 3});
  Tensor w = Tensor::empty(DType::Float32, {2, 3});
  for (int i = 0; i < 6; ++i) {
    x.data<float>()[i] = static_cast<float>(i) - 2.5f;
    w.data<float>()[i] = 2.0f;
  }
  size_t before = allocator_stats().os_allocations;
  std::vector<Tensor> out = program.executor().forward({x, w}, 0, nullptr);
  // Warm: a second run must not need new memory from the OS.
  out.clear();
  size_t after_first = allocator_stats().os_allocations;
  out = program.executor().forward({x, w}, 0, nullptr);
  EXPECT_EQ(allocator_stats().os_allocations, after_first);
  EXPECT_LE(after_first - before, 1u) << "three steps should share one buffer";
  for (int i = 0; i < 6; ++i) {
    float xi = static_cast<float>(i) - 2.5f;
    EXPECT_FLOAT_EQ(out[0].data<float>()[i], std::max(xi * 2.0f, 0.0f) + xi);
  }
}

TEST(Program, ForwardBackwardMatchesHandDerivative) {
  ProgramOptions o;
  o.wrt = {"x", "w"};
  Program program(bytes(small_model()), o);
  Tensor x = Tensor::empty(DType::Float32, {2, 3});
  Tensor w = Tensor::empty(DType::Float32, {2, 3});
  for (int i = 0; i < 6; ++i) {
    x.data<float>()[i] = static_cast<float>(i) - 2.5f;
    w.data<float>()[i] = 0.5f + static_cast<float>(i);
  }
  std::shared_ptr<RunState> state;
  program.executor().forward({x, w}, 0, &state);
  Tensor dy = Tensor::empty(DType::Float32, {2, 3});
  for (int i = 0; i < 6; ++i) dy.data<float>()[i] = 1.0f;
  std::vector<Tensor> grads = program.executor().backward(*state, {dy});
  ASSERT_EQ(grads.size(), 2u);
  for (int i = 0; i < 6; ++i) {
    float xi = x.data<float>()[i], wi = w.data<float>()[i];
    bool on = xi * wi > 0;
    EXPECT_FLOAT_EQ(grads[0].data<float>()[i], (on ? wi : 0.0f) + 1.0f);  // dy/dx
    EXPECT_FLOAT_EQ(grads[1].data<float>()[i], on ? xi : 0.0f);           // dy/dw
  }
  EXPECT_THROW(program.executor().backward(*state, {dy}), std::runtime_error);
}

}  // namespace
}  // namespace ortmodule

namespace ortmodule {
namespace {

TEST(Passes, CommonSubexpressionsAreMerged) {
  Graph g;
  Value* x = g.new_value("x");
  g.mutable_inputs().push_back(x);
  Value* s1 = g.new_value("s1");
  Value* s2 = g.new_value("s2");
  Value* y = g.new_value("y");
  g.add_node("Shape", "", {x}, {s1});
  g.add_node("Shape", "", {x}, {s2});
  g.add_node("Add", "", {s1, s2}, {y});
  g.mutable_outputs().push_back(y);
  std::unordered_map<Value*, Value*> replaced;
  EXPECT_EQ(eliminate_common_subexpressions(g, &replaced), 1);
  ASSERT_EQ(g.nodes().size(), 2u);
  EXPECT_EQ(g.nodes()[1]->inputs[0], s1);
  EXPECT_EQ(g.nodes()[1]->inputs[1], s1);
  EXPECT_EQ(replaced.at(s2), s1);
}

// Two LeakyRelu nodes over the same input whose alphas are `a` and `b`: how many CSE removes.
int merged_leaky_relus(Attribute a, Attribute b) {
  Graph g;
  Value* x = g.new_value("x");
  g.mutable_inputs().push_back(x);
  Value* y1 = g.new_value("y1");
  Value* y2 = g.new_value("y2");
  g.add_node("LeakyRelu", "", {x}, {y1})->attrs["alpha"] = std::move(a);
  g.add_node("LeakyRelu", "", {x}, {y2})->attrs["alpha"] = std::move(b);
  g.mutable_outputs().push_back(y1);
  g.mutable_outputs().push_back(y2);
  return eliminate_common_subexpressions(g);
}

TEST(Passes, CommonSubexpressionsCompareFloatAttributesExactly) {
  // Both print as 1 with 6 significant digits; they are float32 neighbours.
  const double one_up = 1.0 + std::ldexp(1.0, -23), two_up = 1.0 + std::ldexp(1.0, -22);
  EXPECT_EQ(merged_leaky_relus(Attribute::make_float(one_up), Attribute::make_float(two_up)), 0);
  EXPECT_EQ(merged_leaky_relus(Attribute::make_float(one_up), Attribute::make_float(one_up)), 1);
  // NaNs with different payloads are different attributes; the same NaN is the same.
  const double nan1 = std::nan("1"), nan2 = std::nan("2");
  EXPECT_EQ(merged_leaky_relus(Attribute::make_float(nan1), Attribute::make_float(nan2)), 0);
  EXPECT_EQ(merged_leaky_relus(Attribute::make_float(nan1), Attribute::make_float(nan1)), 1);
  Attribute floats_a, floats_b;
  floats_a.kind = floats_b.kind = Attribute::Kind::Floats;
  floats_a.floats = {0.5, 1.0000001};
  floats_b.floats = {0.5, 1.0000002};
  EXPECT_EQ(merged_leaky_relus(floats_a, floats_b), 0);
}

TEST(Passes, CommonSubexpressionsKeepStringListsApart) {
  // A separator inside a string must not make two different lists look alike.
  Attribute joined, split;
  joined.kind = split.kind = Attribute::Kind::Strings;
  joined.strings = {"a,b"};
  split.strings = {"a", "b"};
  EXPECT_EQ(merged_leaky_relus(joined, split), 0);
}

TEST(Passes, RandomOpsAreNeverMerged) {
  Graph g;
  Value* x = g.new_value("x");
  g.mutable_inputs().push_back(x);
  Value* a = g.new_value("a");
  Value* b = g.new_value("b");
  for (Value* out : {a, b}) g.add_node("Dropout", "", {x}, {out})->def = find_op("", "Dropout", 17);
  EXPECT_EQ(eliminate_common_subexpressions(g), 0);
}

}  // namespace
}  // namespace ortmodule

#include <mutex>
#include <set>
#include <thread>

#include "kernels/parallel.h"

namespace ortmodule {
namespace {

TEST(Threads, ParallelForUsesTorchThreadPool) {
  // A serial parallel_for (e.g. ATen's OpenMP region compiled without -fopenmp) would run
  // every chunk on the calling thread.
  if (std::thread::hardware_concurrency() < 2) GTEST_SKIP() << "needs two cores";
  std::mutex mu;
  std::set<std::thread::id> ids;
  parallel_for(0, 1 << 20, 1, [&](int64_t, int64_t) {
    std::lock_guard<std::mutex> lock(mu);
    ids.insert(std::this_thread::get_id());
  });
  EXPECT_GE(ids.size(), 2u);
}

}  // namespace
}  // namespace ortmodule
