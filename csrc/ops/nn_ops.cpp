// Softmax, LogSoftmax, Dropout and the classification losses, with gradients.
#include <algorithm>
#include <cstdint>
#include <cstring>

#include "grad/grad_context.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/layernorm.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/softmax.h"
#include "kernels/math/random.h"
#include "ops/loss_attrs.h"
#include "ops/op_utils.h"
#include "ops/ops.h"

namespace ortmodule {

// ---- Softmax / LogSoftmax (opset 13 semantics: normalised along one axis) ----

// Before opset 13 (and in com.microsoft SoftmaxGrad / LogSoftmaxGrad) the input is coerced
// to 2-D at `axis` (default 1): [prod(dims[:axis]), prod(dims[axis:])], normalised per row.

namespace {
void softmax_dims(const OpContext& ctx, const Shape& s, bool coerce_2d, int64_t* outer,
                  int64_t* dim, int64_t* inner) {
  int64_t rank = static_cast<int64_t>(s.size());
  if (coerce_2d) {
    // axis may equal rank (one row per element... of an empty trailing product).
    int64_t axis = ctx.node.attr_int("axis", 1);
    if (axis < -rank || axis > rank) {
      ctx.fail("attribute axis=" + std::to_string(axis) + " is out of range for rank " +
               std::to_string(rank) + " (expected [" + std::to_string(-rank) + ", " +
               std::to_string(rank) + "])");
    }
    if (axis < 0) axis += rank;
    *outer = dims_product(s, 0, axis);
    *dim = dims_product(s, axis, s.size());
    *inner = 1;
    return;
  }
  int64_t axis = check_axis(ctx, ctx.node.attr_int("axis", -1), rank, "attribute 'axis'");
  *outer = dims_product(s, 0, axis);
  *dim = s[axis];
  *inner = dims_product(s, axis + 1, s.size());
}

// The rows before opset 13 and the com.microsoft grads of those rows coerce to 2-D.
bool coerces_2d(const OpContext& ctx) {
  return ctx.node.domain.empty() ? ctx.node.def->until_version < 13
                                 : ctx.node.op_type.find("_13") == std::string::npos;
}

void run_softmax(OpContext& ctx, bool log) {
  const Tensor& x = ctx.in(0);
  int64_t outer, dim, inner;
  softmax_dims(ctx, x.shape(), coerces_2d(ctx), &outer, &dim, &inner);
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx,
                      softmax_forward<scalar_t>(outer, dim, inner, x.data<scalar_t>(),
                                                ctx.out(0).data<scalar_t>(), log));
}

void run_softmax_grad(OpContext& ctx, bool log) {
  expect_same_dtype(ctx, 1);
  const Tensor& dy = ctx.in(0);
  const Tensor& y = ctx.in(1);
  if (dy.shape() != y.shape())
    ctx.fail("input 0 (dY) has shape " + shape_str(dy.shape()) + ", input 1 (Y) has " +
             shape_str(y.shape()));
  int64_t outer, dim, inner;
  softmax_dims(ctx, y.shape(), coerces_2d(ctx), &outer, &dim, &inner);
  ORTM_DISPATCH_FLOAT(
      dy.dtype(), ctx,
      softmax_backward<scalar_t>(outer, dim, inner, dy.data<scalar_t>(), y.data<scalar_t>(),
                                 ctx.out(0).data<scalar_t>(), log));
}

void grad_softmax_common(GradContext& g, const char* op, int64_t default_axis) {
  g.set_input_grad(0,
                   g.emit(op, {g.output_grad(0), g.output(0)},
                          {{"axis", Attribute::make_int(g.node().attr_int("axis", default_axis))}},
                          "com.microsoft"));
}
}  // namespace

void softmax_layout(const OpContext& ctx, const Shape& s, int64_t* outer, int64_t* dim,
                    int64_t* inner) {
  softmax_dims(ctx, s, coerces_2d(ctx), outer, dim, inner);
}

