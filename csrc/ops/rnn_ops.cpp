// torch's recurrent layers, one layer in one direction per node (the fx lowering stacks them
// for num_layers and bidirectional: ortmodule/capture/fx/ops/recurrent.py), with torch's
// weight layout and gate order (LSTM i f g o, GRU r z n):
//
// LSTMTorch(X [T, B, I], W_ih [4H, I], W_hh [4H, H], B_ih? [4H], B_hh? [4H], H0? [B, H],
//   C0? [B, H]; reverse) -> (Y [T, B, H], H_n [B, H], C_n [B, H], saved [T, B, 5H])
// GRUTorch(X, W_ih [3H, I], W_hh [3H, H], B_ih?, B_hh?, H0?; reverse) -> (Y, H_n, saved [T, B, 4H])
// RNNTorch(X, W_ih [H, I], W_hh [H, H], B_ih?, B_hh?, H0?; reverse, nonlinearity "tanh" |
//   "relu") -> (Y, H_n)
// An absent H0 / C0 is zeros. reverse = 1 runs the steps from T-1 down to 0 (the backward
// direction of a bidirectional layer); Y stays in time order. `saved` (what backward reads,
// kernels/math/rnn.h) is added by the gradient rule.
// <Op>Grad(dY?, dH_n?, dC_n?, X, W_ih, W_hh, H0?, C0?, Y, saved?; as forward)
//   -> (dX, dW_ih, dW_hh, dB_ih, dB_hh, dH0, dC0): backpropagation through time.
#include <string>

#include "grad/grad_context.h"
#include "kernels/cpu/rnn.h"
#include "ops/op_utils.h"
#include "ops/ops.h"
#include "ops/rnn_layer.h"

