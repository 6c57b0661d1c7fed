// Shape subgraphs run once per set of fed input shapes: a second run with the same
// shapes takes them from the executor's cache, a new shape recomputes them.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

#include "base/profiler.h"
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
  tt->mutable_shape()->add_dim()->set_dim_param("B");
  tt->mutable_shape()->add_dim()->set_dim_param("S");
  tt->mutable_shape()->add_dim()->set_dim_value(4);
}

void add_ints(pb::GraphProto* g, const std::string& name, std::vector<int64_t> values,
              bool scalar = false) {
  pb::TensorProto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(pb::TensorProto::INT64);
  if (!scalar) t->add_dims(static_cast<int64_t>(values.size()));
  for (int64_t v : values) t->add_int64_data(v);
}

pb::NodeProto* add_node(pb::GraphProto* g, const std::string& op, std::vector<std::string> in,
                        std::vector<std::string> out) {
  pb::NodeProto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(op + "_" + std::to_string(g->node_size()));
  for (const std::string& s : in) n->add_input(s);
  for (const std::string& s : out) n->add_output(s);
  return n;
}

// x: [B, S, 4] ->
//   flat  = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), [-1]))      [B, S*4]
//   mixed = ConstantOfShape(Concat(s, s), 1.0) @ x                          [B, S, 4]
//   index = Expand(S, [B, S]) + ArgMax(x, axis 2)                           [B, S] int64
std::string shape_model() {
  pb::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(18);
  pb::GraphProto* g = m.mutable_graph();
  add_input(g, "x");
  add_ints(g, "zero", {0}, true);
  add_ints(g, "one", {1}, true);
  add_ints(g, "axes0", {0});
  add_ints(g, "minus_one", {-1});
  add_node(g, "Shape", {"x"}, {"shape"});
  add_node(g, "Gather", {"shape", "zero"}, {"b"});
  add_node(g, "Gather", {"shape", "one"}, {"s"});
  add_node(g, "Unsqueeze", {"b", "axes0"}, {"b1"});
  add_node(g, "Unsqueeze", {"s", "axes0"}, {"s1"});
  add_node(g, "Concat", {"b1", "minus_one"}, {"target"})->add_attribute()->set_name("axis");
  add_node(g, "Reshape", {"x", "target"}, {"flat"});
  pb::NodeProto* cat = add_node(g, "Concat", {"s1", "s1"}, {"mask_shape"});
  cat->add_attribute()->set_name("axis");
  pb::NodeProto* cos = add_node(g, "ConstantOfShape", {"mask_shape"}, {"mask"});
  pb::AttributeProto* value = cos->add_attribute();
  value->set_name("value");
  value->set_type(pb::AttributeProto::TENSOR);
  value->mutable_t()->set_data_type(pb::TensorProto::FLOAT);
  value->mutable_t()->add_dims(1);
  value->mutable_t()->add_float_data(1.0f);
  add_node(g, "MatMul", {"mask", "x"}, {"mixed"});
  add_node(g, "Concat", {"b1", "s1"}, {"bs"})->add_attribute()->set_name("axis");
  add_node(g, "Expand", {"s", "bs"}, {"s_full"});
  pb::NodeProto* arg = add_node(g, "ArgMax", {"x"}, {"arg"});
  pb::AttributeProto* axis = arg->add_attribute();
  axis->set_name("axis");
  axis->set_type(pb::AttributeProto::INT);
  axis->set_i(2);
  pb::AttributeProto* keep = arg->add_attribute();
  keep->set_name("keepdims");
  keep->set_type(pb::AttributeProto::INT);
  keep->set_i(0);
  add_node(g, "Add", {"s_full", "arg"}, {"index"});
  for (pb::NodeProto& n : *g->mutable_node())
    for (pb::AttributeProto& a : *n.mutable_attribute())
      if (a.name() == "axis" && n.op_type() == "Concat") a.set_type(pb::AttributeProto::INT);
  for (const char* name : {"flat", "mixed", "index"}) {
    pb::ValueInfoProto* vi = g->add_output();
    vi->set_name(name);
  }
  return m.SerializeAsString();
}

Tensor make_x(int64_t b, int64_t s) {
  Tensor x = Tensor::empty(DType::Float32, {b, s, 4});
  for (int64_t i = 0; i < x.numel(); ++i)
    x.data<float>()[i] = static_cast<float>((i * 7) % 11) - 5.0f;
  return x;
}

