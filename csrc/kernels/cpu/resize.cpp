// Resize forward (a weighted gather per output) and backward (a weighted gather per input
// cell over the adjoint tables), parallel over planes.
#include "kernels/cpu/resize.h"

#include <algorithm>
#include <cstdint>

#include "kernels/parallel.h"

namespace ortmodule {
namespace {

constexpr int64_t kGrainElems = 1 << 14;

int64_t plane_grain(int64_t work_per_plane) {
  return std::max<int64_t>(1, kGrainElems / std::max<int64_t>(1, work_per_plane));
}

}  // namespace

template <typename T>
void resize_forward(const ResizeGeometry& g, const T* x, T* y) {
  const int64_t P = g.out[0] * g.out[1] * g.out[2];
  const int64_t taps = g.taps[0] * g.taps[1] * g.taps[2];
  parallel_for(0, g.planes, plane_grain(P * taps), [&](int64_t b0, int64_t b1) {
    for (int64_t q = b0 * P; q < b1 * P; ++q) y[q] = resize_gather(g, q, x);
  });
}

template <typename T>
void resize_backward(const ResizeAdjointGeometry& g, const T* dy, T* dx) {
  const int64_t X = g.in[0] * g.in[1] * g.in[2];
  parallel_for(0, g.planes, plane_grain(X * 4), [&](int64_t b0, int64_t b1) {
    for (int64_t p = b0 * X; p < b1 * X; ++p) dx[p] = resize_adjoint_gather(g, p, dy);
  });
}

template void resize_forward<float>(const ResizeGeometry&, const float*, float*);
template void resize_forward<double>(const ResizeGeometry&, const double*, double*);
template void resize_backward<float>(const ResizeAdjointGeometry&, const float*, float*);
template void resize_backward<double>(const ResizeAdjointGeometry&, const double*, double*);

}  // namespace ortmodule