void cpu_softmax(OpContext& ctx) { run_softmax(ctx, false); }
void cpu_log_softmax(OpContext& ctx) { run_softmax(ctx, true); }
void cpu_softmax_grad(OpContext& ctx) { run_softmax_grad(ctx, false); }
void cpu_log_softmax_grad(OpContext& ctx) { run_softmax_grad(ctx, true); }
void grad_softmax(GradContext& g) { grad_softmax_common(g, "SoftmaxGrad_13", -1); }
void grad_log_softmax(GradContext& g) { grad_softmax_common(g, "LogSoftmaxGrad_13", -1); }
void grad_softmax_2d(GradContext& g) { grad_softmax_common(g, "SoftmaxGrad", 1); }
void grad_log_softmax_2d(GradContext& g) { grad_softmax_common(g, "LogSoftmaxGrad", 1); }

// ---- LayerNormalization(X, Scale, B?; axis, epsilon) -> Y, Mean?, InvStdDev? ----
// and com.microsoft LayerNormalizationGrad(dY, X, scale, mean, inv_std) -> dX, dScale, dBias

// rows = prod(X[:axis]), cols = prod(X[axis:]); scale (and bias) must hold cols elements.
void layernorm_dims(const OpContext& ctx, const Tensor& x, const Tensor& scale, int64_t* axis,
                    int64_t* rows, int64_t* cols) {
  const int64_t rank = static_cast<int64_t>(x.rank());
  *axis = normalize_axis(ctx, ctx.node.attr_int("axis", -1), rank);
  *rows = dims_product(x.shape(), 0, *axis);
  *cols = dims_product(x.shape(), *axis, rank);
  if (scale.numel() != *cols) {
    ctx.fail("scale has shape " + shape_str(scale.shape()) + " but the normalised dims of " +
             shape_str(x.shape()) + " hold " + std::to_string(*cols) +
             " elements (broadcast scales are not supported)");
  }
}

std::vector<OutputInfo> shape_layernorm(const OpContext& ctx) {
  expect_same_dtype(ctx, 1);
  int64_t axis, rows, cols;
  layernorm_dims(ctx, ctx.in(0), ctx.in(1), &axis, &rows, &cols);
  if (ctx.has_input(2)) {
    expect_same_dtype(ctx, 2);
    if (ctx.in(2).numel() != cols)
      ctx.fail("bias (input 2) has shape " + shape_str(ctx.in(2).shape()) + ", expected " +
               std::to_string(cols) + " elements");
  }
  Shape stat = ctx.in(0).shape();
  for (size_t i = axis; i < stat.size(); ++i) stat[i] = 1;
  DType t = ctx.in(0).dtype();
  return {OutputInfo{t, ctx.in(0).shape()}, OutputInfo{t, stat}, OutputInfo{t, stat}};
}

void cpu_layernorm(OpContext& ctx) {
  int64_t axis, rows, cols;
  layernorm_dims(ctx, ctx.in(0), ctx.in(1), &axis, &rows, &cols);
  double eps = ctx.node.attr_float("epsilon", 1e-5f);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    auto out = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<scalar_t>() : nullptr; };
    layernorm_forward<scalar_t>(
        rows, cols, eps, ctx.in(0).data<scalar_t>(), ctx.in(1).data<scalar_t>(),
        ctx.has_input(2) ? ctx.in(2).data<scalar_t>() : nullptr, out(0), out(1), out(2));
  });
}

std::vector<OutputInfo> shape_layernorm_grad(const OpContext& ctx) {
  DType t = ctx.in(0).dtype();
  int64_t axis, rows, cols;
  layernorm_dims(ctx, ctx.in(1), ctx.in(2), &axis, &rows, &cols);
  if (ctx.in(0).shape() != ctx.in(1).shape())
    ctx.fail("input 0 (dY) has shape " + shape_str(ctx.in(0).shape()) + ", input 1 (X) has " +
             shape_str(ctx.in(1).shape()));
  for (size_t i = 1; i < 5; ++i) expect_same_dtype(ctx, i);
  for (size_t i = 3; i < 5; ++i)
    if (ctx.in(i).numel() != rows)
      ctx.fail("input " + std::to_string(i) + " has shape " + shape_str(ctx.in(i).shape()) +
               ", expected " + std::to_string(rows) + " elements");
  return {OutputInfo{t, ctx.in(1).shape()}, OutputInfo{t, ctx.in(2).shape()},
          OutputInfo{t, ctx.in(2).shape()}};
}

