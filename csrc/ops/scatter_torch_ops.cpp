// Gradients of the scatters whose eager autograd formula is not the gradient of the ONNX
// ScatterElements that computes them: scatter_reduce / index_reduce with prod, and amax /
// amin without include_self (ScatterReduceTorch), and as_strided_scatter
// (AsStridedScatterTorch), and of the p = inf distance (InfNormTorch). The ops pass their
// input 0, the result the lowering computed with ScatterElements / ReduceMax, through
// unchanged (a view), and send the gradient to the other inputs by eager's formula; input 0
// gets none.
#include <string>

#include "grad/grad_context.h"
#include "ir/graph.h"
#include "ops/ops.h"

namespace ortmodule {

namespace {

struct ScatterInputs {
  Value* result;
  Value* data;
  Value* index;
  Value* updates;
  Attribute axis;
};

ScatterInputs scatter_inputs(GradContext& g) {
  return {g.input(0), g.input(1), g.input(2), g.input(3),
          Attribute::make_int(g.node().attr_int("axis", 0))};
}

Value* gather(GradContext& g, const ScatterInputs& s, Value* v) {
  return g.emit("GatherElements", {v, s.index}, {{"axis", s.axis}});
}

Value* scatter(GradContext& g, const ScatterInputs& s, Value* data, Value* updates,
               const char* reduction) {
  if (std::string(reduction) == "none")
    return g.emit("ScatterElements", {data, s.index, updates}, {{"axis", s.axis}});
  return g.emit("ScatterElements", {data, s.index, updates},
                {{"axis", s.axis}, {"reduction", Attribute::make_string(reduction)}});
}

// The product scatter_reduce of `updates` into `data` (the written elements start from 1
// without include_self).
Value* product_into(GradContext& g, const ScatterInputs& s, Value* data, Value* updates,
                    bool include_self) {
  if (!include_self) {
    Value* ones = g.emit("Expand", {g.scalar_constant(1.0, updates), g.shape_of(updates)});
    data = scatter(g, s, data, ones, "none");
  }
  return scatter(g, s, data, updates, "mul");
}

// amax / amin: each result's gradient shared evenly among the data element and the updates
// equal to it (the data element counts even where include_self=False replaced it).
void extremum_grads(GradContext& g, const ScatterInputs& s, Value*& d_data, Value*& d_updates) {
  Value* dy = g.output_grad(0);
  Value* data_hit = g.emit("CastLike", {g.emit("Equal", {s.data, s.result}), dy});
  Value* update_hit =
      g.emit("CastLike", {g.emit("Equal", {s.updates, gather(g, s, s.result)}), dy});
  Value* share = g.emit("Div", {dy, scatter(g, s, data_hit, update_hit, "add")});
  d_data = g.emit("Mul", {data_hit, share});
  d_updates = g.emit("Mul", {update_hit, gather(g, s, share)});
}

// prod: the product of the others, without dividing by a zero: a zero data element's
// gradient is the product with it taken as 1; an update that is the only zero written to
// its element gets the product with it taken as 1.
void product_grads(GradContext& g, const ScatterInputs& s, bool include_self, Value*& d_data,
                   Value*& d_updates) {
  Value* dy = g.output_grad(0);
  Value* zero = g.scalar_constant(0.0, s.data);
  Value* one = g.scalar_constant(1.0, s.data);
  Value* data_safe = g.emit("Where", {g.emit("Equal", {s.data, zero}), one, s.data});
  Value* others = product_into(g, s, data_safe, s.updates, include_self);
  d_data = g.emit("Div", {g.emit("Mul", {dy, others}), data_safe});
  Value* update_zero = g.emit("Equal", {s.updates, zero});
  Value* zeros_written = scatter(g, s, g.emit("ZerosLike", {s.data}, {}, "ai.ortmodule"),
                                 g.emit("CastLike", {update_zero, s.data}), "add");
  Value* single_zero =
      g.emit("And", {update_zero, g.emit("Equal", {gather(g, s, zeros_written), one})});
  Value* without_it =
      product_into(g, s, s.data, g.emit("Where", {single_zero, one, s.updates}), include_self);
  Value* divided = g.emit("Div", {gather(g, s, g.emit("Mul", {dy, s.result})),
                                  g.emit("Where", {update_zero, one, s.updates})});
  d_updates =
      g.emit("Where", {single_zero, gather(g, s, g.emit("Mul", {dy, without_it})), divided});
}

}  // namespace

// ---- ScatterReduceTorch(result, data, indices, updates; axis, reduction, include_self) ----

void grad_scatter_reduce_torch(GradContext& g) {
  const ScatterInputs s = scatter_inputs(g);
  const std::string reduction = g.node().attr_string("reduction", "");
  const bool include_self = g.node().attr_int("include_self", 1) != 0;
  Value* d_data = nullptr;
  Value* d_updates = nullptr;
  if (reduction == "amax" || reduction == "amin")
    extremum_grads(g, s, d_data, d_updates);
  else if (reduction == "prod")
    product_grads(g, s, include_self, d_data, d_updates);
  else
    g.fail("reduction \"" + reduction + "\" is not one of amax, amin, prod");
  if (!include_self)  // the replaced elements pass nothing back
    d_data = scatter(g, s, d_data, g.emit("ZerosLike", {s.updates}, {}, "ai.ortmodule"), "none");
  if (g.needs_grad(1)) g.set_input_grad(1, d_data);
  if (g.needs_grad(3)) g.set_input_grad(3, d_updates);
}

// ---- AsStridedScatterTorch(result, data, positions, updates), all 1-D ----

// Eager's as_strided_scatter backward: the data's gradient is the output's gradient at the
// written positions (zero elsewhere), the updates' that gradient gathered there.
void grad_as_strided_scatter_torch(GradContext& g) {
  ScatterInputs s = scatter_inputs(g);
  s.axis = Attribute::make_int(0);
  Value* dy = g.output_grad(0);
  Value* at_positions = gather(g, s, dy);
  if (g.needs_grad(1))
    g.set_input_grad(
        1, scatter(g, s, g.emit("ZerosLike", {dy}, {}, "ai.ortmodule"), at_positions, "none"));
  if (g.needs_grad(3)) g.set_input_grad(3, at_positions);
}

// ---- InfNormTorch(result, diff): result = max |diff| over diff's last axis, kept (size 1) ----

// Eager's cdist / pdist backward for p = inf: every coordinate whose |diff| equals the
// distance gets the whole gradient, with diff's sign (0 at a zero distance).
void grad_inf_norm_torch(GradContext& g) {
  if (!g.needs_grad(1)) return;
  Value* dy = g.output_grad(0);
  Value* diff = g.input(1);
  Value* hit = g.emit("CastLike", {g.emit("Equal", {g.emit("Abs", {diff}), g.input(0)}), dy});
  g.set_input_grad(1, g.emit("Mul", {dy, g.emit("Mul", {g.emit("Sign", {diff}), hit})}));
}

}  // namespace ortmodule