namespace ortmodule {

namespace {

using math::RnnCell;

RnnCell rnn_cell(const OpContext& ctx) {
  const std::string& op = ctx.node.op_type;
  if (op.rfind("LSTM", 0) == 0) return RnnCell::kLstm;
  if (op.rfind("GRU", 0) == 0) return RnnCell::kGru;
  const std::string act = ctx.node.attr_string("nonlinearity", "tanh");
  if (act == "tanh") return RnnCell::kTanh;
  if (act == "relu") return RnnCell::kRelu;
  ctx.fail("attribute nonlinearity must be \"tanh\" or \"relu\" (as torch.nn.RNN's), got \"" + act +
           "\"");
}

void expect_dtype_of(const OpContext& ctx, size_t i, size_t like, const char* name) {
  if (ctx.has_input(i) && ctx.in(i).dtype() != ctx.in(like).dtype())
    ctx.fail(std::string(name) + " (input " + std::to_string(i) + ") is " +
             dtype_name(ctx.in(i).dtype()) + ", X is " + dtype_name(ctx.in(like).dtype()) +
             "; they must match");
}

void expect_shape(const OpContext& ctx, size_t i, const Shape& want, const char* name) {
  if (ctx.has_input(i) && ctx.in(i).shape() != want)
    ctx.fail(std::string(name) + " (input " + std::to_string(i) + ") has shape " +
             shape_str(ctx.in(i).shape()) + "; expected " + shape_str(want));
}

const char* cell_name(RnnCell cell) {
  return cell == RnnCell::kLstm ? "LSTM" : cell == RnnCell::kGru ? "GRU" : "RNN";
}

}  // namespace

int rnn_cn_output(RnnCell cell) { return cell == RnnCell::kLstm ? 2 : -1; }
int rnn_saved_output(RnnCell cell) {
  return cell == RnnCell::kLstm ? 3 : cell == RnnCell::kGru ? 2 : -1;
}

rnn::RnnDims rnn_layer_dims(const OpContext& ctx, bool grad) {
  using namespace rnn_io;
  const size_t x = grad ? kGradX : kX, wih = grad ? kGradWih : kWih, whh = grad ? kGradWhh : kWhh;
  const size_t h0 = grad ? kGradH0 : kH0, c0 = grad ? kGradC0 : kC0;
  rnn::RnnDims d;
  d.cell = rnn_cell(ctx);
  d.reverse = ctx.node.attr_int("reverse", 0) != 0;
  const Tensor& X = ctx.in(x);
  if (X.dtype() != DType::Float32 && X.dtype() != DType::Float64)
    ctx.fail("X is " + dtype_name(X.dtype()) + "; the recurrent layers compute in float32 or " +
             "float64");
  if (X.rank() != 3)
    ctx.fail("X has shape " + shape_str(X.shape()) + "; expected [T, B, I] (time-major)");
  d.T = X.dim(0);
  d.B = X.dim(1);
  d.I = X.dim(2);
  const Tensor& w_hh = ctx.in(whh);
  if (w_hh.rank() != 2)
    ctx.fail("W_hh has shape " + shape_str(w_hh.shape()) + "; expected [G*H, H]");
  d.H = w_hh.dim(1);
  const int64_t GH = d.G() * d.H;
  const std::string gates = std::to_string(d.G()) + " gates of " + std::to_string(d.H);
  if (w_hh.dim(0) != GH)
    ctx.fail("W_hh has shape " + shape_str(w_hh.shape()) + "; a " + cell_name(d.cell) +
             " with hidden size " + std::to_string(d.H) + " has " + gates + " rows: [" +
             std::to_string(GH) + ", " + std::to_string(d.H) + "]");
  expect_shape(ctx, wih, {GH, d.I}, "W_ih");
  expect_shape(ctx, h0, {d.B, d.H}, "H0");
  for (size_t i : {wih, whh, h0}) expect_dtype_of(ctx, i, x, "an input");
  if (!grad) {
    expect_shape(ctx, kBih, {GH}, "B_ih");
    expect_shape(ctx, kBhh, {GH}, "B_hh");
    expect_dtype_of(ctx, kBih, x, "B_ih");
    expect_dtype_of(ctx, kBhh, x, "B_hh");
  }
  if (ctx.has_input(c0)) {
    if (d.cell != RnnCell::kLstm)
      ctx.fail(std::string("C0 (input ") + std::to_string(c0) + ") is given, but a " +
               cell_name(d.cell) + " has no cell state");
    expect_shape(ctx, c0, {d.B, d.H}, "C0");
    expect_dtype_of(ctx, c0, x, "C0");
  }
  if (grad) {
    const Shape y = {d.T, d.B, d.H}, state = {d.B, d.H};
    expect_shape(ctx, kGradDy, y, "dY");
    expect_shape(ctx, kGradDhn, state, "dH_n");
    expect_shape(ctx, kGradDcn, state, "dC_n");
    expect_shape(ctx, kGradY, y, "Y");
    for (size_t i : {kGradDy, kGradDhn, kGradDcn, kGradY}) expect_dtype_of(ctx, i, x, "an input");
    if (d.W() > 0) {
      if (!ctx.has_input(kGradSaved))
        ctx.fail("input 9 (saved: the forward's gates and states) is required");
      expect_shape(ctx, kGradSaved, {d.T, d.B, d.W()}, "saved");
      expect_dtype_of(ctx, kGradSaved, x, "saved");
    }
  }
  return d;
}

std::vector<OutputInfo> shape_rnn_layer(const OpContext& ctx) {
  const rnn::RnnDims d = rnn_layer_dims(ctx, false);
  const DType dtype = ctx.in(rnn_io::kX).dtype();
  std::vector<OutputInfo> outs = {{dtype, {d.T, d.B, d.H}}, {dtype, {d.B, d.H}}};
  if (d.cell == RnnCell::kLstm) outs.push_back({dtype, {d.B, d.H}});
  if (d.W() > 0) outs.push_back({dtype, {d.T, d.B, d.W()}});
  return outs;
}

void cpu_rnn_layer(OpContext& ctx) {
  const rnn::RnnDims d = rnn_layer_dims(ctx, false);
  RnnScratch scratch;
  ORTM_DISPATCH_FLOAT(ctx.in(rnn_io::kX).dtype(), ctx,
                      rnn_layer_forward<scalar_t>(d, rnn_forward_args<scalar_t>(ctx, d, scratch)));
}

std::vector<OutputInfo> shape_rnn_layer_grad(const OpContext& ctx) {
  using namespace rnn_io;
  const rnn::RnnDims d = rnn_layer_dims(ctx, true);
  const DType dtype = ctx.in(kGradX).dtype();
  const int64_t GH = d.G() * d.H;
  return {{dtype, ctx.in(kGradX).shape()},
          {dtype, ctx.in(kGradWih).shape()},
          {dtype, ctx.in(kGradWhh).shape()},
          {dtype, {GH}},
          {dtype, {GH}},
          {dtype, {d.B, d.H}},
          {dtype, {d.B, d.H}}};
}

void cpu_rnn_layer_grad(OpContext& ctx) {
  const rnn::RnnDims d = rnn_layer_dims(ctx, true);
  RnnScratch scratch;
  ORTM_DISPATCH_FLOAT(
      ctx.in(rnn_io::kGradX).dtype(), ctx,
      rnn_layer_backward<scalar_t>(d, rnn_backward_args<scalar_t>(ctx, d, scratch)));
}

// One <Op>Grad node for every input that needs a gradient, from the gradients of Y, H_n and
// C_n that exist (an unused output sends none) and the forward's saved gates and states.
void grad_rnn_layer(GradContext& g) {
  using namespace rnn_io;
  const Node& n = g.node();
  const bool lstm = n.op_type == "LSTMTorch", gru = n.op_type == "GRUTorch";
  std::vector<Value*> inputs = {g.output_grad(0),
                                g.output_grad(1),
                                lstm ? g.output_grad(2) : nullptr,
                                g.input(kX),
                                g.input(kWih),
                                g.input(kWhh),
                                g.input(kH0),
                                lstm ? g.input(kC0) : nullptr};
  inputs.push_back(g.forward_output(0, "y"));
  inputs.push_back(lstm  ? g.forward_output(3, "saved")
                   : gru ? g.forward_output(2, "saved")
                         : nullptr);
  const std::vector<size_t> forward_input = {kX, kWih, kWhh, kBih, kBhh, kH0, kC0};
  std::vector<bool> wanted;
  for (size_t i : forward_input) wanted.push_back(g.input(i) && g.needs_grad(i));
  if (!lstm) wanted[kDc0] = false;
  Attribute reverse = Attribute::make_int(n.attr_int("reverse", 0));
  const std::vector<Value*> grads =
      lstm || gru
          ? g.emit_multi(n.op_type + "Grad", inputs, wanted, {{"reverse", reverse}}, "ai.ortmodule")
          : g.emit_multi(
                n.op_type + "Grad", inputs, wanted,
                {{"reverse", reverse},
                 {"nonlinearity", Attribute::make_string(n.attr_string("nonlinearity", "tanh"))}},
                "ai.ortmodule");
  for (size_t k = 0; k < forward_input.size(); ++k)
    if (wanted[k]) g.set_input_grad(forward_input[k], grads[k]);
}

}  // namespace ortmodule
