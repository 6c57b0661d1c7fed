// The CUDA kernels the op table names (csrc/kernels/cuda/*.cu).
//
// They are declared weak: the CUDA build of the extension links their definitions, and
// every other target (the CPU build, the C++ tests, the standalone training library) links
// none, so their addresses are null there and OpDef::cuda stays empty. Only the row's
// cuda_twin flag says that the op has a CUDA kernel in a CUDA build.
#pragma once

#include "ops/op_table.h"

#define ORTM_CUDA_KERNEL(name) __attribute__((weak, visibility("hidden"))) void name(OpContext&)

namespace ortmodule {

// batchnorm.cu
ORTM_CUDA_KERNEL(cuda_batchnorm);
ORTM_CUDA_KERNEL(cuda_batchnorm_grad);
ORTM_CUDA_KERNEL(cuda_batchnorm_inference_grad);
// conv.cu
ORTM_CUDA_KERNEL(cuda_conv);
ORTM_CUDA_KERNEL(cuda_conv_grad);
// elementwise.cu
ORTM_CUDA_KERNEL(cuda_add);
ORTM_CUDA_KERNEL(cuda_sub);
ORTM_CUDA_KERNEL(cuda_mul);
ORTM_CUDA_KERNEL(cuda_div);
ORTM_CUDA_KERNEL(cuda_sum);
ORTM_CUDA_KERNEL(cuda_neg);
ORTM_CUDA_KERNEL(cuda_relu);
ORTM_CUDA_KERNEL(cuda_sigmoid);
ORTM_CUDA_KERNEL(cuda_tanh);
ORTM_CUDA_KERNEL(cuda_exp);
ORTM_CUDA_KERNEL(cuda_log);
ORTM_CUDA_KERNEL(cuda_sqrt);
ORTM_CUDA_KERNEL(cuda_erf);
ORTM_CUDA_KERNEL(cuda_abs);
ORTM_CUDA_KERNEL(cuda_gelu);
ORTM_CUDA_KERNEL(cuda_relu_grad);
ORTM_CUDA_KERNEL(cuda_sigmoid_grad);
ORTM_CUDA_KERNEL(cuda_tanh_grad);
ORTM_CUDA_KERNEL(cuda_erf_grad);
ORTM_CUDA_KERNEL(cuda_gelu_grad);
// unary.cu
ORTM_CUDA_KERNEL(cuda_sign);
ORTM_CUDA_KERNEL(cuda_sin);
ORTM_CUDA_KERNEL(cuda_cos);
ORTM_CUDA_KERNEL(cuda_reciprocal);
ORTM_CUDA_KERNEL(cuda_softplus);
ORTM_CUDA_KERNEL(cuda_floor);
ORTM_CUDA_KERNEL(cuda_ceil);
ORTM_CUDA_KERNEL(cuda_leaky_relu);
ORTM_CUDA_KERNEL(cuda_leaky_relu_grad);
ORTM_CUDA_KERNEL(cuda_clip);
ORTM_CUDA_KERNEL(cuda_clip_grad);
ORTM_CUDA_KERNEL(cuda_scale);
// logic.cu
ORTM_CUDA_KERNEL(cuda_equal);
ORTM_CUDA_KERNEL(cuda_less);
ORTM_CUDA_KERNEL(cuda_greater);
ORTM_CUDA_KERNEL(cuda_less_or_equal);
ORTM_CUDA_KERNEL(cuda_greater_or_equal);
ORTM_CUDA_KERNEL(cuda_not);
ORTM_CUDA_KERNEL(cuda_and);
ORTM_CUDA_KERNEL(cuda_or);
ORTM_CUDA_KERNEL(cuda_xor);
ORTM_CUDA_KERNEL(cuda_isnan);
ORTM_CUDA_KERNEL(cuda_isinf);
ORTM_CUDA_KERNEL(cuda_where);
ORTM_CUDA_KERNEL(cuda_max);
ORTM_CUDA_KERNEL(cuda_min);
ORTM_CUDA_KERNEL(cuda_mod);
ORTM_CUDA_KERNEL(cuda_pow);
// cast.cu
ORTM_CUDA_KERNEL(cuda_cast);
// creation.cu
ORTM_CUDA_KERNEL(cuda_zeros_like);
ORTM_CUDA_KERNEL(cuda_scalar_like);
ORTM_CUDA_KERNEL(cuda_inplace_accumulator);
// fused_elementwise.cu
ORTM_CUDA_KERNEL(cuda_fused_elementwise);
// matmul.cu
ORTM_CUDA_KERNEL(cuda_fused_matmul);
ORTM_CUDA_KERNEL(cuda_gemm);
// pool.cu
ORTM_CUDA_KERNEL(cuda_maxpool);
ORTM_CUDA_KERNEL(cuda_maxpool_grad);
ORTM_CUDA_KERNEL(cuda_avgpool);
ORTM_CUDA_KERNEL(cuda_avgpool_grad);
ORTM_CUDA_KERNEL(cuda_global_avgpool);
ORTM_CUDA_KERNEL(cuda_global_avgpool_grad);
// reduce.cu
ORTM_CUDA_KERNEL(cuda_sum_to_shape);
// reduce_axes.cu
ORTM_CUDA_KERNEL(cuda_reduce_sum);
ORTM_CUDA_KERNEL(cuda_reduce_mean);
ORTM_CUDA_KERNEL(cuda_reduce_max);
ORTM_CUDA_KERNEL(cuda_reduce_min);
ORTM_CUDA_KERNEL(cuda_reduce_grad);
ORTM_CUDA_KERNEL(cuda_reduce_extreme_grad);
ORTM_CUDA_KERNEL(cuda_arg_max);
ORTM_CUDA_KERNEL(cuda_arg_min);
// fused_matmul.cu
ORTM_CUDA_KERNEL(cuda_fused_matmul_bias);
ORTM_CUDA_KERNEL(cuda_fused_matmul_sum);
// layernorm.cu
ORTM_CUDA_KERNEL(cuda_layernorm);
ORTM_CUDA_KERNEL(cuda_layernorm_grad);
ORTM_CUDA_KERNEL(cuda_simplified_layernorm);
ORTM_CUDA_KERNEL(cuda_simplified_layernorm_grad);
// loss.cu
ORTM_CUDA_KERNEL(cuda_nll_loss);
ORTM_CUDA_KERNEL(cuda_nll_loss_grad);
ORTM_CUDA_KERNEL(cuda_softmax_cross_entropy);
ORTM_CUDA_KERNEL(cuda_softmax_cross_entropy_grad);
// attention.cu
ORTM_CUDA_KERNEL(cuda_scaled_masked_softmax);
ORTM_CUDA_KERNEL(cuda_scaled_masked_softmax_grad);
// fused_attention.cu
ORTM_CUDA_KERNEL(cuda_fused_attention);
ORTM_CUDA_KERNEL(cuda_fused_attention_grad);
// dropout.cu
ORTM_CUDA_KERNEL(cuda_dropout);
ORTM_CUDA_KERNEL(cuda_dropout_legacy);
ORTM_CUDA_KERNEL(cuda_dropout_grad);
// softmax.cu
ORTM_CUDA_KERNEL(cuda_softmax);
ORTM_CUDA_KERNEL(cuda_log_softmax);
ORTM_CUDA_KERNEL(cuda_softmax_grad);
ORTM_CUDA_KERNEL(cuda_log_softmax_grad);
// layout.cu
ORTM_CUDA_KERNEL(cuda_transpose);
ORTM_CUDA_KERNEL(cuda_expand);
ORTM_CUDA_KERNEL(cuda_tile);
ORTM_CUDA_KERNEL(cuda_tile_grad);
ORTM_CUDA_KERNEL(cuda_trilu);
ORTM_CUDA_KERNEL(cuda_cumsum);
// slice_pad.cu
ORTM_CUDA_KERNEL(cuda_slice);
ORTM_CUDA_KERNEL(cuda_slice_grad);
ORTM_CUDA_KERNEL(cuda_concat);
ORTM_CUDA_KERNEL(cuda_concat_grad);
ORTM_CUDA_KERNEL(cuda_split);
ORTM_CUDA_KERNEL(cuda_pad);
ORTM_CUDA_KERNEL(cuda_pad_grad);
// gather.cu
ORTM_CUDA_KERNEL(cuda_gather);
ORTM_CUDA_KERNEL(cuda_gather_grad);
ORTM_CUDA_KERNEL(cuda_embedding_grad);
// index.cu
ORTM_CUDA_KERNEL(cuda_gather_elements);
ORTM_CUDA_KERNEL(cuda_gather_elements_grad);
ORTM_CUDA_KERNEL(cuda_scatter_elements);
ORTM_CUDA_KERNEL(cuda_gather_nd);
ORTM_CUDA_KERNEL(cuda_gather_nd_grad);
ORTM_CUDA_KERNEL(cuda_scatter_nd);
ORTM_CUDA_KERNEL(cuda_nonzero);

}  // namespace ortmodule