void cpu_layernorm_grad(OpContext& ctx) {
  int64_t axis, rows, cols;
  layernorm_dims(ctx, ctx.in(1), ctx.in(2), &axis, &rows, &cols);
  ORTM_DISPATCH_FLOAT(ctx.in(0).dtype(), ctx, {
    auto in = [&](size_t i) { return ctx.in(i).data<scalar_t>(); };
    auto out = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<scalar_t>() : nullptr; };
    layernorm_backward<scalar_t>(rows, cols, in(0), in(1), in(2), in(3), in(4), out(0), out(1),
                                 out(2));
  });
}

void grad_layernorm(GradContext& g) {
  Node& n = g.node();
  Value* mean = g.forward_output(1, "mean");
  Value* inv_std = g.forward_output(2, "inv_std_dev");
  std::vector<Value*> grads = g.emit_multi(
      "LayerNormalizationGrad", {g.output_grad(0), g.input(0), g.input(1), mean, inv_std},
      {g.needs_grad(0), g.needs_grad(1), g.needs_grad(2)},
      {{"axis", Attribute::make_int(n.attr_int("axis", -1))},
       {"epsilon", Attribute::make_float(n.attr_float("epsilon", 1e-5f))}},
      "com.microsoft");
  for (size_t i = 0; i < 3; ++i) g.set_input_grad(i, grads[i]);
}

// ---- Dropout(data, ratio?, training_mode?) -> output, mask? ----

double dropout_ratio(const OpContext& ctx, size_t index) {
  if (ctx.has_input(index) && ctx.in(index).numel() != 1)
    ctx.fail("ratio (input " + std::to_string(index) + ") must hold one value");
  double r = ctx.has_input(index) ? ctx.in(index).float_at(0) : ctx.node.attr_float("ratio", 0.5);
  if (r < 0.0 || r >= 1.0) ctx.fail("ratio must be in [0, 1), got " + std::to_string(r));
  return r;
}
bool dropout_training(const OpContext& ctx, size_t index) {
  if (ctx.has_input(index) && ctx.in(index).numel() != 1)
    ctx.fail("training_mode (input " + std::to_string(index) + ") must hold one value");
  return ctx.has_input(index) && ctx.in(index).int_at(0) != 0;
}
uint64_t dropout_stream_seed(const OpContext& ctx) {
  return math::dropout_seed(ctx.seed, static_cast<uint64_t>(ctx.node.random_stream()));
}

std::vector<OutputInfo> shape_dropout(const OpContext& ctx) {
  OutputInfo y, mask;
  y.dtype = ctx.in(0).dtype();
  y.shape = ctx.in(0).shape();
  mask.dtype = DType::Bool;
  mask.shape = y.shape;
  return {y, mask};
}

void cpu_dropout(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  double ratio = dropout_ratio(ctx, 1);
  bool active = dropout_training(ctx, 2) && ratio > 0.0;
  uint8_t* mask = ctx.has_output(1) ? ctx.out(1).data<uint8_t>() : nullptr;
  const int64_t n = x.numel();
  const uint64_t seed = dropout_stream_seed(ctx);
  ORTM_DISPATCH_FLOAT(x.dtype(), ctx, {
    const scalar_t* xp = x.data<scalar_t>();
    scalar_t* yp = ctx.out(0).data<scalar_t>();
    const scalar_t scale = static_cast<scalar_t>(active ? 1.0 / (1.0 - ratio) : 1.0);
    parallel_for(0, n, kElementwiseGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        bool keep = !active || math::dropout_keeps(seed, static_cast<uint64_t>(i), ratio);
        if (mask) mask[i] = keep;
        yp[i] = keep ? xp[i] * scale : scalar_t(0);
      }
    });
  });
}

// Dropout before opset 12 (ratio an attribute): the engine runs it as inference, output =
// data and an all-true mask (element type T before opset 10, bool from 10). Opsets 1-6 say
// so with is_test=1; is_test=0 asks for training-mode dropout, which is refused.
std::vector<OutputInfo> shape_dropout_legacy(const OpContext& ctx) {
  const int until = ctx.node.def->until_version;
  if (until < 7 && ctx.node.attr_int("is_test", 0) == 0) {
    ctx.fail(
        "attribute is_test=0 asks for training-mode dropout, which is not supported "
        "before opset 7; expected is_test=1 (inference)");
  }
  dropout_ratio(ctx, 1);
  std::vector<OutputInfo> outs = shape_dropout(ctx);
  if (until < 10) outs[1].dtype = ctx.in(0).dtype();
  return outs;
}

