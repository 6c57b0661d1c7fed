// The op table's rows for ops that gradient rules, graph rewrites and on-device training
// graphs emit (internal rows and ONNX Runtime Training's ops); op_table.cpp lists the ops the
// exporters emit and appends these.
#include "ops/cuda_ops.h"
#include "ops/op_table_row.h"
#include "ops/ops.h"

namespace ortmodule {
namespace op_rows {

std::vector<OpDef> internal_rows() {
  return {
      // ---- ops emitted by gradient rules ----
      Row(kMs, "ReluGrad", 1, shape_same_as_input0, cpu_relu_grad, nullptr)
          .cuda(cuda_relu_grad)
          .internal()
          .inplace(0),
      Row(kMs, "SigmoidGrad", 1, shape_same_as_input0, cpu_sigmoid_grad, nullptr)
          .cuda(cuda_sigmoid_grad)
          .internal()
          .inplace(0),
      Row(kMs, "TanhGrad", 1, shape_same_as_input0, cpu_tanh_grad, nullptr)
          .cuda(cuda_tanh_grad)
          .internal()
          .inplace(0),
      Row(kMs, "LeakyReluGrad", 1, shape_same_as_input0, cpu_leaky_relu_grad, nullptr)
          .cuda(cuda_leaky_relu_grad)
          .internal()
          .inplace(0),
      Row(kOwn, "ErfGrad", 1, shape_same_as_input0, cpu_erf_grad, nullptr)
          .cuda(cuda_erf_grad)
          .internal()
          .inplace(0),
      Row(kOwn, "ClipGrad", 1, shape_same_as_input0, cpu_clip_grad, nullptr)
          .cuda(cuda_clip_grad, {2, 3})
          .internal()
          .inplace(0),
      // ---- gradients of the activation family (activation_family_ops.cpp) ----
      Row(kOwn, "EluGrad", 1, shape_same_as_input0, cpu_elu_grad, nullptr)
          .cuda(cuda_elu_grad)
          .internal()
          .inplace(0),
      Row(kOwn, "HardSigmoidGrad", 1, shape_same_as_input0, cpu_hard_sigmoid_grad, nullptr)
          .cuda(cuda_hard_sigmoid_grad)
          .internal()
          .inplace(0),
      Row(kOwn, "HardSwishGrad", 1, shape_same_as_input0, cpu_hard_swish_grad, nullptr)
          .cuda(cuda_hard_swish_grad)
          .internal()
          .inplace(0),
      Row(kOwn, "MishGrad", 1, shape_same_as_input0, cpu_mish_grad, nullptr)
          .cuda(cuda_mish_grad)
          .internal()
          .inplace(0),
      Row(kMs, "SoftmaxGrad_13", 1, shape_same_as_input0, cpu_softmax_grad, nullptr)
          .cuda(cuda_softmax_grad)
          .internal(),
      Row(kMs, "SoftmaxGrad", 1, shape_same_as_input0, cpu_softmax_grad, nullptr)
          .cuda(cuda_softmax_grad)
          .internal(),
      Row(kMs, "LogSoftmaxGrad", 1, shape_same_as_input0, cpu_log_softmax_grad, nullptr)
          .cuda(cuda_log_softmax_grad)
          .internal(),
      Row(kOwn, "FusedElementwise", 1, shape_fused_elementwise, cpu_fused_elementwise, nullptr)
          .cuda(cuda_fused_elementwise)
          .internal(),
      Row(kOwn, "ScaledMaskedSoftmaxGrad", 1, shape_scaled_masked_softmax_grad,
          cpu_scaled_masked_softmax_grad, nullptr)
          .cuda(cuda_scaled_masked_softmax_grad)
          .internal()
          .inplace(0),
      Row(kOwn, "FusedAttentionGrad", 1, shape_fused_attention_grad, cpu_fused_attention_grad,
          nullptr)
          .cuda(cuda_fused_attention_grad, {6})
          .internal(),
      Row(kMs, "LogSoftmaxGrad_13", 1, shape_same_as_input0, cpu_log_softmax_grad, nullptr)
          .cuda(cuda_log_softmax_grad)
          .internal(),
      Row(kMs, "ConvGrad", 1, shape_conv_grad, cpu_conv_grad, nullptr)
          .cuda(cuda_conv_grad)
          .internal(),
      Row(kMs, "BatchNormInternal", 1, shape_batchnorm, cpu_batchnorm, nullptr)
          .cuda(cuda_batchnorm)
          .internal()
          .writeback({{1, 3}, {2, 4}}),
      Row(kMs, "BatchNormalizationGrad", 1, shape_batchnorm_grad, cpu_batchnorm_grad, nullptr)
          .cuda(cuda_batchnorm_grad)
          .internal(),
      Row(kOwn, "BatchNormInferenceGrad", 1, shape_batchnorm_grad, cpu_batchnorm_inference_grad,
          nullptr)
          .cuda(cuda_batchnorm_inference_grad)
          .internal(),
      Row(kMs, "LayerNormalizationGrad", 1, shape_layernorm_grad, cpu_layernorm_grad, nullptr)
          .cuda(cuda_layernorm_grad)
          .internal(),
      Row(kOwn, "SiluMulGrad", 1, shape_silu_mul_grad, cpu_silu_mul_grad, nullptr)
          .cuda(cuda_silu_mul_grad)
          .internal(),
      Row(kMs, "SimplifiedLayerNormalizationGrad", 1, shape_simplified_layernorm_grad,
          cpu_simplified_layernorm_grad, nullptr)
          .cuda(cuda_simplified_layernorm_grad)
          .internal(),
      Row(kMs, "DropoutGrad", 1, shape_same_as_input0, cpu_dropout_grad, nullptr)
          .cuda(cuda_dropout_grad, {2, 3})
          .internal()
          .inplace(0),
      Row(kMs, "SoftmaxCrossEntropyLossGrad", 1, shape_softmax_cross_entropy_grad,
          cpu_softmax_cross_entropy_grad, nullptr)
          .cuda(cuda_softmax_cross_entropy_grad)
          .internal(),
      Row(kOwn, "FusedLinearCrossEntropyGrad", 1, shape_fused_linear_cross_entropy_grad,
          cpu_fused_linear_cross_entropy_grad, nullptr)
          .cuda(cuda_fused_linear_cross_entropy_grad)
          .internal(),
      Row(kMs, "GatherGrad", 1, shape_gather_grad, cpu_gather_grad, nullptr)
          .cuda(cuda_gather_grad, {0})
          .internal(),
      Row(kOwn, "GeluGrad", 1, shape_gelu_grad, cpu_gelu_grad, nullptr)
          .cuda(cuda_gelu_grad)
          .internal()
          .inplace(0),
      Row(kMs, "GeluGrad", 1, shape_same_as_input0, cpu_gelu_grad, nullptr)
          .cuda(cuda_gelu_grad)
          .internal()
          .inplace(0),
      Row(kMs, "FastGeluGrad", 1, shape_same_as_input0, cpu_gelu_grad, nullptr)
          .cuda(cuda_gelu_grad)
          .internal()
          .inplace(0),
      Row(kOwn, "ZerosLike", 1, shape_zeros_like, cpu_zeros_like, nullptr)
          .cuda(cuda_zeros_like)
          .internal(),
      Row(kOwn, "SliceGrad", 1, shape_slice_grad, cpu_slice_grad, nullptr)
          .cuda(cuda_slice_grad, {1, 2, 3, 4, 5})
          .internal(),
      Row(kMs, "SliceGrad", 1, shape_slice_grad, cpu_slice_grad, nullptr)
          .cuda(cuda_slice_grad, {1, 2, 3, 4, 5})
          .internal(),
      Row(kOwn, "TileGrad", 1, shape_tile_grad, cpu_tile_grad, nullptr)
          .cuda(cuda_tile_grad, {1})
          .internal(),
      Row(kOwn, "PadGrad", 1, shape_pad_grad, cpu_pad_grad, nullptr)
          .cuda(cuda_pad_grad, {1, 2, 3, 4})
          .internal(),
      Row(kMs, "GatherElementsGrad", 1, shape_gather_elements_grad, cpu_gather_elements_grad,
          nullptr)
          .cuda(cuda_gather_elements_grad, {1})
          .internal(),
      Row(kMs, "GatherNDGrad", 1, shape_gather_nd_grad, cpu_gather_nd_grad, nullptr)
          .cuda(cuda_gather_nd_grad, {0})
          .internal(),
      Row(kOwn, "EmbeddingGrad", 1, shape_gather_grad, cpu_embedding_grad, nullptr)
          .cuda(cuda_embedding_grad, {0})
          .internal(),
      // As TorchCall; its input 0 is the forward call's opaque state (no data), which stays on
      // the host rather than being copied to the device.
      Row(kOwn, "TorchCallGrad", 1, shape_torch_call, cpu_torch_call_grad, nullptr)
          .cuda(cpu_torch_call_grad, {0})
          .internal()
          .host_call(),
      // ---- recurrent layers: backpropagation through time (ops/rnn_layer.h) ----
      Row(kOwn, "LSTMTorchGrad", 1, shape_rnn_layer_grad, cpu_rnn_layer_grad, nullptr)
          .cuda(cuda_rnn_layer_grad)
          .internal(),
      Row(kOwn, "GRUTorchGrad", 1, shape_rnn_layer_grad, cpu_rnn_layer_grad, nullptr)
          .cuda(cuda_rnn_layer_grad)
          .internal(),
      Row(kOwn, "RNNTorchGrad", 1, shape_rnn_layer_grad, cpu_rnn_layer_grad, nullptr)
          .cuda(cuda_rnn_layer_grad)
          .internal(),
      // ---- on-device training graphs (ONNX Runtime Training's ops) ----
      // The overwrite flag (one bool) is read on the host, as ONNX Runtime reads it.
      Row(kMs, "InPlaceAccumulatorV2", 1, shape_inplace_accumulator, cpu_inplace_accumulator,
          nullptr)
          .cuda(cuda_inplace_accumulator, {2})
          .not_differentiable(),
      // Pure shape arithmetic on two int64 shape tensors, whose results (axes) feed host inputs
      // (ReduceSum's axes, Reshape's shape): it computes on the host like Shape, bringing shape
      // tensors that live on a device to the host. It reads values, not only shapes, so it is
      // runs_on_host rather than reads_shapes_only.
      Row(kMs, "BroadcastGradientArgs", 1, shape_broadcast_gradient_args,
          cpu_broadcast_gradient_args, nullptr)
          .runs_on_host()
          .not_differentiable(),
      // The scale (one value) is read on the host, as the CPU kernel reads it.
      Row(kMs, "Scale", 1, shape_scale, cpu_scale, grad_scale).cuda(cuda_scale, {1}),
      Row(kOwn, "SumToShape", 1, shape_sum_to_shape, cpu_sum_to_shape, nullptr)
          .cuda(cuda_sum_to_shape, {1})
          .internal(),
      Row(kOwn, "FusedMatMulSumToShape", 1, shape_fused_matmul_sum, cpu_fused_matmul_sum, nullptr)
          .cuda(cuda_fused_matmul_sum, {2})
          .internal(),
      Row(kOwn, "FusedMatMulBias", 1, shape_fused_matmul_bias, cpu_fused_matmul_bias, nullptr)
          .cuda(cuda_fused_matmul_bias)
          .internal(),
      Row(kOwn, "ScalarLike", 1, shape_scalar_like, cpu_scalar_like, nullptr)
          .cuda(cuda_scalar_like)
          .internal(),
      Row(kOwn, "ConcatGrad", 1, shape_concat_grad, cpu_concat_grad, nullptr)
          .cuda(cuda_concat_grad)
          .cuda_host_inputs_from(1)
          .internal(),
      Row(kOwn, "ReduceGrad", 1, shape_reduce_grad, cpu_reduce_grad, nullptr)
          .cuda(cuda_reduce_grad, {1, 2})
          .internal(),
      // The pool gradients read the input's shape (their last input) on the host.
      Row(kOwn, "MaxPoolGrad", 1, shape_pool_grad, cpu_maxpool_grad, nullptr)
          .cuda(cuda_maxpool_grad, {2})
          .internal(),
      Row(kOwn, "AveragePoolGrad", 1, shape_pool_grad, cpu_avgpool_grad, nullptr)
          .cuda(cuda_avgpool_grad, {1})
          .internal(),
      Row(kOwn, "GlobalAveragePoolGrad", 1, shape_pool_grad, cpu_global_avgpool_grad, nullptr)
          .cuda(cuda_global_avgpool_grad, {1})
          .internal(),
      Row(kOwn, "NegativeLogLikelihoodLossGrad", 1, shape_nll_loss_grad, cpu_nll_loss_grad, nullptr)
          .cuda(cuda_nll_loss_grad, {1})
          .internal(),
      // ---- Resampling and per-sample normalization ----
      // ResizeGrad(dY, x_shape, the forward's inputs 1...): x_shape and the forward's roi,
      // scales and sizes are read on the host.
      Row(kOwn, "ResizeGrad", 1, shape_resize_grad, cpu_resize_grad, nullptr)
          .cuda(cuda_resize_grad, {1, 2, 3, 4})
          .internal(),
      Row(kOwn, "GroupNormGrad", 1, shape_groupnorm_grad, cpu_groupnorm_grad, nullptr)
          .cuda(cuda_groupnorm_grad)
          .internal(),
  };
}

}  // namespace op_rows
}  // namespace ortmodule
