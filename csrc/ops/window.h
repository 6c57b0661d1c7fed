// Window geometry shared by Conv and the pooling ops (see window.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/pool.h"
#include "ops/op_table.h"

namespace ortmodule {

// Spatial geometry shared by Conv and pooling: 1-D inputs become H = 1.
struct Window {
  int64_t N, C, H, W, kH, kW, outH, outW;
  int64_t stride_h, stride_w, pad_top, pad_left, dil_h, dil_w;
  bool one_d;
  int64_t pad_bottom, pad_right;
};

// Window attributes read from the node (defaults for absent ones), checked, with auto_pad
// resolved into pads.
struct WindowAttrs {
  std::vector<int64_t> kernel, strides, dilations, pads;
};

int64_t out_extent(int64_t in, int64_t k, int64_t stride, int64_t pad_begin, int64_t pad_end,
                   int64_t dil, bool ceil_mode);
// Lengths match the spatial rank, kernel/strides/dilations positive, pads non-negative, and
// every value small enough to keep the window arithmetic in int64.
void check_window_attrs(const OpContext& ctx, size_t sd, const std::vector<int64_t>& kernel,
                        const std::vector<int64_t>& strides, const std::vector<int64_t>& dil,
                        const std::vector<int64_t>& pads);
WindowAttrs read_window_attrs(const OpContext& ctx, const Shape& x, std::vector<int64_t> kernel);
Window make_window(const OpContext& ctx, const Shape& x, std::vector<int64_t> kernel);
Shape window_out_shape(const Window& w, int64_t channels);
// Pooling windows must overlap the input: each pad smaller than the (dilated) kernel.
Window make_pool_window(const OpContext& ctx, const Shape& x);
// divisor_override: ai.ortmodule AveragePoolTorch's attribute (0, none, elsewhere).
Pool2dParams pool_params(const Window& w, bool count_include_pad, int64_t divisor_override = 0);
// AveragePoolTorch's divisor_override attribute (torch's avg_pool divisor_override), checked
// positive; 0 where the node has none (ONNX AveragePool).
int64_t pool_divisor_override(const OpContext& ctx);
bool is_pool3d(const Shape& x);
Pool3dParams make_pool3d(const OpContext& ctx, const Shape& x, bool count_include_pad,
                         int64_t divisor_override = 0);
Shape pool3d_out_shape(const Pool3dParams& p);
// MaxPool storage_order=1: row-major positions in [N, C, spatial...] to column-major, or back.
void convert_storage_order(const Shape& x, int64_t* indices, int64_t count, bool to_column);
// Conv's geometry for x: [N, C, spatial...] and its weight, checked as the CPU kernels check
// it, with 1-D and 2-D inputs as 3-D ones whose leading spatial dims are 1 (the CUDA kernels
// take every rank through this one form).
Conv3dParams conv_geometry(const OpContext& ctx, const Shape& x, const Shape& weight);
// ConvTranspose(X, W)'s geometry as the Conv it transposes (ops/conv_transpose_ops.cpp): the
// Conv whose input has Y's shape and whose output has X's, in the same 3-D form.
Conv3dParams conv_transpose_geometry(const OpContext& ctx);
// Copies the attributes that define the window geometry onto a gradient node.
void copy_window_attrs(const Node& from, Node* to);

}  // namespace ortmodule