void cpu_dropout_legacy(OpContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::memcpy(ctx.out(0).raw(), x.raw(), x.nbytes());
  if (!ctx.has_output(1)) return;
  Tensor& mask = ctx.out(1);
  if (mask.dtype() == DType::Bool) {
    std::memset(mask.raw(), 1, mask.nbytes());
    return;
  }
  ORTM_DISPATCH_FLOAT(mask.dtype(), ctx, {
    scalar_t* m = mask.data<scalar_t>();
    std::fill(m, m + mask.numel(), scalar_t(1));
  });
}

// DropoutGrad(dY, mask, ratio?, training_mode?) -> dX
void cpu_dropout_grad(OpContext& ctx) {
  const Tensor& dy = ctx.in(0);
  if (ctx.in(1).numel() != dy.numel() || dtype_size(ctx.in(1).dtype()) != 1)
    ctx.fail("mask (input 1) must be bool of dY's shape " + shape_str(dy.shape()) + ", got " +
             dtype_name(ctx.in(1).dtype()) + " " + shape_str(ctx.in(1).shape()));
  const uint8_t* mask = ctx.in(1).data<uint8_t>();
  double ratio = dropout_ratio(ctx, 2);
  bool active = dropout_training(ctx, 3) && ratio > 0.0;
  ORTM_DISPATCH_FLOAT(dy.dtype(), ctx, {
    const scalar_t* g = dy.data<scalar_t>();
    scalar_t* dx = ctx.out(0).data<scalar_t>();
    const scalar_t scale = static_cast<scalar_t>(active ? 1.0 / (1.0 - ratio) : 1.0);
    parallel_for(0, dy.numel(), kElementwiseGrain, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dx[i] = mask[i] ? g[i] * scale : scalar_t(0);
    });
  });
}

void grad_dropout(GradContext& g) {
  Value* mask = g.forward_output(1, "mask");
  g.set_input_grad(0, g.emit("DropoutGrad", {g.output_grad(0), mask, g.input(1), g.input(2)}, {},
                             "com.microsoft"));
}

// ---- SoftmaxCrossEntropyLoss / NegativeLogLikelihoodLoss ----

Reduction reduction_of(const OpContext& ctx) {
  std::string r = ctx.node.attr_string("reduction", "mean");
  if (r == "mean") return Reduction::Mean;
  if (r == "sum") return Reduction::Sum;
  if (r == "none") return Reduction::None;
  ctx.fail("unknown reduction '" + r + "' (expected mean, sum or none)");
}

// scores [N, C, d1, ...] with labels [N, d1, ...] -> N, C, D
void loss_dims(const OpContext& ctx, const Shape& scores, const Shape& labels, int64_t* N,
               int64_t* C, int64_t* D) {
  if (scores.size() < 2) ctx.fail("scores must have shape [N, C, ...], got " + shape_str(scores));
  Shape expect{scores[0]};
  expect.insert(expect.end(), scores.begin() + 2, scores.end());
  if (labels != expect) {
    ctx.fail("labels have shape " + shape_str(labels) + " but scores " + shape_str(scores) +
             " require " + shape_str(expect));
  }
  *N = scores[0];
  *C = scores[1];
  *D = dims_product(scores, 2, scores.size());
}

