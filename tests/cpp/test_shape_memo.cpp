// Shape rules of steps whose output shapes follow from the signature (the fed inputs'
// dtypes and shapes; in backward also the output gradients') run once per signature; a
// step whose output shape reads a fed value (Reshape to a fed target) runs its rule every
// time, so a new target with the same shape still gives the right result.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "ortmodule_onnx.pb.h"
#include "runtime/program.h"

namespace ortmodule {
namespace {

namespace pb = ::ortmodule_onnx;

void add_input(pb::GraphProto* g, const std::string& name, int elem_type, int rank) {
  pb::ValueInfoProto* vi = g->add_input();
  vi->set_name(name);
  auto* tt = vi->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(elem_type);
  for (int i = 0; i < rank; ++i)
    tt->mutable_shape()->add_dim()->set_dim_param("d" + std::to_string(i));
}

void add_node(pb::GraphProto* g, const std::string& op, std::vector<std::string> in,
              std::vector<std::string> out) {
  pb::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + std::to_string(g->node_size()));
  for (const std::string& s : in) n->add_input(s);
  for (const std::string& s : out) n->add_output(s);
}

// x: [N, K], w: [K, M], target: int64 [2] (fed) ->
//   h = Relu(x @ w)                 [N, M]      shapes from the signature
//   y = Reshape(h, target) * 2      target's values decide the shape
std::string reshape_model() {
  pb::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(18);
  pb::GraphProto* g = m.mutable_graph();
  add_input(g, "x", pb::TensorProto::FLOAT, 2);
  add_input(g, "w", pb::TensorProto::FLOAT, 2);
  add_input(g, "target", pb::TensorProto::INT64, 1);
  pb::TensorProto* two = g->add_initializer();
  two->set_name("two");
  two->set_data_type(pb::TensorProto::FLOAT);
  two->add_float_data(2.0f);
  add_node(g, "MatMul", {"x", "w"}, {"xw"});
  add_node(g, "Relu", {"xw"}, {"h"});
  add_node(g, "Reshape", {"h", "target"}, {"r"});
  add_node(g, "Mul", {"r", "two"}, {"y"});
  g->add_output()->set_name("y");
  return m.SerializeAsString();
}

Tensor floats(Shape shape, float scale) {
  Tensor t = Tensor::empty(DType::Float32, shape);
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = scale * static_cast<float>((i * 5) % 7 - 3);
  return t;
}

Tensor ints(std::vector<int64_t> values) {
  Tensor t = Tensor::empty(DType::Int64, {static_cast<int64_t>(values.size())});
  for (size_t i = 0; i < values.size(); ++i) t.data<int64_t>()[i] = values[i];
  return t;
}

// 2 * relu(x @ w), row-major: the values Reshape keeps whatever the target.
std::vector<float> reference(const Tensor& x, const Tensor& w) {
  const int64_t n = x.dim(0), k = x.dim(1), m = w.dim(1);
  std::vector<float> out(static_cast<size_t>(n * m));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      float acc = 0;
      for (int64_t p = 0; p < k; ++p)
        acc += x.data<float>()[i * k + p] * w.data<float>()[p * m + j];
      out[static_cast<size_t>(i * m + j)] = 2.0f * (acc > 0 ? acc : 0.0f);
    }
  return out;
}

