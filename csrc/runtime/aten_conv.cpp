// Convolutions through torch's at::convolution / at::convolution_backward (see aten_conv.h).
// The engine's buffers are wrapped as tensors without copying; torch writes its results into
// tensors of its own (its CUDA caching allocator, torch's current stream: the stream the
// engine's kernels run on), which are copied into the engine's outputs on the same stream.
#include "runtime/aten_conv.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/InferenceMode.h>

#include <array>
#include <stdexcept>
#include <string>
#include <vector>

namespace ortmodule {

namespace {

at::ScalarType scalar_type(DType dtype) {
  switch (dtype) {
    case DType::Float32:
      return at::kFloat;
    case DType::Float64:
      return at::kDouble;
    case DType::Float16:
      return at::kHalf;
    case DType::BFloat16:
      return at::kBFloat16;
    default:
      throw std::invalid_argument("Conv through torch: dtype " + dtype_name(dtype) +
                                  " is not a floating type torch convolves");
  }
}

at::Device torch_device(Device d) {
  return d.is_cuda() ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(d.index))
                     : at::Device(at::kCPU);
}

// ATen's output extent for pad `pad` at both ends (0 where no cell fits).
int64_t aten_extent(int64_t in, int64_t k, int64_t stride, int64_t pad, int64_t dil) {
  const int64_t span = in + 2 * pad - dil * (k - 1) - 1;
  return span < 0 ? 0 : span / stride + 1;
}

// The sizes and window arguments of one convolution in torch's terms.
struct Geometry {
  std::vector<int64_t> x, w, y, stride, pad, dil;
  int64_t groups = 1;
  at::TensorOptions options;
};

Geometry geometry(const AtenConv& c) {
  if (c.spatial_rank < 1 || c.spatial_rank > 3) {
    throw std::invalid_argument("Conv through torch: spatial rank " +
                                std::to_string(c.spatial_rank) + " is not 1, 2 or 3");
  }
  if (!aten_conv_fits(c.p)) {
    throw std::invalid_argument(
        "Conv through torch: the geometry pads the two ends of an axis differently (or is "
        "empty), which torch's convolution does not compute");
  }
  const Conv3dParams& p = c.p;
  Geometry g;
  g.x = {p.N, p.C};
  g.w = {p.M, p.C / p.group};
  g.y = {p.N, p.M};
  for (int i = 3 - c.spatial_rank; i < 3; ++i) {
    g.x.push_back(p.in[i]);
    g.w.push_back(p.kernel[i]);
    g.y.push_back(p.out[i]);
    g.stride.push_back(p.stride[i]);
    g.pad.push_back(p.pad_begin[i]);
    g.dil.push_back(p.dilation[i]);
  }
  g.groups = p.group;
  g.options = at::TensorOptions().dtype(scalar_type(c.dtype)).device(torch_device(c.device));
  return g;
}

at::Tensor wrap(const void* data, const std::vector<int64_t>& sizes,
                const at::TensorOptions& options) {
  return at::from_blob(const_cast<void*>(data), sizes, options);
}

// Runs `fn` with the convolution's device current and autograd off, rethrowing torch's
// errors as std::runtime_error that say where they came from.
template <typename Fn>
void run_in_torch(const AtenConv& c, const char* what, Fn&& fn) {
  try {
    const c10::DeviceGuard guard(torch_device(c.device));
    const c10::InferenceMode no_autograd;
    fn();
  } catch (const c10::Error& e) {
    throw std::runtime_error(std::string(what) + " failed in torch's convolution on " +
                             c.device.str() + ": " + e.what_without_backtrace());
  }
}

}  // namespace

bool aten_conv_fits(const Conv3dParams& p) {
  if (p.N <= 0 || p.C <= 0 || p.M <= 0 || p.group <= 0) return false;
  for (int i = 0; i < 3; ++i) {
    if (p.out[i] <= 0 || p.in[i] <= 0) return false;
    if (aten_extent(p.in[i], p.kernel[i], p.stride[i], p.pad_begin[i], p.dilation[i]) != p.out[i])
      return false;
  }
  return true;
}

void aten_conv_forward(const AtenConv& c, const void* x, const void* w, const void* bias, void* y) {
  const Geometry g = geometry(c);
  run_in_torch(c, "Conv", [&] {
    std::optional<at::Tensor> b;
    if (bias != nullptr) b = wrap(bias, {c.p.M}, g.options);
    const std::vector<int64_t> no_output_padding(g.stride.size(), 0);
    const at::Tensor out =
        at::convolution(wrap(x, g.x, g.options), wrap(w, g.w, g.options), b, g.stride, g.pad, g.dil,
                        /*transposed=*/false, no_output_padding, g.groups);
    wrap(y, g.y, g.options).copy_(out);
  });
}

void aten_conv_backward(const AtenConv& c, const void* dy, const void* x, const void* w, void* dx,
                        void* dw, void* dbias) {
  if (dx == nullptr && dw == nullptr && dbias == nullptr) return;
  if (x == nullptr && dw != nullptr)
    throw std::invalid_argument("ConvGrad through torch: dW needs the input x");
  const Geometry g = geometry(c);
  // Without dw, torch reads only x's sizes: dx's buffer (x's shape) stands in for it.
  run_in_torch(c, "ConvGrad", [&] {
    const std::vector<int64_t> no_output_padding(g.stride.size(), 0);
    const std::vector<int64_t> bias_sizes{c.p.M};
    const std::array<bool, 3> mask{dx != nullptr, dw != nullptr, dbias != nullptr};
    auto [gx, gw, gb] = at::convolution_backward(
        wrap(dy, g.y, g.options), wrap(x != nullptr ? x : dx, g.x, g.options),
        wrap(w, g.w, g.options),
        dbias != nullptr ? at::OptionalIntArrayRef(bias_sizes) : std::nullopt, g.stride, g.pad,
        g.dil, /*transposed=*/false, no_output_padding, g.groups, mask);
    if (dx != nullptr) wrap(dx, g.x, g.options).copy_(gx);
    if (dw != nullptr) wrap(dw, g.w, g.options).copy_(gw);
    if (dbias != nullptr) wrap(dbias, {c.p.M}, g.options).copy_(gb);
  });
}

void aten_conv_transpose_forward(const AtenConv& c, const void* x, const void* w, const void* bias,
                                 void* y) {
  const Geometry g = geometry(c);
  run_in_torch(c, "ConvTranspose", [&] {
    std::optional<at::Tensor> b;
    if (bias != nullptr) b = wrap(bias, {c.p.C}, g.options);
    // The pair fits torch's convolution, so each axis's output_padding is in [0, stride).
    std::vector<int64_t> output_padding;
    for (size_t i = 0; i < g.stride.size(); ++i) {
      output_padding.push_back(g.x[i + 2] + 2 * g.pad[i] - g.dil[i] * (g.w[i + 2] - 1) - 1 -
                               g.stride[i] * (g.y[i + 2] - 1));
    }
    const at::Tensor out =
        at::convolution(wrap(x, g.y, g.options), wrap(w, g.w, g.options), b, g.stride, g.pad, g.dil,
                        /*transposed=*/true, output_padding, g.groups);
    wrap(y, g.x, g.options).copy_(out);
  });
}

}  // namespace ortmodule