namespace {

// The optional class weights (input i) hold one value per class, of the scores' dtype.
void expect_weights(const OpContext& ctx, size_t i, int64_t C, DType dtype) {
  if (!ctx.has_input(i)) return;
  if (ctx.in(i).numel() != C || ctx.in(i).dtype() != dtype)
    ctx.fail("weights (input " + std::to_string(i) + ") must be " + dtype_name(dtype) + " [" +
             std::to_string(C) + "], got " + dtype_name(ctx.in(i).dtype()) + " " +
             shape_str(ctx.in(i).shape()));
}

// dY of a loss gradient: the loss's shape (the labels' for reduction none, else a scalar).
void expect_loss_grad(const OpContext& ctx, const Shape& labels, DType dtype) {
  const int64_t n = reduction_of(ctx) == Reduction::None ? shape_numel(labels) : 1;
  if (ctx.in(0).numel() != n || ctx.in(0).dtype() != dtype)
    ctx.fail("input 0 (dY) must be " + dtype_name(dtype) + " with " + std::to_string(n) +
             " elements, got " + dtype_name(ctx.in(0).dtype()) + " " +
             shape_str(ctx.in(0).shape()));
}

void expect_labels(const OpContext& ctx, size_t i) {
  if (ctx.in(i).dtype() != DType::Int64) {
    ctx.fail("labels must be int64, got " + dtype_name(ctx.in(i).dtype()));
  }
}

Shape loss_shape(const OpContext& ctx, const Shape& labels) {
  return reduction_of(ctx) == Reduction::None ? labels : Shape{};
}
}  // namespace

std::vector<OutputInfo> shape_softmax_cross_entropy(const OpContext& ctx) {
  expect_labels(ctx, 1);
  int64_t N, C, D;
  loss_dims(ctx, ctx.in(0).shape(), ctx.in(1).shape(), &N, &C, &D);
  expect_weights(ctx, 2, C, ctx.in(0).dtype());
  OutputInfo loss, log_prob;
  loss.dtype = log_prob.dtype = ctx.in(0).dtype();
  loss.shape = loss_shape(ctx, ctx.in(1).shape());
  log_prob.shape = ctx.in(0).shape();
  return {loss, log_prob};
}

void cpu_softmax_cross_entropy(OpContext& ctx) {
  const Tensor& scores = ctx.in(0);
  int64_t N, C, D;
  loss_dims(ctx, scores.shape(), ctx.in(1).shape(), &N, &C, &D);
  bool has_ignore = ctx.node.has_attr("ignore_index");
  int64_t ignore = ctx.node.attr_int("ignore_index", -100);
  Tensor log_prob = ctx.has_output(1) ? ctx.out(1) : Tensor::empty(scores.dtype(), scores.shape());
  ORTM_DISPATCH_FLOAT(scores.dtype(), ctx, {
    const scalar_t* w = ctx.has_input(2) ? ctx.in(2).data<scalar_t>() : nullptr;
    softmax_cross_entropy_forward<scalar_t>(
        N, C, D, scores.data<scalar_t>(), ctx.in(1).data<int64_t>(), w, reduction_of(ctx), ignore,
        has_ignore, ctx.out(0).data<scalar_t>(), log_prob.data<scalar_t>());
  });
}

// SoftmaxCrossEntropyLossGrad(dY, log_prob, labels, weight?) -> d_scores
std::vector<OutputInfo> shape_softmax_cross_entropy_grad(const OpContext& ctx) {
  expect_labels(ctx, 2);
  int64_t N, C, D;
  loss_dims(ctx, ctx.in(1).shape(), ctx.in(2).shape(), &N, &C, &D);
  expect_weights(ctx, 3, C, ctx.in(1).dtype());
  expect_loss_grad(ctx, ctx.in(2).shape(), ctx.in(1).dtype());
  return one_output(ctx.in(1).dtype(), ctx.in(1).shape());
}

void cpu_softmax_cross_entropy_grad(OpContext& ctx) {
  const Tensor& log_prob = ctx.in(1);
  int64_t N, C, D;
  loss_dims(ctx, log_prob.shape(), ctx.in(2).shape(), &N, &C, &D);
  bool has_ignore = ctx.node.has_attr("ignore_index");
  int64_t ignore = ctx.node.attr_int("ignore_index", -100);
  ORTM_DISPATCH_FLOAT(log_prob.dtype(), ctx, {
    const scalar_t* w = ctx.has_input(3) ? ctx.in(3).data<scalar_t>() : nullptr;
    softmax_cross_entropy_backward<scalar_t>(
        N, C, D, ctx.in(0).data<scalar_t>(), log_prob.data<scalar_t>(), ctx.in(2).data<int64_t>(),
        w, reduction_of(ctx), ignore, has_ignore, ctx.out(0).data<scalar_t>());
  });
}