void check_outputs(const Tensor& x, const std::vector<Tensor>& out) {
  const int64_t B = x.dim(0), S = x.dim(1);
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].shape(), (Shape{B, S * 4}));
  EXPECT_EQ(out[1].shape(), (Shape{B, S, 4}));
  EXPECT_EQ(out[2].shape(), (Shape{B, S}));
  const float* xp = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) EXPECT_EQ(out[0].data<float>()[i], xp[i]);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t c = 0; c < 4; ++c) {
      float column = 0;  // every row of the all-ones mask sums the column
      for (int64_t s = 0; s < S; ++s) column += xp[(b * S + s) * 4 + c];
      for (int64_t s = 0; s < S; ++s)
        EXPECT_FLOAT_EQ(out[1].data<float>()[(b * S + s) * 4 + c], column);
    }
    for (int64_t s = 0; s < S; ++s) {
      int64_t best = 0;
      for (int64_t c = 1; c < 4; ++c)
        if (xp[(b * S + s) * 4 + c] > xp[(b * S + s) * 4 + best]) best = c;
      EXPECT_EQ(out[2].data<int64_t>()[b * S + s], S + best);
    }
  }
}

int64_t calls(const std::map<std::string, OpTiming>& profile, const std::string& op) {
  auto it = profile.find(op);
  return it == profile.end() ? 0 : it->second.calls;
}

TEST(ShapeCache, ShapeStepsRunOncePerInputShape) {
  Program program(shape_model(), ProgramOptions{});
  const Plan& plan = program.executor().plan();
  // Shape, both Gathers and Unsqueezes, the three Concats, ConstantOfShape, Expand.
  EXPECT_EQ(plan.num_shape_cached(), 10) << plan.describe();
  for (const PlanStep& s : plan.forward) {
    const std::string& op = s.node->op_type;
    bool reads_data = op == "Reshape" || op == "MatMul" || op == "ArgMax" || op == "Add";
    EXPECT_EQ(s.shape_cached, !reads_data) << op << "\n" << plan.describe();
  }

  set_profiling(true);
  profile_snapshot(true);
  Tensor x = make_x(2, 3);
  check_outputs(x, program.executor().forward({x}, 0, nullptr));
  check_outputs(x, program.executor().forward({x}, 0, nullptr));
  Tensor x_same_shape = make_x(2, 3);
  x_same_shape.data<float>()[5] = 100.0f;  // other data, same shapes: still cached
  check_outputs(x_same_shape, program.executor().forward({x_same_shape}, 0, nullptr));
  auto profile = profile_snapshot(true);
  EXPECT_EQ(calls(profile, "Shape"), 1);
  EXPECT_EQ(calls(profile, "Gather"), 2);
  EXPECT_EQ(calls(profile, "ConstantOfShape"), 1);
  EXPECT_EQ(calls(profile, "Expand"), 1);
  EXPECT_EQ(calls(profile, "MatMul"), 3);
  EXPECT_EQ(calls(profile, "Add"), 3);
  ShapeCacheStats stats = program.executor().shape_cache_stats();
  EXPECT_EQ(stats.misses, 1);
  EXPECT_EQ(stats.hits, 2);
  EXPECT_EQ(stats.steps_skipped, 20);

  Tensor longer = make_x(3, 5);
  check_outputs(longer, program.executor().forward({longer}, 0, nullptr));
  check_outputs(longer, program.executor().forward({longer}, 0, nullptr));
  check_outputs(x, program.executor().forward({x}, 0, nullptr));  // the first entry is kept
  profile = profile_snapshot(true);
  set_profiling(false);
  EXPECT_EQ(calls(profile, "Gather"), 2);
  EXPECT_EQ(calls(profile, "ConstantOfShape"), 1);
  stats = program.executor().shape_cache_stats();
  EXPECT_EQ(stats.misses, 2);
  EXPECT_EQ(stats.hits, 4);
}

TEST(ShapeCache, BackwardReadsCachedValues) {
  ProgramOptions o;
  o.wrt = {"x"};
  Program program(shape_model(), o);
  for (int run = 0; run < 3; ++run) {
    Tensor x = make_x(2, run == 1 ? 4 : 3);
    std::shared_ptr<RunState> state;
    std::vector<Tensor> out = program.executor().forward({x}, 0, &state);
    check_outputs(x, out);
    Tensor d_flat = Tensor::zeros(DType::Float32, out[0].shape());
    Tensor d_mixed = Tensor::empty(DType::Float32, out[1].shape());
    for (int64_t i = 0; i < d_mixed.numel(); ++i) d_mixed.data<float>()[i] = 1.0f;
    std::vector<Tensor> grads = program.executor().backward(*state, {d_flat, d_mixed, Tensor()});
    ASSERT_EQ(grads.size(), 1u);
    ASSERT_EQ(grads[0].shape(), x.shape());
    // d(sum of mask @ x)/dx = S (each x row feeds S output rows).
    for (int64_t i = 0; i < x.numel(); ++i)
      EXPECT_FLOAT_EQ(grads[0].data<float>()[i], static_cast<float>(x.dim(1)));
  }
  EXPECT_EQ(program.executor().shape_cache_stats().hits, 1);
}

}  // namespace
}  // namespace ortmodule