void expect_output(const Tensor& y, const Shape& shape, const std::vector<float>& expected) {
  ASSERT_EQ(y.shape(), shape);
  ASSERT_EQ(static_cast<size_t>(y.numel()), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_FLOAT_EQ(y.data<float>()[i], expected[i]);
}

TEST(ShapeMemo, RulesRunOncePerSignatureExceptValueDependentShapes) {
  Program program(reshape_model(), ProgramOptions{});
  const Plan& plan = program.executor().plan();
  ASSERT_EQ(plan.forward.size(), 4u) << plan.describe();
  for (const PlanStep& step : plan.forward)
    EXPECT_EQ(step.shape_memo, step.node->op_type == "MatMul" || step.node->op_type == "Relu")
        << step.node->op_type;
  Executor& executor = program.executor();
  Tensor x = floats({3, 5}, 0.5f), w = floats({5, 4}, 0.25f);
  const std::vector<float> expected = reference(x, w);

  expect_output(executor.forward({x, w, ints({6, 2})}, 0, nullptr)[0], {6, 2}, expected);
  EXPECT_EQ(executor.shape_cache_stats().shape_rules_run, 4);
  // Same signature: MatMul and Relu reuse their shapes; Reshape (and Mul, which reads its
  // output) run their rules again, so a new target of the same shape is honoured.
  expect_output(executor.forward({x, w, ints({2, 6})}, 0, nullptr)[0], {2, 6}, expected);
  EXPECT_EQ(executor.shape_cache_stats().shape_rules_run, 6);
  expect_output(executor.forward({x, w, ints({12, 1})}, 0, nullptr)[0], {12, 1}, expected);
  EXPECT_EQ(executor.shape_cache_stats().shape_rules_run, 8);

  // A new signature runs every rule once more.
  Tensor x2 = floats({2, 5}, 0.5f);
  expect_output(executor.forward({x2, w, ints({4, 2})}, 0, nullptr)[0], {4, 2}, reference(x2, w));
  EXPECT_EQ(executor.shape_cache_stats().shape_rules_run, 12);
  // And the first signature's entry is still there.
  expect_output(executor.forward({x, w, ints({6, 2})}, 0, nullptr)[0], {6, 2}, expected);
  EXPECT_EQ(executor.shape_cache_stats().shape_rules_run, 14);
}

TEST(ShapeMemo, BackwardRulesRunOncePerSignatureAndGradientShapes) {
  ProgramOptions options;
  options.wrt = {"x", "w"};
  Program program(reshape_model(), options);
  Executor& executor = program.executor();
  const Plan& plan = program.executor().plan();
  int backward_memo = 0;
  for (const PlanStep& step : plan.backward) backward_memo += step.shape_memo ? 1 : 0;
  const int backward_rules = static_cast<int>(plan.backward.size()) - backward_memo;
  ASSERT_GT(backward_memo, 0) << plan.describe();
  // Forward steps whose shapes read the fed target's values: Reshape, Mul and the Shape of
  // Mul's input that backward reads.
  int forward_rules = 0;
  for (const PlanStep& step : plan.forward) forward_rules += step.shape_memo ? 0 : 1;
  ASSERT_EQ(forward_rules, 3) << plan.describe();

  Tensor x = floats({3, 5}, 0.5f), w = floats({5, 4}, 0.25f);
  std::vector<Tensor> first_grads;
  int64_t rules = 0;
  // Runs 0 and 1 share the signature and the gradient shape; run 2 changes the fed target
  // (same shape), so the output gradient has another shape and backward's rules run again.
  for (int run = 0; run < 3; ++run) {
    std::shared_ptr<RunState> state;
    std::vector<int64_t> target =
        run == 2 ? std::vector<int64_t>{2, 6} : std::vector<int64_t>{6, 2};
    std::vector<Tensor> out = executor.forward({x, w, ints(target)}, 0, &state);
    Tensor dy = floats(out[0].shape(), 1.0f);
    std::vector<Tensor> grads = executor.backward(*state, {dy});
    ASSERT_EQ(grads.size(), 2u);
    ASSERT_EQ(grads[0].shape(), x.shape());
    ASSERT_EQ(grads[1].shape(), w.shape());
    // dy has the same values in row-major order whatever its shape: gradients agree.
    if (run == 0) {
      first_grads = grads;
    } else {
      for (size_t g = 0; g < 2; ++g)
        for (int64_t i = 0; i < grads[g].numel(); ++i)
          EXPECT_FLOAT_EQ(grads[g].data<float>()[i], first_grads[g].data<float>()[i]);
    }
    const int64_t now = executor.shape_cache_stats().shape_rules_run;
    // Forward: the target-dependent steps every time; backward: only the steps without a
    // memo when the gradient shapes repeat, all of them when they change.
    if (run == 1) {
      EXPECT_EQ(now - rules, forward_rules + backward_rules) << plan.describe();
    }
    if (run == 2) {
      EXPECT_EQ(now - rules, forward_rules + static_cast<int64_t>(plan.backward.size()));
    }
    rules = now;
  }
  // The gradient itself, against a direct computation: dx = (2 * dy * [xw > 0]) @ w^T.
  const int64_t n = 3, k = 5, m = 4;
  Tensor dy = floats({6, 2}, 1.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t p = 0; p < k; ++p) {
      float acc = 0;
      for (int64_t j = 0; j < m; ++j) {
        float xw = 0;
        for (int64_t q = 0; q < k; ++q)
          xw += x.data<float>()[i * k + q] * w.data<float>()[q * m + j];
        if (xw > 0) acc += 2.0f * dy.data<float>()[i * m + j] * w.data<float>()[p * m + j];
      }
      EXPECT_NEAR(first_grads[0].data<float>()[i * k + p], acc, 1e-5f);
    }
}

// Shape steps that backward reads run right after their input is made, so they do not keep
// it alive through forward; gradients leave the run state once handed out.
TEST(ShapeMemo, ShapeReadsRunEarlyAndGradientsLeaveTheState) {
  ProgramOptions options;
  options.wrt = {"x", "w"};
  Program program(reshape_model(), options);
  Executor& executor = program.executor();
  const Plan& plan = executor.plan();
  int shape_steps = 0;
  for (size_t i = 0; i < plan.forward.size(); ++i) {
    const PlanStep& step = plan.forward[i];
    if (step.node->op_type != "Shape") continue;
    ++shape_steps;
    // Its input is a fed input or constant, or made by a step before it with only other
    // Shape steps in between.
    size_t j = i;
    while (j > 0 && plan.forward[j - 1].node->op_type == "Shape") --j;
    if (j == 0) continue;
    const std::vector<int>& made = plan.forward[j - 1].outputs;
    EXPECT_NE(std::find(made.begin(), made.end(), step.inputs[0]), made.end()) << plan.describe();
  }
  EXPECT_GT(shape_steps, 0) << plan.describe();

  Tensor x = floats({3, 5}, 0.5f), w = floats({5, 4}, 0.25f);
  std::shared_ptr<RunState> state;
  std::vector<Tensor> out = executor.forward({x, w, ints({6, 2})}, 0, &state);
  executor.begin_backward(*state, {floats(out[0].shape(), 1.0f)});
  for (size_t stage = 0; stage < plan.backward_stages.size(); ++stage) {
    std::vector<Tensor> grads = executor.run_backward_stage(*state, stage);
    const std::vector<int>& wrt = plan.backward_stages[stage].wrt;
    ASSERT_EQ(grads.size(), wrt.size());
    for (size_t j = 0; j < wrt.size(); ++j) {
      ASSERT_TRUE(grads[j].defined());
      EXPECT_EQ(grads[j].storage().use_count(), 1) << "the state still holds gradient " << wrt[j];
      if (!state->slots.empty()) {
        EXPECT_FALSE(state->slots[plan.input_grads[wrt[j]]].defined());
      }
    }
  }
}

}  // namespace
}  // namespace ortmodule