void grad_softmax_cross_entropy(GradContext& g) {
  if (g.needs_grad(2)) g.fail("gradient with respect to the class weights is not supported");
  Node& n = g.node();
  Value* log_prob = g.forward_output(1, "log_prob");
  Node* grad_node =
      g.emit("SoftmaxCrossEntropyLossGrad", {g.output_grad(0), log_prob, g.input(1), g.input(2)},
             {{"reduction", Attribute::make_string(n.attr_string("reduction", "mean"))}},
             "com.microsoft")
          ->producer;
  if (n.has_attr("ignore_index")) grad_node->attrs["ignore_index"] = n.attrs.at("ignore_index");
  g.set_input_grad(0, grad_node->outputs[0]);
}

std::vector<OutputInfo> shape_nll_loss(const OpContext& ctx) {
  expect_labels(ctx, 1);
  int64_t N, C, D;
  loss_dims(ctx, ctx.in(0).shape(), ctx.in(1).shape(), &N, &C, &D);
  expect_weights(ctx, 2, C, ctx.in(0).dtype());
  return one_output(ctx.in(0).dtype(), loss_shape(ctx, ctx.in(1).shape()));
}

void cpu_nll_loss(OpContext& ctx) {
  const Tensor& input = ctx.in(0);
  int64_t N, C, D;
  loss_dims(ctx, input.shape(), ctx.in(1).shape(), &N, &C, &D);
  bool has_ignore = ctx.node.has_attr("ignore_index");
  int64_t ignore = ctx.node.attr_int("ignore_index", -100);
  ORTM_DISPATCH_FLOAT(input.dtype(), ctx, {
    const scalar_t* w = ctx.has_input(2) ? ctx.in(2).data<scalar_t>() : nullptr;
    nll_loss_forward<scalar_t>(N, C, D, input.data<scalar_t>(), ctx.in(1).data<int64_t>(), w,
                               reduction_of(ctx), ignore, has_ignore, ctx.out(0).data<scalar_t>());
  });
}

// NegativeLogLikelihoodLossGrad(dY, input_shape, target, weight?) -> d_input
std::vector<OutputInfo> shape_nll_loss_grad(const OpContext& ctx) {
  const Shape shape = ctx.in(1).to_int_vector();
  check_shape(ctx, shape, "shape input (input 1)");
  expect_labels(ctx, 2);
  int64_t N, C, D;
  loss_dims(ctx, shape, ctx.in(2).shape(), &N, &C, &D);
  expect_weights(ctx, 3, C, ctx.in(0).dtype());
  expect_loss_grad(ctx, ctx.in(2).shape(), ctx.in(0).dtype());
  return one_output(ctx.in(0).dtype(), shape);
}

void cpu_nll_loss_grad(OpContext& ctx) {
  Tensor& dx = ctx.out(0);
  int64_t N, C, D;
  loss_dims(ctx, dx.shape(), ctx.in(2).shape(), &N, &C, &D);
  bool has_ignore = ctx.node.has_attr("ignore_index");
  int64_t ignore = ctx.node.attr_int("ignore_index", -100);
  ORTM_DISPATCH_FLOAT(dx.dtype(), ctx, {
    const scalar_t* w = ctx.has_input(3) ? ctx.in(3).data<scalar_t>() : nullptr;
    nll_loss_backward<scalar_t>(N, C, D, ctx.in(0).data<scalar_t>(), ctx.in(2).data<int64_t>(), w,
                                reduction_of(ctx), ignore, has_ignore, dx.data<scalar_t>());
  });
}

void grad_nll_loss(GradContext& g) {
  if (g.needs_grad(2)) g.fail("gradient with respect to the class weights is not supported");
  Node& n = g.node();
  Node* grad_node =
      g.emit("NegativeLogLikelihoodLossGrad",
             {g.output_grad(0), g.shape_of(g.input(0)), g.input(1), g.input(2)},
             {{"reduction", Attribute::make_string(n.attr_string("reduction", "mean"))}},
             "ai.ortmodule")
          ->producer;
  if (n.has_attr("ignore_index")) grad_node->attrs["ignore_index"] = n.attrs.at("ignore_index");
  g.set_input_grad(0, grad_node->outputs[0]);
}

}  // namespace ortmodule
