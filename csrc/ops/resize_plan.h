// The geometry of a Resize (ONNX), a ResizeTorch (PyTorch's upsample_* rules) or their
// ResizeGrad: per-axis tap tables built on the host from the node's attributes and its
// scales/sizes inputs, shared by the CPU kernels and the CUDA twins (resize_ops.cpp).
#pragma once

#include <cstdint>
#include <vector>

#include "ir/graph.h"
#include "kernels/math/resize.h"
#include "ops/op_table.h"

namespace ortmodule {

// Output coordinate o of one axis reads taps input positions index[o * taps + k] (clamped into
// the input) with weights weight[o * taps + k].
struct ResizeAxisTable {
  int64_t in = 1, out = 1, taps = 1;
  std::vector<int64_t> index{0};
  std::vector<double> weight{1.0};
  bool identity = false;  // an axis the node leaves alone (no tables built)
};

// The same table inverted: the outputs (ascending) that read each input position.
struct ResizeAxisAdjoint {
  std::vector<int64_t> offset, output;
  std::vector<double> weight;
};

struct ResizePlan {
  Shape in_shape, out_shape;
  // The leading axes that the resize leaves alone folded into planes; the (at most three)
  // trailing axes it resamples, padded in front with unit axes.
  int64_t planes = 1;
  ResizeAxisTable axes[3];
  ResizeAxisAdjoint adjoint[3];  // filled by build_adjoint (for ResizeGrad)
  // The geometries over this plan's tables (valid while the plan lives).
  ResizeGeometry geometry() const;
  void build_adjoint();
  ResizeAdjointGeometry adjoint_geometry() const;
};

// The plan of a Resize/ResizeTorch node (x: its input's shape), or of a ResizeGrad node (x:
// its x_shape input; the forward node's inputs follow it). Fails naming what is unsupported.
ResizePlan resize_plan(const OpContext& ctx, const Shape& x);

}  // namespace ortmodule
