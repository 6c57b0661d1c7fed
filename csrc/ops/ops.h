// Shape rules, kernels and gradient rules of every op, referenced by the op table.
#pragma once

#include <vector>

#include "ops/op_table.h"

namespace ortmodule {

class GradContext;

// conv_ops.cpp
std::vector<OutputInfo> shape_conv(const OpContext&);
void cpu_conv(OpContext&);
std::vector<OutputInfo> shape_conv_grad(const OpContext&);
void cpu_conv_grad(OpContext&);
void grad_conv(GradContext&);
std::vector<OutputInfo> shape_maxpool(const OpContext&);
void cpu_maxpool(OpContext&);
std::vector<OutputInfo> shape_pool_grad(const OpContext&);
void cpu_maxpool_grad(OpContext&);
void grad_maxpool(GradContext&);
std::vector<OutputInfo> shape_avgpool(const OpContext&);
void cpu_avgpool(OpContext&);
void cpu_avgpool_grad(OpContext&);
void grad_avgpool(GradContext&);
std::vector<OutputInfo> shape_global_avgpool(const OpContext&);
void cpu_global_avgpool(OpContext&);
void cpu_global_avgpool_grad(OpContext&);
void grad_global_avgpool(GradContext&);
std::vector<OutputInfo> shape_batchnorm(const OpContext&);
void cpu_batchnorm(OpContext&);
std::vector<OutputInfo> shape_batchnorm_grad(const OpContext&);
void cpu_batchnorm_grad(OpContext&);
void cpu_batchnorm_inference_grad(OpContext&);
void grad_batchnorm(GradContext&);
// elementwise_ops.cpp
std::vector<OutputInfo> shape_same_as_input0(const OpContext&);
std::vector<OutputInfo> shape_view_of_input0(const OpContext&);
std::vector<OutputInfo> shape_binary_broadcast(const OpContext&);
std::vector<OutputInfo> shape_variadic_broadcast(const OpContext&);
void cpu_add(OpContext&);
void cpu_sub(OpContext&);
void cpu_mul(OpContext&);
void cpu_div(OpContext&);
void cpu_pow(OpContext&);
void cpu_sum(OpContext&);
void cpu_neg(OpContext&);
void cpu_relu(OpContext&);
void cpu_sigmoid(OpContext&);
void cpu_tanh(OpContext&);
void cpu_exp(OpContext&);
void cpu_log(OpContext&);
void cpu_sqrt(OpContext&);
void cpu_erf(OpContext&);
void cpu_abs(OpContext&);
void cpu_leaky_relu(OpContext&);
void cpu_view(OpContext&);
void cpu_relu_grad(OpContext&);
void cpu_sigmoid_grad(OpContext&);
void cpu_tanh_grad(OpContext&);
void cpu_erf_grad(OpContext&);
void cpu_leaky_relu_grad(OpContext&);
void cpu_clip(OpContext&);
void cpu_clip_grad(OpContext&);
void cpu_cast(OpContext&);
std::vector<OutputInfo> shape_cast(const OpContext&);
std::vector<OutputInfo> shape_cast_like(const OpContext&);
std::vector<OutputInfo> shape_sum_to_shape(const OpContext&);
void cpu_sum_to_shape(OpContext&);
std::vector<OutputInfo> shape_scalar_like(const OpContext&);
void cpu_scalar_like(OpContext&);
std::vector<OutputInfo> shape_expand(const OpContext&);
void cpu_expand(OpContext&);
void grad_add(GradContext&);
void grad_sub(GradContext&);
void grad_mul(GradContext&);
void grad_div(GradContext&);
void grad_pow(GradContext&);
void grad_sum(GradContext&);
void grad_neg(GradContext&);
void grad_identity(GradContext&);
void grad_relu(GradContext&);
void grad_sigmoid(GradContext&);
void grad_tanh(GradContext&);
void grad_erf(GradContext&);
void grad_abs(GradContext&);
void grad_leaky_relu(GradContext&);
void grad_clip(GradContext&);
void grad_exp(GradContext&);
void grad_log(GradContext&);
void grad_sqrt(GradContext&);
void grad_cast(GradContext&);
void grad_expand(GradContext&);
// matmul_ops.cpp
std::vector<OutputInfo> shape_gemm(const OpContext&);
void cpu_gemm(OpContext&);
void grad_gemm(GradContext&);
std::vector<OutputInfo> shape_fused_matmul(const OpContext&);
void cpu_fused_matmul(OpContext&);
void grad_matmul(GradContext&);
// nn_ops.cpp
void cpu_softmax(OpContext&);
void cpu_log_softmax(OpContext&);
void cpu_softmax_grad(OpContext&);
void cpu_log_softmax_grad(OpContext&);
void grad_softmax(GradContext&);
void grad_log_softmax(GradContext&);
std::vector<OutputInfo> shape_dropout(const OpContext&);
void cpu_dropout(OpContext&);
void cpu_dropout_grad(OpContext&);
void grad_dropout(GradContext&);
std::vector<OutputInfo> shape_softmax_cross_entropy(const OpContext&);
void cpu_softmax_cross_entropy(OpContext&);
std::vector<OutputInfo> shape_softmax_cross_entropy_grad(const OpContext&);
void cpu_softmax_cross_entropy_grad(OpContext&);
void grad_softmax_cross_entropy(GradContext&);
std::vector<OutputInfo> shape_nll_loss(const OpContext&);
void cpu_nll_loss(OpContext&);
std::vector<OutputInfo> shape_nll_loss_grad(const OpContext&);
void cpu_nll_loss_grad(OpContext&);
void grad_nll_loss(GradContext&);
// reduce_ops.cpp
std::vector<OutputInfo> shape_reduce(const OpContext&);
void cpu_reduce_sum(OpContext&);
void cpu_reduce_mean(OpContext&);
std::vector<OutputInfo> shape_reduce_grad(const OpContext&);
void cpu_reduce_grad(OpContext&);
void grad_reduce_sum(GradContext&);
void grad_reduce_mean(GradContext&);
// shape_ops.cpp
std::vector<OutputInfo> shape_reshape(const OpContext&);
std::vector<OutputInfo> shape_flatten(const OpContext&);
std::vector<OutputInfo> shape_squeeze(const OpContext&);
std::vector<OutputInfo> shape_unsqueeze(const OpContext&);
void grad_reshape_like(GradContext&);
std::vector<OutputInfo> shape_transpose(const OpContext&);
void cpu_transpose(OpContext&);
void grad_transpose(GradContext&);
std::vector<OutputInfo> shape_concat(const OpContext&);
void cpu_concat(OpContext&);
std::vector<OutputInfo> shape_concat_grad(const OpContext&);
void cpu_concat_grad(OpContext&);
void grad_concat(GradContext&);
std::vector<OutputInfo> shape_constant(const OpContext&);
void cpu_constant(OpContext&);
std::vector<OutputInfo> shape_shape(const OpContext&);
void cpu_shape(OpContext&);
std::vector<OutputInfo> shape_gather(const OpContext&);
void cpu_gather(OpContext&);
std::vector<OutputInfo> shape_gather_grad(const OpContext&);
void cpu_gather_grad(OpContext&);
void grad_gather(GradContext&);

}  // namespace ortmodule
