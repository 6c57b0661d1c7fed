// Helpers shared by the op files: dtype dispatch, broadcasting, axis handling.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/math/matmul_epilogue.h"
#include "ops/op_table.h"

namespace ortmodule {

// One case of a dtype switch: binds `scalar_t` to TYPE and runs the body.
#define ORTM_DTYPE_CASE(ENUM, TYPE, ...) \
  case DType::ENUM: {                    \
    using scalar_t = TYPE;               \
    (void)sizeof(scalar_t);              \
    __VA_ARGS__;                         \
    break;                               \
  }

// Runs the body with `scalar_t` bound to the C++ type of DTYPE (floating types only).
#define ORTM_DISPATCH_FLOAT(DTYPE, CTX, ...)                                             \
  switch (DTYPE) {                                                                       \
    ORTM_DTYPE_CASE(Float32, float, __VA_ARGS__)                                         \
    ORTM_DTYPE_CASE(Float64, double, __VA_ARGS__)                                        \
    default:                                                                             \
      (CTX).fail("dtype " + dtype_name(DTYPE) + " is not supported (float32, float64)"); \
  }

// Floating types plus every integer type.
#define ORTM_DISPATCH_NUMERIC(DTYPE, CTX, ...)                                               \
  switch (DTYPE) {                                                                           \
    ORTM_DTYPE_CASE(Float32, float, __VA_ARGS__)                                             \
    ORTM_DTYPE_CASE(Float64, double, __VA_ARGS__)                                            \
    ORTM_DTYPE_CASE(Int64, int64_t, __VA_ARGS__)                                             \
    ORTM_DTYPE_CASE(Int32, int32_t, __VA_ARGS__)                                             \
    ORTM_DTYPE_CASE(Int16, int16_t, __VA_ARGS__)                                             \
    ORTM_DTYPE_CASE(Int8, int8_t, __VA_ARGS__)                                               \
    ORTM_DTYPE_CASE(UInt64, uint64_t, __VA_ARGS__)                                           \
    ORTM_DTYPE_CASE(UInt32, uint32_t, __VA_ARGS__)                                           \
    ORTM_DTYPE_CASE(UInt16, uint16_t, __VA_ARGS__)                                           \
    ORTM_DTYPE_CASE(UInt8, uint8_t, __VA_ARGS__)                                             \
    default:                                                                                 \
      (CTX).fail("dtype " + dtype_name(DTYPE) +                                              \
                 " is not supported (float32, float64 and the 8- to 64-bit integer types)"); \
  }

// Every dtype the engine computes with, bool included (stored as uint8_t). float16 and
// bfloat16 compute in float32 (passes/low_precision), so kernels never see them here.
#define ORTM_DISPATCH_ALL(DTYPE, CTX, ...)                                                      \
  switch (DTYPE) {                                                                              \
    ORTM_DTYPE_CASE(Float32, float, __VA_ARGS__)                                                \
    ORTM_DTYPE_CASE(Float64, double, __VA_ARGS__)                                               \
    ORTM_DTYPE_CASE(Int64, int64_t, __VA_ARGS__)                                                \
    ORTM_DTYPE_CASE(Int32, int32_t, __VA_ARGS__)                                                \
    ORTM_DTYPE_CASE(Int16, int16_t, __VA_ARGS__)                                                \
    ORTM_DTYPE_CASE(Int8, int8_t, __VA_ARGS__)                                                  \
    ORTM_DTYPE_CASE(UInt64, uint64_t, __VA_ARGS__)                                              \
    ORTM_DTYPE_CASE(UInt32, uint32_t, __VA_ARGS__)                                              \
    ORTM_DTYPE_CASE(UInt16, uint16_t, __VA_ARGS__)                                              \
    ORTM_DTYPE_CASE(UInt8, uint8_t, __VA_ARGS__)                                                \
    ORTM_DTYPE_CASE(Bool, uint8_t, __VA_ARGS__)                                                 \
    default:                                                                                    \
      (CTX).fail("dtype " + dtype_name(DTYPE) +                                                 \
                 " is not supported (float32, float64, the 8- to 64-bit integer types, bool)"); \
  }

// Kernels that only move elements: binds `scalar_t` to an unsigned integer of the
// element's width, so every dtype (float16 and bfloat16 included) moves bit for bit.
#define ORTM_DISPATCH_BITS(DTYPE, CTX, ...)                                                   \
  switch (dtype_size(DTYPE)) {                                                                \
    case 1: {                                                                                 \
      using scalar_t = uint8_t;                                                               \
      __VA_ARGS__;                                                                            \
      break;                                                                                  \
    }                                                                                         \
    case 2: {                                                                                 \
      using scalar_t = uint16_t;                                                              \
      __VA_ARGS__;                                                                            \
      break;                                                                                  \
    }                                                                                         \
    case 4: {                                                                                 \
      using scalar_t = uint32_t;                                                              \
      __VA_ARGS__;                                                                            \
      break;                                                                                  \
    }                                                                                         \
    case 8: {                                                                                 \
      using scalar_t = uint64_t;                                                              \
      __VA_ARGS__;                                                                            \
      break;                                                                                  \
    }                                                                                         \
    default:                                                                                  \
      (CTX).fail("dtype " + dtype_name(DTYPE) + " has no element width the kernel can move"); \
  }

// Numpy-style broadcast of two shapes; fails naming the node on mismatch.
Shape broadcast_shapes(const OpContext& ctx, const Shape& a, const Shape& b);
// Normalises a possibly negative axis against `rank`; fails naming the node.
int64_t normalize_axis(const OpContext& ctx, int64_t axis, int64_t rank);
// Like normalize_axis, but the axis must index an existing dim (rank >= 1); `what` names
// the attribute or input it came from.
int64_t check_axis(const OpContext& ctx, int64_t axis, int64_t rank, const std::string& what);
// Normalised axes, each in range and none repeated (ONNX forbids duplicates).
std::vector<int64_t> check_axes(const OpContext& ctx, const std::vector<int64_t>& axes,
                                int64_t rank, const std::string& what);
// `perm` must be a permutation of [0, rank).
void check_perm(const OpContext& ctx, const std::vector<int64_t>& perm, size_t rank,
                const std::string& what);
// Every entry of `values` must be > 0 (strides, dilations, kernel sizes).
void check_positive(const OpContext& ctx, const std::vector<int64_t>& values,
                    const std::string& what);
// Every entry of `values` must be >= 0 (pads).
void check_non_negative(const OpContext& ctx, const std::vector<int64_t>& values,
                        const std::string& what);
// A shape computed from attributes or shape-tensor inputs: dims >= 0 and a product that
// fits int64; `what` names where it came from. Returns the element count.
int64_t check_shape(const OpContext& ctx, const Shape& shape, const std::string& what);
// a * b, failing (naming `what`) when it overflows int64; a, b >= 0.
int64_t checked_mul(const OpContext& ctx, int64_t a, int64_t b, const std::string& what);
// Input k must have dtype equal to input 0's.
void expect_same_dtype(const OpContext& ctx, size_t k);
// Gelu and its gradients: true for the tanh approximation (attribute approximate="tanh", or
// com.microsoft FastGeluGrad), false for the exact erf form.
bool gelu_is_tanh(const OpContext& ctx);
// ClipGrad's attribute exclusive=1: the gradient passes strictly inside the bounds (HardTanh).
bool clip_grad_exclusive(const OpContext& ctx);
// The ELU family (Elu, Selu, Celu, ai.ortmodule ScaledElu and EluGrad) as aten.elu's parameters:
// x > 0 ? scale x : alpha scale (exp(input_scale x) - 1).
struct EluParams {
  double alpha, scale, input_scale;
};
EluParams elu_params(const Node& node);
// HardSigmoid(Grad)'s alpha and beta (defaults 0.2 and 0.5); the gradient's kinks
// -beta/alpha and (1-beta)/alpha in the attributes' float precision.
struct HardSigmoidParams {
  float alpha, beta, lower, upper;
};
HardSigmoidParams hard_sigmoid_params(const Node& node);
// Softmax, LogSoftmax and their gradients: the shape `s` viewed as [outer, dim, inner] along
// the node's axis (coerced to 2-D at the axis for the rows before opset 13).
void softmax_layout(const OpContext& ctx, const Shape& s, int64_t* outer, int64_t* dim,
                    int64_t* inner);
// ---- attribute readers shared by an op's CPU and CUDA kernels (defined in its *_ops.cpp) ----
// Polygamma's order n (attribute "n", default 0; gamma_ops.cpp).
int64_t polygamma_order(const Node& node);
// ReduceSum/Mean/Max/Min and their gradients: the input shape with every reduced dim set to 1
// (axes from input `axes_input` or the attribute; keepdims, noop_with_empty_axes), and the
// number of elements reduced into each output.
Shape reduce_keep_shape(const OpContext& ctx, const Shape& in, size_t axes_input, int64_t* count);
// TopK: K (input 1, one value in [0, dim], dim the size of the axis).
int64_t topk_k(const OpContext& ctx, int64_t dim);
// LayerNormalization(Grad): rows = prod(x[:axis]), cols = prod(x[axis:]) (scale must hold cols).
void layernorm_dims(const OpContext& ctx, const Tensor& x, const Tensor& scale, int64_t* axis,
                    int64_t* rows, int64_t* cols);
// Dropout: the ratio (input `index`, else the attribute; in [0, 1)), training_mode (input
// `index`), and the node's stream seed for kernels/math/random.h.
double dropout_ratio(const OpContext& ctx, size_t index);
bool dropout_training(const OpContext& ctx, size_t index);
uint64_t dropout_stream_seed(const OpContext& ctx);
// FusedMatMulBias: attribute activation.
MatMulActivation matmul_activation(const OpContext& ctx);

// Single output with the given dtype and shape.
std::vector<OutputInfo> one_output(DType dtype, Shape shape);
// Product of dims [begin, end).
int64_t dims_product(const Shape& s, size_t begin, size_t end);

// Copies [outer, rows_i * inner] blocks between a tensor of shape `full` and its
// parts along `axis` (sizes[i] rows each): to_whole concatenates, else splits.
void concat_copy(const Shape& full, int64_t axis, const std::vector<int64_t>& sizes,
                 std::vector<char*> parts, char* whole, size_t elem, bool to_whole);

}  // namespace ortmodule
