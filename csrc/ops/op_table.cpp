// The op table. Adding an op: one row here plus its shape rule, kernel and
// gradient rule in the op family's file. Tests, docs and the registry read this.
#include "ops/op_table.h"

#include <algorithm>
#include <cstdint>

#include "ops/cuda_ops.h"
#include "ops/op_table_row.h"
#include "ops/ops.h"

namespace ortmodule {

namespace {

using op_rows::kMs;
using op_rows::kOwn;
using op_rows::Row;

std::vector<OpDef> build_table() {
  std::vector<OpDef> rows = {
      // ---- element-wise ----
      Row("", "Add", 7, shape_binary_broadcast, cpu_add, grad_add).cuda(cuda_add).inplace(0),
      Row("", "Sub", 7, shape_binary_broadcast, cpu_sub, grad_sub).cuda(cuda_sub).inplace(0),
      Row("", "Mul", 7, shape_binary_broadcast, cpu_mul, grad_mul).cuda(cuda_mul).inplace(0),
      Row("", "Div", 7, shape_binary_broadcast, cpu_div, grad_div).cuda(cuda_div).inplace(0),
      Row("", "Pow", 7, shape_pow, cpu_pow, grad_pow).cuda(cuda_pow).tolerance(1e-5, 1e-5),
      // Before opset 7: broadcasting only with broadcast=1, B to A's shape (axis attribute).
      Row("", "Add", 1, shape_legacy_broadcast, cpu_add, grad_add)
          .cuda(cuda_add)
          .until(6)
          .inplace(0),
      Row("", "Sub", 1, shape_legacy_broadcast, cpu_sub, grad_sub)
          .cuda(cuda_sub)
          .until(6)
          .inplace(0),
      Row("", "Mul", 1, shape_legacy_broadcast, cpu_mul, grad_mul)
          .cuda(cuda_mul)
          .until(6)
          .inplace(0),
      Row("", "Div", 1, shape_legacy_broadcast, cpu_div, grad_div)
          .cuda(cuda_div)
          .until(6)
          .inplace(0),
      // The legacy shape rule only restricts broadcasting (B to A's shape, trailing dims):
      // what it admits is numpy broadcasting, which the kernels above compute.
      Row("", "Pow", 1, shape_legacy_broadcast, cpu_pow, grad_pow)
          .cuda(cuda_pow)
          .until(6)
          .tolerance(1e-5, 1e-5),
      Row("", "Sum", 1, shape_variadic_broadcast, cpu_sum, grad_sum).cuda(cuda_sum).inplace(0),
      Row("", "Neg", 1, shape_same_as_input0, cpu_neg, grad_neg).cuda(cuda_neg).inplace(0),
      Row("", "Relu", 1, shape_same_as_input0, cpu_relu, grad_relu).cuda(cuda_relu).inplace(0),
      Row("", "Sigmoid", 1, shape_same_as_input0, cpu_sigmoid, grad_sigmoid)
          .cuda(cuda_sigmoid)
          .inplace(0),
      Row("", "Tanh", 1, shape_same_as_input0, cpu_tanh, grad_tanh).cuda(cuda_tanh).inplace(0),
      Row("", "Exp", 1, shape_same_as_input0, cpu_exp, grad_exp).cuda(cuda_exp).inplace(0),
      Row("", "Log", 1, shape_same_as_input0, cpu_log, grad_log).cuda(cuda_log).inplace(0),
      Row("", "Sqrt", 1, shape_same_as_input0, cpu_sqrt, grad_sqrt).cuda(cuda_sqrt).inplace(0),
      Row("", "Erf", 9, shape_same_as_input0, cpu_erf, grad_erf).cuda(cuda_erf).inplace(0),
      Row("", "Abs", 1, shape_same_as_input0, cpu_abs, grad_abs).cuda(cuda_abs).inplace(0),
      // Piecewise constant: no gradient flows through it.
      Row("", "Sign", 9, shape_same_as_input0, cpu_sign, nullptr)
          .cuda(cuda_sign)
          .inplace(0)
          .zero_gradient(),
      Row("", "LeakyRelu", 1, shape_same_as_input0, cpu_leaky_relu, grad_leaky_relu)
          .cuda(cuda_leaky_relu)
          .inplace(0),
      // The bounds are single values, read on the host as the CPU kernel reads them.
      Row("", "Clip", 11, shape_same_as_input0, cpu_clip, grad_clip)
          .cuda(cuda_clip, {1, 2})
          .inplace(0),
      // Before opset 11 the bounds are the min/max attributes.
      Row("", "Clip", 1, shape_same_as_input0, cpu_clip, grad_clip)
          .cuda(cuda_clip)
          .until(10)
          .inplace(0),
      Row("", "Identity", 1, shape_view_of_input0, cpu_view, grad_identity).cuda(cpu_view),
      // Tensor.detach() and the outputs of torch.no_grad() regions: identity, no gradient.
      Row(kOwn, "StopGradient", 1, shape_view_of_input0, cpu_view, nullptr)
          .cuda(cpu_view)
          .not_differentiable(),
      Row("", "Cast", 6, shape_cast, cpu_cast, grad_cast).cuda(cuda_cast),
      Row("", "CastLike", 15, shape_cast_like, cpu_cast, grad_cast)
          .cuda(cuda_cast)
          .no_grad_inputs({1}),
      Row("", "Expand", 8, shape_expand, cpu_expand, grad_expand).cuda(cuda_expand, {1}),
      Row("", "Sin", 7, shape_same_as_input0, cpu_sin, grad_sin).cuda(cuda_sin).inplace(0),
      Row("", "Cos", 7, shape_same_as_input0, cpu_cos, grad_cos).cuda(cuda_cos).inplace(0),
      Row("", "Reciprocal", 1, shape_same_as_input0, cpu_reciprocal, grad_reciprocal)
          .cuda(cuda_reciprocal)
          .inplace(0),
      Row("", "Softplus", 1, shape_same_as_input0, cpu_softplus, grad_softplus)
          .cuda(cuda_softplus)
          .inplace(0),
      Row("", "Gelu", 20, shape_same_as_input0, cpu_gelu, grad_gelu).cuda(cuda_gelu).inplace(0),
      // Piecewise constant: the gradient is zero wherever it exists (as in PyTorch).
      Row("", "Floor", 1, shape_same_as_input0, cpu_floor, nullptr)
          .cuda(cuda_floor)
          .zero_gradient(),
      Row("", "Ceil", 1, shape_same_as_input0, cpu_ceil, nullptr).cuda(cuda_ceil).zero_gradient(),
      Row("", "Min", 1, shape_variadic_broadcast, cpu_min, grad_min_max).cuda(cuda_min),
      Row("", "Max", 1, shape_variadic_broadcast, cpu_max, grad_min_max).cuda(cuda_max),
      Row("", "Mod", 10, shape_binary_broadcast, cpu_mod, grad_mod).cuda(cuda_mod),
      Row("", "Where", 9, shape_where, cpu_where, grad_where).cuda(cuda_where),
      // ---- comparisons and logic (bool results, no gradients) ----
      Row("", "Equal", 7, shape_compare, cpu_equal, nullptr).cuda(cuda_equal).not_differentiable(),
      Row("", "Less", 7, shape_compare, cpu_less, nullptr).cuda(cuda_less).not_differentiable(),
      Row("", "Greater", 7, shape_compare, cpu_greater, nullptr)
          .cuda(cuda_greater)
          .not_differentiable(),
      Row("", "LessOrEqual", 12, shape_compare, cpu_less_or_equal, nullptr)
          .cuda(cuda_less_or_equal)
          .not_differentiable(),
      Row("", "GreaterOrEqual", 12, shape_compare, cpu_greater_or_equal, nullptr)
          .cuda(cuda_greater_or_equal)
          .not_differentiable(),
      Row("", "Not", 1, shape_not, cpu_not, nullptr).cuda(cuda_not).not_differentiable(),
      Row("", "And", 7, shape_logical_binary, cpu_and, nullptr).cuda(cuda_and).not_differentiable(),
      Row("", "Or", 7, shape_logical_binary, cpu_or, nullptr).cuda(cuda_or).not_differentiable(),
      Row("", "Xor", 7, shape_logical_binary, cpu_xor, nullptr).cuda(cuda_xor).not_differentiable(),
      Row("", "IsNaN", 9, shape_float_predicate, cpu_isnan, nullptr)
          .cuda(cuda_isnan)
          .not_differentiable(),
      Row("", "IsInf", 10, shape_float_predicate, cpu_isinf, nullptr)
          .cuda(cuda_isinf)
          .not_differentiable(),
      // ---- matrix products ----
      Row("", "Gemm", 1, shape_gemm, cpu_gemm, grad_gemm).cuda(cuda_gemm),
      Row("", "MatMul", 1, shape_fused_matmul, cpu_fused_matmul, grad_matmul)
          .cuda(cuda_fused_matmul),
      // MatMul with transA/transB/alpha: gradients of MatMul, and products that transpose
      // folding (passes/transpose_folding.h) rewrites before gradient building.
      Row(kMs, "FusedMatMul", 1, shape_fused_matmul, cpu_fused_matmul, grad_matmul)
          .cuda(cuda_fused_matmul),
      // ---- data movement ----
      Row("", "Reshape", 5, shape_reshape, cpu_view, grad_reshape_like).cuda(cpu_view, {1}),
      Row("", "Flatten", 1, shape_flatten, cpu_view, grad_reshape_like).cuda(cpu_view),
      Row("", "Squeeze", 1, shape_squeeze, cpu_view, grad_reshape_like).cuda(cpu_view, {1}),
      Row("", "Unsqueeze", 1, shape_unsqueeze, cpu_view, grad_reshape_like).cuda(cpu_view, {1}),
      Row("", "Transpose", 1, shape_transpose, cpu_transpose, grad_transpose).cuda(cuda_transpose),
      Row("", "Concat", 4, shape_concat, cpu_concat, grad_concat).cuda(cuda_concat),
      Row("", "Gather", 1, shape_gather, cpu_gather, grad_gather).cuda(cuda_gather),
      // torch.nn.Embedding with a padding index: Gather whose padding row gets no gradient.
      Row(kOwn, "Embedding", 1, shape_gather, cpu_gather, grad_embedding).cuda(cuda_gather),
      Row("", "Slice", 10, shape_slice, cpu_slice, grad_slice).cuda(cuda_slice, {1, 2, 3, 4}),
      // Before opset 10 starts, ends and axes are attributes (no steps).
      Row("", "Slice", 1, shape_slice, cpu_slice, grad_slice).cuda(cuda_slice).until(9),
      Row("", "Split", 1, shape_split, cpu_split, grad_split).cuda(cuda_split, {1}),
      Row("", "Tile", 6, shape_tile, cpu_tile, grad_tile).cuda(cuda_tile, {1}),
      // The constant_value (input 2) is read by the kernel on the device.
      Row("", "Pad", 11, shape_pad, cpu_pad, grad_pad).cuda(cuda_pad, {1, 3}),
      // Before opset 11 pads (paddings at opset 1) and value are attributes.
      Row("", "Pad", 1, shape_pad, cpu_pad, grad_pad).cuda(cuda_pad).until(10),
      Row("", "Trilu", 14, shape_same_as_input0, cpu_trilu, grad_trilu).cuda(cuda_trilu, {1}),
      Row("", "CumSum", 11, shape_same_as_input0, cpu_cumsum, grad_cumsum).cuda(cuda_cumsum, {1}),
      // Range and ConstantOfShape read only scalars and shapes, and Constant reads nothing: a
      // step with no input on a device has no device to run on, so they compute on the host
      // and consumers on a device take their output there (as Shape's).
      Row("", "Range", 11, shape_range, cpu_range, nullptr).runs_on_host().not_differentiable(),
      Row("", "GatherElements", 11, shape_gather_elements, cpu_gather_elements,
          grad_gather_elements)
          .cuda(cuda_gather_elements),
      Row("", "ScatterElements", 11, shape_scatter, cpu_scatter_elements, grad_scatter_elements)
          .cuda(cuda_scatter_elements),
      Row("", "GatherND", 11, shape_gather_nd, cpu_gather_nd, grad_gather_nd).cuda(cuda_gather_nd),
      Row("", "ScatterND", 11, shape_scatter, cpu_scatter_nd, grad_scatter_nd)
          .cuda(cuda_scatter_nd),
      // The output's width is the number of non-zero elements, so the kernels provide the
      // output. The CUDA kernel copies the input to the host (one wait on the stream), finds the
      // coordinates there with the CPU kernel's loop and copies them to the device.
      Row("", "NonZero", 9, shape_nonzero, cpu_nonzero, nullptr)
          .cuda(cuda_nonzero)
          .not_differentiable(),
      Row("", "Constant", 1, shape_constant, cpu_constant, nullptr)
          .runs_on_host()
          .not_differentiable(),
      Row("", "Shape", 1, shape_shape, cpu_shape, nullptr).not_differentiable().reads_shapes_only(),
      Row("", "Size", 1, shape_size, cpu_size, nullptr).not_differentiable().reads_shapes_only(),
      Row("", "ConstantOfShape", 9, shape_constant_of_shape, cpu_constant_of_shape, nullptr)
          .runs_on_host()
          .not_differentiable(),
      // ---- bridge nodes: run on PyTorch, gradients from its autograd ----
      // On a CUDA step the bridge hands the engine's device tensors to torch as they are
      // (to_torch wraps their memory, from_torch the results: no copies) and torch runs the
      // callable on their device, on the same current stream as the engine's kernels. The
      // engine's kernel slot for the device is the same host-side function: it launches no
      // kernel itself, torch does.
      Row(kOwn, "TorchCall", 1, shape_torch_call, cpu_torch_call, grad_torch_call)
          .cuda(cpu_torch_call)
          .host_call(),
      // ---- reductions ----
      Row("", "ReduceSum", 1, shape_reduce, cpu_reduce_sum, grad_reduce_sum)
          .cuda(cuda_reduce_sum, {1}),
      Row("", "ReduceMean", 1, shape_reduce, cpu_reduce_mean, grad_reduce_mean)
          .cuda(cuda_reduce_mean, {1}),
      // ---- extreme-value reductions ----
      Row("", "ReduceMax", 1, shape_reduce, cpu_reduce_max, grad_reduce_extreme)
          .cuda(cuda_reduce_max, {1}),
      Row("", "ReduceMin", 1, shape_reduce, cpu_reduce_min, grad_reduce_extreme)
          .cuda(cuda_reduce_min, {1}),
      Row("", "ArgMax", 1, shape_arg_extreme, cpu_arg_max, nullptr)
          .cuda(cuda_arg_max)
          .not_differentiable(),
      Row("", "ArgMin", 1, shape_arg_extreme, cpu_arg_min, nullptr)
          .cuda(cuda_arg_min)
          .not_differentiable(),
      Row(kOwn, "ReduceExtremeGrad", 1, shape_reduce_extreme_grad, cpu_reduce_extreme_grad, nullptr)
          .cuda(cuda_reduce_extreme_grad, {3})
          .internal(),
      // ---- accumulating reductions and TopK ----
      // Axes from the attribute (before opset 18; ReduceSum's row reads both forms too) or
      // input 1, read on the host.
      Row("", "ReduceProd", 1, shape_reduce, cpu_reduce_prod, grad_reduce_prod)
          .cuda(cuda_reduce_prod, {1}),
      Row("", "ReduceL1", 1, shape_reduce, cpu_reduce_l1, grad_reduce_l1).cuda(cuda_reduce_l1, {1}),
      Row("", "ReduceL2", 1, shape_reduce, cpu_reduce_l2, grad_reduce_l2).cuda(cuda_reduce_l2, {1}),
      Row("", "ReduceLogSumExp", 1, shape_reduce, cpu_reduce_log_sum_exp, grad_reduce_log_sum_exp)
          .cuda(cuda_reduce_log_sum_exp, {1}),
      Row(kOwn, "ReduceProdGrad", 1, shape_reduce_extreme_grad, cpu_reduce_prod_grad, nullptr)
          .cuda(cuda_reduce_prod_grad, {3})
          .internal(),
      // K (input 1) is read on the host; the indices carry no gradient.
      Row("", "TopK", 11, shape_top_k, cpu_top_k, grad_top_k).cuda(cuda_top_k, {1}).grad_outputs(1),
      // ---- neural-network layers ----
      Row("", "Softmax", 13, shape_same_as_input0, cpu_softmax, grad_softmax).cuda(cuda_softmax),
      Row("", "LogSoftmax", 13, shape_same_as_input0, cpu_log_softmax, grad_log_softmax)
          .cuda(cuda_log_softmax),
      // Softmax(scale * x + mask) of attention scores (passes/attention_softmax_fusion.h);
      // a boolean mask with its fill (input 2, read on the host) selects instead of adding.
      Row(kOwn, "ScaledMaskedSoftmax", 1, shape_scaled_masked_softmax, cpu_scaled_masked_softmax,
          grad_scaled_masked_softmax)
          .cuda(cuda_scaled_masked_softmax, {2}),
      // ScaledMaskedSoftmax(Q K^T, mask, fill; scale) V in one op (passes/attention_fusion.h).
      Row(kOwn, "FusedAttention", 1, shape_fused_attention, cpu_fused_attention,
          grad_fused_attention)
          .cuda(cuda_fused_attention, {4})
          .grad_outputs(1),
      // ... with dropout (attribute dropout) on the softmax, as a Dropout node there draws it.
      Row(kOwn, "FusedAttentionDropout", 1, shape_fused_attention, cpu_fused_attention,
          grad_fused_attention)
          .cuda(cuda_fused_attention, {4})
          .grad_outputs(1)
          .random(),
      // Before opset 13: the input is coerced to 2-D at axis (default 1), rows normalised.
      Row("", "Softmax", 1, shape_same_as_input0, cpu_softmax, grad_softmax_2d)
          .cuda(cuda_softmax)
          .until(12),
      Row("", "LogSoftmax", 1, shape_same_as_input0, cpu_log_softmax, grad_log_softmax_2d)
          .cuda(cuda_log_softmax)
          .until(12),
      Row("", "Conv", 1, shape_conv, cpu_conv, grad_conv).cuda(cuda_conv).tolerance(1e-5, 1e-5),
      Row("", "ConvTranspose", 1, shape_conv_transpose, cpu_conv_transpose, grad_conv_transpose)
          .cuda(cuda_conv_transpose)
          .tolerance(1e-5, 1e-5),
      Row("", "MaxPool", 1, shape_maxpool, cpu_maxpool, grad_maxpool)
          .cuda(cuda_maxpool)
          .grad_outputs(1),
      Row("", "AveragePool", 1, shape_avgpool, cpu_avgpool, grad_avgpool).cuda(cuda_avgpool),
      Row("", "GlobalAveragePool", 1, shape_global_avgpool, cpu_global_avgpool, grad_global_avgpool)
          .cuda(cuda_global_avgpool),
      Row("", "BatchNormalization", 14, shape_batchnorm, cpu_batchnorm, grad_batchnorm)
          .cuda(cuda_batchnorm)
          .writeback({{1, 3}, {2, 4}})
          .grad_outputs(1)
          .tolerance(1e-4, 1e-5),
      // Before opset 14: inference form only (output Y, spatial=1).
      Row("", "BatchNormalization", 1, shape_batchnorm_legacy, cpu_batchnorm, grad_batchnorm)
          .cuda(cuda_batchnorm)
          .until(13)
          .tolerance(1e-4, 1e-5),
      // PyTorch's batch norm: running_var tracks the unbiased batch variance.
      Row(kOwn, "BatchNormTorch", 1, shape_batchnorm, cpu_batchnorm, grad_batchnorm)
          .cuda(cuda_batchnorm)
          .writeback({{1, 3}, {2, 4}})
          .grad_outputs(1)
          .tolerance(1e-4, 1e-5),
      Row("", "LayerNormalization", 17, shape_layernorm, cpu_layernorm, grad_layernorm)
          .cuda(cuda_layernorm)
          .grad_outputs(1)
          .tolerance(1e-5, 1e-5),
      // RMS normalisation (passes/rmsnorm_fusion.h), as ONNX Runtime names it.
      Row(kMs, "SimplifiedLayerNormalization", 1, shape_simplified_layernorm,
          cpu_simplified_layernorm, grad_simplified_layernorm)
          .cuda(cuda_simplified_layernorm)
          .grad_outputs(1)
          .tolerance(1e-5, 1e-5),
      // silu(gate) * up, Llama's gated MLP unit (passes/silu_mul_fusion.h).
      Row(kOwn, "SiluMul", 1, shape_silu_mul, cpu_silu_mul, grad_silu_mul).cuda(cuda_silu_mul),
      // q * cos + rotate_half(q) * sin (passes/rotary_fusion.h); its gradient is the same op.
      Row(kOwn, "FusedRotary", 1, shape_fused_rotary, cpu_fused_rotary, grad_fused_rotary)
          .cuda(cuda_fused_rotary),
      Row("", "Dropout", 12, shape_dropout, cpu_dropout, grad_dropout)
          .cuda(cuda_dropout, {1, 2})
          .random()
          .grad_outputs(1),
      // Before opset 12 (ratio an attribute) Dropout runs as inference: output = data.
      // Opsets 1-6 need is_test=1; the mask is of type T before opset 10, bool from 10.
      Row("", "Dropout", 1, shape_dropout_legacy, cpu_dropout_legacy, grad_identity)
          .cuda(cuda_dropout_legacy)
          .until(6)
          .grad_outputs(1),
      Row("", "Dropout", 7, shape_dropout_legacy, cpu_dropout_legacy, grad_identity)
          .cuda(cuda_dropout_legacy)
          .until(9)
          .grad_outputs(1),
      Row("", "Dropout", 10, shape_dropout_legacy, cpu_dropout_legacy, grad_identity)
          .cuda(cuda_dropout_legacy)
          .until(11)
          .grad_outputs(1),
      Row("", "SoftmaxCrossEntropyLoss", 12, shape_softmax_cross_entropy, cpu_softmax_cross_entropy,
          grad_softmax_cross_entropy)
          .cuda(cuda_softmax_cross_entropy)
          .grad_outputs(1),
      Row("", "NegativeLogLikelihoodLoss", 12, shape_nll_loss, cpu_nll_loss, grad_nll_loss)
          .cuda(cuda_nll_loss),
      // A head's product (+ bias) and SoftmaxCrossEntropyLoss in one, computed a block of rows
      // at a time (passes/linear_cross_entropy_fusion.h); output 1 (lse) is kept for backward.
      Row(kOwn, "FusedLinearCrossEntropy", 1, shape_fused_linear_cross_entropy,
          cpu_fused_linear_cross_entropy, grad_fused_linear_cross_entropy)
          .cuda(cuda_fused_linear_cross_entropy)
          .grad_outputs(1),
      // ---- Resampling and per-sample normalization: torch's avg_pool divisor_override ----
      // AveragePool whose windows divide by the divisor_override attribute.
      Row(kOwn, "AveragePoolTorch", 1, shape_avgpool, cpu_avgpool, grad_avgpool).cuda(cuda_avgpool),
      // Resize (opsets 11+: roi, scales, sizes read on the host to build the tap tables);
      // ResizeTorch(X, sizes, scales?) follows PyTorch's upsample_* index rules.
      Row("", "Resize", 11, shape_resize, cpu_resize, grad_resize).cuda(cuda_resize, {1, 2, 3}),
      Row(kOwn, "ResizeTorch", 1, shape_resize, cpu_resize, grad_resize).cuda(cuda_resize, {1, 2}),
      // Per-sample normalization; outputs 1 and 2 (mean, rstd: [N, G]) are the gradient's.
      Row("", "InstanceNormalization", 6, shape_groupnorm, cpu_groupnorm, grad_groupnorm)
          .cuda(cuda_groupnorm)
          .grad_outputs(1)
          .tolerance(1e-4, 1e-5),
      // torch's GroupNorm: num_groups groups of consecutive channels (0: one per channel).
      Row(kOwn, "GroupNorm", 1, shape_groupnorm, cpu_groupnorm, grad_groupnorm)
          .cuda(cuda_groupnorm)
          .grad_outputs(1)
          .tolerance(1e-4, 1e-5),
      // ---- recurrent layers (torch's RNN, LSTM, GRU; one layer, one direction) ----
      // The weights in torch's layout and gate order; the fx lowering stacks layers and
      // directions (ops/rnn_layer.h). The outputs after H_n / C_n (the saved gates and states
      // backward reads) carry no gradient.
      Row(kOwn, "LSTMTorch", 1, shape_rnn_layer, cpu_rnn_layer, grad_rnn_layer)
          .cuda(cuda_rnn_layer)
          .grad_outputs(3),
      Row(kOwn, "GRUTorch", 1, shape_rnn_layer, cpu_rnn_layer, grad_rnn_layer)
          .cuda(cuda_rnn_layer)
          .grad_outputs(2),
      Row(kOwn, "RNNTorch", 1, shape_rnn_layer, cpu_rnn_layer, grad_rnn_layer).cuda(cuda_rnn_layer),
  };
  // The op families whose rows live in their own files (op_table_row.h).
  for (std::vector<OpDef> (*family)() :
       {op_rows::math_rows, op_rows::linalg_qr_rows, op_rows::linalg_spectral_rows,
        op_rows::linalg_lu_rows, op_rows::scatter_extra_rows, op_rows::sort_search_rows,
        op_rows::internal_rows}) {
    std::vector<OpDef> more = family();
    rows.insert(rows.end(), more.begin(), more.end());
  }
  return rows;
}

}  // namespace

const std::vector<OpDef>& op_table() {
  static const std::vector<OpDef> table = build_table();
  return table;
}

const OpDef* find_op(const std::string& domain, const std::string& op_type, int64_t opset) {
  for (const OpDef& d : op_table()) {
    if (d.domain != domain || d.op_type != op_type) continue;
    // Versions of other domains are independent of the ONNX opset.
    if (!domain.empty() || (opset >= d.since_version && opset <= d.until_version)) return &d;
  }
  return nullptr;
}

std::string supported_ops_list() {
  std::vector<std::string> names;
  for (const OpDef& d : op_table())
    if (!d.internal) names.push_back(d.op_type);
  std::sort(names.begin(), names.end());
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

}  // namespace ortmodule
