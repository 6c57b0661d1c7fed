// Which backward steps hand on zeros (runtime/zero_gradients.h): products with one zero
// factor, gradient ops with a zero incoming gradient, additive ops only when every input is
// zero, and nothing for an op outside the table.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ir/graph.h"
#include "runtime/zero_gradients.h"

namespace ortmodule {
namespace {

// A node of `op` over `inputs` fresh values (nullptr where `present` is false).
struct Fixture {
  Graph g;
  Node* node(const std::string& op, const std::string& domain, std::vector<bool> present) {
    std::vector<Value*> ins;
    for (size_t i = 0; i < present.size(); ++i)
      ins.push_back(present[i] ? g.new_value(op + std::to_string(i)) : nullptr);
    return g.add_node(op, domain, ins, {g.new_value(op + "_out")});
  }
};

TEST(ZeroGradients, ProductsNeedOneZeroFactor) {
  Fixture f;
  const Node* mm = f.node("MatMul", "", {true, true});
  EXPECT_TRUE(outputs_are_zero(*mm, {true, false}));
  EXPECT_TRUE(outputs_are_zero(*mm, {false, true}));
  EXPECT_FALSE(outputs_are_zero(*mm, {false, false}));
  const Node* fused = f.node("FusedMatMul", "com.microsoft", {true, true});
  EXPECT_TRUE(outputs_are_zero(*fused, {false, true}));
}

TEST(ZeroGradients, GemmWithAnAddendNeedsItZeroToo) {
  Fixture f;
  const Node* with_c = f.node("Gemm", "", {true, true, true});
  EXPECT_FALSE(outputs_are_zero(*with_c, {true, false, false}));
  EXPECT_TRUE(outputs_are_zero(*with_c, {true, false, true}));
  const Node* without_c = f.node("Gemm", "", {true, true, false});
  EXPECT_TRUE(outputs_are_zero(*without_c, {false, true, false}));
}

TEST(ZeroGradients, GradientOpsFollowTheirIncomingGradient) {
  Fixture f;
  const Node* ln =
      f.node("LayerNormalizationGrad", "com.microsoft", {true, true, true, true, true});
  EXPECT_TRUE(outputs_are_zero(*ln, {true, false, false, false, false}));
  EXPECT_FALSE(outputs_are_zero(*ln, {false, true, true, true, true}));
  const Node* gather = f.node("GatherGrad", "com.microsoft", {true, true, true});
  EXPECT_TRUE(outputs_are_zero(*gather, {false, false, true}));
  EXPECT_FALSE(outputs_are_zero(*gather, {true, true, false}));
}

TEST(ZeroGradients, AdditiveOpsNeedEveryInputZero) {
  Fixture f;
  const Node* sum = f.node("Sum", "", {true, true, true});
  EXPECT_FALSE(outputs_are_zero(*sum, {true, true, false}));
  EXPECT_TRUE(outputs_are_zero(*sum, {true, true, true}));
  const Node* add = f.node("Add", "", {true, true});
  EXPECT_FALSE(outputs_are_zero(*add, {true, false}));
  const Node* reshape = f.node("Reshape", "", {true, true});
  EXPECT_TRUE(outputs_are_zero(*reshape, {true, false}));  // input 1 is the shape
}

TEST(ZeroGradients, OtherOpsAlwaysCompute) {
  Fixture f;
  // A constant made from a gradient's dtype is no gradient: it must be computed.
  EXPECT_FALSE(outputs_are_zero(*f.node("ScalarLike", "ai.ortmodule", {true}), {true}));
  EXPECT_FALSE(outputs_are_zero(*f.node("Shape", "", {true}), {true}));
  EXPECT_FALSE(outputs_are_zero(*f.node("Exp", "", {true}), {true}));
  EXPECT_FALSE(outputs_are_zero(*f.node("MatMul", "custom.domain", {true, true}), {true, true}));
}

}  // namespace
}  // namespace ortmodule
