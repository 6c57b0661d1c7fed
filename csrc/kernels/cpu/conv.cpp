// 2-D convolution as im2col + gemm over chunks of images.
//
// Every gemm goes through ortmodule::gemm (at::mm on from_blob views), which costs ~10 us per
// call whatever its size, so images are batched: a chunk of B images becomes one column buffer
// [Cg * kH * kW, B * outH * outW] and one gemm per group. B grows until the column buffer reaches
// kChunkColElems (or the gemm is kMinChunkCols wide), so small images (8x8, 4x4) take a few
// large gemms instead of one tiny gemm per image, while large images stay at one image per gemm
// and keep their column buffer in cache between im2col and gemm.
//
// The gradients (input and weight) of 3x3 stride-1 convolutions large enough to pay
// (conv2d_winograd_applies) take the Winograd kernels of conv_winograd.cpp instead; only
// their bias gradient is summed here (bias_gradient). Their forward does too where the GEMMs
// run on the packed kernels (see conv2d_forward).
//
// Images are split into one contiguous range per thread; each range runs its chunks serially
// with single-threaded gemms (nested parallelism is serial), so no two threads share output
// memory. When parallel_for runs serially (one thread, one image) the gemms are called outside
// any parallel region and use the BLAS's own threads instead. dw and dbias sum over images: each
// range keeps its own partial sums, reduced in range order afterwards so the result does not
// depend on thread timing.
#include "kernels/cpu/conv.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <mutex>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/cpu/conv_common.h"
#include "kernels/cpu/conv_im2col.h"
#include "kernels/cpu/conv_winograd.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace ortmodule {

using conv_detail::add_bias;
using conv_detail::balanced_chunk;
using conv_detail::col2im;
using conv_detail::columns;
using conv_detail::conv_dims;
using conv_detail::ConvDims;
using conv_detail::ConvScratch;
using conv_detail::im2col_image;
using conv_detail::kColGrainElems;
using conv_detail::make_scratch;
using conv_detail::Scratch;
using conv_detail::sum_row;
namespace {

// Column-buffer elements of a whole batch up to which conv2d_backward takes the batch as one
// chunk (conv2d_backward_batch): 2 MiB of float. Beyond it the chunks of images, whose column
// buffers stay in L2 from im2col to col2im, measured faster (ResNet's 4x4 layer: 590K
// elements, ~10% slower as one chunk; its 2x2 one: 295K, 2x faster on one thread).
constexpr int64_t kBatchColElems = 1 << 19;

// conv2d_backward with the whole batch as one chunk, for small outputs (ResNet's 4x4 and 2x2
// layers): the gemms are whole (their threads split them), so dw is written directly, with no
// per-thread partial [M, K] sums to allocate and reduce (which cost more than the gemms for
// such layers), and every gemm is as wide as the batch. Per group: a parallel region per image
// (gather dy, im2col), the dw and dcol gemms, a region per image (col2im). Whole gemms measured
// faster than splitting their rows over the threads with the packed GEMM (which packs an
// operand once for all threads: 2.66 against 3.03 ms for ResNet's 2x2 layer, 2 threads) and
// level with MKL's; the small gemms of many groups run side by side instead (a depthwise
// layer's whole gemms took 1.83 ms against 1.52).
template <typename T>
void conv2d_backward_batch(const Conv2dParams& p, const ConvDims& d, const T* x, const T* w,
                           const T* dy, T* dx, T* dw, T* dbias) {
  const int64_t P = d.P, L = p.N * P;
  Scratch<T> col(dw != nullptr ? d.K * L : 0), dcol(dx != nullptr ? d.K * L : 0);
  Scratch<T> dy_all(d.Mg * L);
  for (int64_t g = 0; g < p.group; ++g) {
    const T* wg = w + g * d.Mg * d.K;
    parallel_for(0, p.N, 1, [&](int64_t n0, int64_t n1) {
      ConvScratch<T> s = make_scratch<T>(d, 1, dw != nullptr);
      for (int64_t n = n0; n < n1; ++n) {
        for (int64_t m = 0; m < d.Mg; ++m) {  // dy_g gathered into [Mg, N * P]
          const T* src = dy + (n * p.M + g * d.Mg + m) * P;
          std::copy(src, src + P, dy_all.data() + m * L + n * P);
        }
        if (dw == nullptr) continue;
        im2col_image(p, d, x + (n * p.C + g * d.Cg) * d.HW, col.data() + n * P, L, &s);
      }
    });
    const auto dw_gemm = [&] {  // dw_g = dy_g [Mg, L] * col^T [L, K]
      gemm<T>(false, true, d.Mg, d.K, L, T(1), dy_all.data(), L, col.data(), L, T(0),
              dw + g * d.Mg * d.K, d.K);
    };
    const auto dcol_gemm = [&] {  // dcol = w_g^T [K, Mg] * dy_g [Mg, L]
      gemm<T>(true, false, d.K, L, d.Mg, T(1), wg, d.K, dy_all.data(), L, T(0), dcol.data(), L);
    };
    if (p.group == 1) {
      if (dw != nullptr) dw_gemm();
      if (dx != nullptr) dcol_gemm();
    } else {  // a group's gemms are small (depthwise: one row): one thread each
      parallel_for(0, 2, 1, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
          if (t == 0 && dw != nullptr) dw_gemm();
          if (t == 1 && dx != nullptr) dcol_gemm();
        }
      });
    }
    if (dbias != nullptr) {
      for (int64_t m = 0; m < d.Mg; ++m)
        dbias[g * d.Mg + m] = static_cast<T>(sum_row(dy_all.data() + m * L, L));
    }
    if (dx == nullptr) continue;
    parallel_for(0, p.N, 1, [&](int64_t n0, int64_t n1) {
      ConvScratch<T> s = make_scratch<T>(d, 1, true);
      for (int64_t n = n0; n < n1; ++n) {
        col2im(p, d, dcol.data() + n * P, L, dx + (n * p.C + g * d.Cg) * d.HW, &s);
      }
    });
  }
}

// dy: [N, M, outH, outW] -> dbias: [M], summed in double as conv2d_backward's other paths.
template <typename T>
void bias_gradient(const Conv2dParams& p, const T* dy, T* dbias) {
  const int64_t P = p.outH * p.outW;
  parallel_for(0, p.M, std::max<int64_t>(1, kColGrainElems / std::max<int64_t>(1, p.N * P)),
               [&](int64_t m0, int64_t m1) {
                 for (int64_t m = m0; m < m1; ++m) {
                   double sum = 0;
                   for (int64_t n = 0; n < p.N; ++n) sum += sum_row(dy + (n * p.M + m) * P, P);
                   dbias[m] = static_cast<T>(sum);
                 }
               });
}

}  // namespace

// x: [N, C, H, W], w: [M, C/group, kH, kW], bias: [M] or null -> y: [N, M, outH, outW]
// Winograd-eligible float convolutions (conv2d_winograd_applies) take the Winograd forward where
// kernels may drive the packed micro-kernel (gemm_uses_packed_kernels: by default wherever the
// instruction set has one, also where the other products run on the BLAS), with no
// per-product packing: on a Zen 4 host (2 threads, one ORTModule alternating the two forwards
// step by step) the CNN step took 9.77 ms against 10.93 with im2col + GEMM, ResNet-18 (64x64,
// batch 16) 136.8 against 146.3; on the Xeon VM against im2col + MKL, see runtime/cpu_gemm.h.
// Winograd over BLAS products (the path without the micro-kernel) lost to im2col on a Zen 3
// host: the CNN step 19.5 ms against 15.6. Accuracy does not choose: per layer Winograd's
// float32 error is eager's
// (test_conv_pool_kernels' forward error test); ResNet's gradient distance from float64 is set
// by the ReLU kinks float32 rounding flips (test_fx_lowering's resnet check).
template <typename T>
void conv2d_forward(const Conv2dParams& p, const T* x, const T* w, const T* bias, T* y) {
  if constexpr (std::is_same_v<T, float>) {
    if (gemm_uses_packed_kernels() && conv2d_winograd_applies(p)) {
      conv2d_winograd_forward<T>(p, x, w, bias, y);
      return;
    }
  }
  const ConvDims d = conv_dims(p);
  const int64_t P = d.P;
  parallel_for(0, p.N, 1, [&](int64_t n_begin, int64_t n_end) {
    const int64_t max_b = balanced_chunk(d.chunk, n_end - n_begin);
    ConvScratch<T> s = make_scratch<T>(d, max_b, true);
    // gemm result [Mg, B * P] of a multi-image chunk, before it is spread over images.
    Scratch<T> out(max_b > 1 ? d.Mg * max_b * P : 0);
    for (int64_t n0 = n_begin; n0 < n_end; n0 += max_b) {
      const int64_t B = std::min(max_b, n_end - n0), L = B * P;
      for (int64_t g = 0; g < p.group; ++g) {
        const T* cols = columns(p, d, x, n0, B, g, &s);
        const T* wg = w + g * d.Mg * d.K;
        T* yg = y + (n0 * p.M + g * d.Mg) * P;
        if (B == 1) {
          gemm<T>(false, false, d.Mg, P, d.K, T(1), wg, d.K, cols, P, T(0), yg, P);
          if (bias != nullptr) add_bias(bias + g * d.Mg, d.Mg, P, yg);
          continue;
        }
        gemm<T>(false, false, d.Mg, L, d.K, T(1), wg, d.K, cols, L, T(0), out.data(), L);
        for (int64_t b = 0; b < B; ++b) {
          for (int64_t m = 0; m < d.Mg; ++m) {
            const T* src = out.data() + m * L + b * P;
            T* dst = yg + (b * p.M + m) * P;
            const T bm = bias != nullptr ? bias[g * d.Mg + m] : T(0);
            for (int64_t q = 0; q < P; ++q) dst[q] = src[q] + bm;
          }
        }
      }
    }
  });
}

// dy: [N, M, outH, outW] -> dx: [N, C, H, W], dw: [M, C/group, kH, kW], dbias: [M]
//
// Winograd-eligible convolutions take conv_winograd.cpp's dx and dw and bias_gradient's dbias
// (float32 ones where the backend says so: conv_gradients_use_winograd).
// Others make one pass over chunks of images: per group, the chunk's dy is gathered into
// [Mg, B * P] (a view of dy itself for a single image), then
//   dw_g += dy_g [Mg, B*P] * col^T [B*P, K]      (col = im2col of x)
//   dcol  = w_g^T [K, Mg] * dy_g [Mg, B*P]       -> col2im onto dx
// When K < Mg (a first layer: C = 1 or 3) the dw product is taken transposed,
// dw_g^T [K, Mg] = col * dy_g^T, which MKL runs about 1.7x faster for such thin outputs.
template <typename T>
void conv2d_backward(const Conv2dParams& p, const T* x, const T* w, const T* dy, T* dx, T* dw,
                     T* dbias) {
  if (conv2d_winograd_applies(p) && (!std::is_same_v<T, float> || conv_gradients_use_winograd())) {
    if (dx != nullptr) conv2d_winograd_backward_input<T>(p, w, dy, dx);
    if (dw != nullptr) conv2d_winograd_backward_weight<T>(p, x, dy, dw);
    if (dbias != nullptr) bias_gradient(p, dy, dbias);
    return;
  }
  const ConvDims d = conv_dims(p);
  const int64_t P = d.P, wsize = p.M * d.K;
  const bool dw_transposed = d.K < d.Mg;
  if (!dw_transposed && d.K * p.N * P <= kBatchColElems) {
    conv2d_backward_batch(p, d, x, w, dy, dx, dw, dbias);
    return;
  }
  // Partial dw (per group [Mg, K], or [K, Mg] when dw_transposed) and dbias of each image
  // range, keyed by its first image.
  struct Partial {
    int64_t n_begin;
    Scratch<T> dw;              // written by the range's first chunk (beta 0)
    std::vector<double> dbias;  // double: float images with many pixels keep PyTorch accuracy
  };
  std::vector<Partial> partials;
  std::mutex partials_mutex;

  parallel_for(0, p.N, 1, [&](int64_t n_begin, int64_t n_end) {
    const int64_t max_b = balanced_chunk(d.chunk, n_end - n_begin);
    ConvScratch<T> s = make_scratch<T>(d, max_b, dw != nullptr || dx != nullptr);
    Scratch<T> dy_chunk(max_b > 1 ? d.Mg * max_b * P : 0);
    Partial part{n_begin, Scratch<T>(dw != nullptr ? wsize : 0),
                 std::vector<double>(dbias != nullptr ? p.M : 0, 0.0)};
    bool first_chunk = true;
    for (int64_t n0 = n_begin; n0 < n_end; n0 += max_b) {
      const int64_t B = std::min(max_b, n_end - n0), L = B * P;
      for (int64_t g = 0; g < p.group; ++g) {
        const T* dyg = dy + (n0 * p.M + g * d.Mg) * P;
        // Gather the chunk's dy rows (summing them for dbias on the way).
        for (int64_t m = 0; m < d.Mg; ++m) {
          for (int64_t b = 0; b < B; ++b) {
            const T* src = dyg + (b * p.M + m) * P;
            if (dbias != nullptr) part.dbias[g * d.Mg + m] += sum_row(src, P);
            if (B > 1) std::copy(src, src + P, dy_chunk.data() + m * L + b * P);
          }
        }
        if (dw == nullptr && dx == nullptr) continue;
        if (B > 1) dyg = dy_chunk.data();
        if (dw != nullptr) {
          const T* cols = columns(p, d, x, n0, B, g, &s);
          T* dwg = part.dw.data() + g * d.Mg * d.K;
          const T beta = first_chunk ? T(0) : T(1);
          if (dw_transposed) {
            gemm<T>(false, true, d.K, d.Mg, L, T(1), cols, L, dyg, L, beta, dwg, d.Mg);
          } else {
            gemm<T>(false, true, d.Mg, d.K, L, T(1), dyg, L, cols, L, beta, dwg, d.K);
          }
        }
        if (dx == nullptr) continue;
        const T* wg = w + g * d.Mg * d.K;
        T* dxg = dx + (n0 * p.C + g * d.Cg) * d.HW;
        if (d.pointwise && B == 1) {
          gemm<T>(true, false, d.K, P, d.Mg, T(1), wg, d.K, dyg, P, T(0), dxg, P);
          continue;
        }
        gemm<T>(true, false, d.K, L, d.Mg, T(1), wg, d.K, dyg, L, T(0), s.col.data(), L);
        for (int64_t b = 0; b < B; ++b) {
          col2im(p, d, s.col.data() + b * P, L, dxg + b * p.C * d.HW, &s);
        }
      }
      first_chunk = false;
    }
    std::lock_guard<std::mutex> lock(partials_mutex);
    partials.push_back(std::move(part));
  });

  std::sort(partials.begin(), partials.end(),
            [](const Partial& a, const Partial& b) { return a.n_begin < b.n_begin; });
  if (dw != nullptr) {
    // Sum the ranges' partials in range order, in parallel over the rows of dw.
    parallel_for(0, p.M, std::max<int64_t>(1, kColGrainElems / std::max<int64_t>(1, d.K)),
                 [&](int64_t m0, int64_t m1) {
                   for (int64_t row = m0; row < m1; ++row) {
                     const int64_t g = row / d.Mg, m = row % d.Mg;
                     T* dst = dw + row * d.K;
                     std::fill(dst, dst + d.K, T(0));
                     for (Partial& part : partials) {
                       const T* src = part.dw.data() + g * d.Mg * d.K;
                       if (dw_transposed) {
                         for (int64_t k = 0; k < d.K; ++k) dst[k] += src[k * d.Mg + m];
                       } else {
                         for (int64_t k = 0; k < d.K; ++k) dst[k] += src[m * d.K + k];
                       }
                     }
                   }
                 });
  }
  if (dbias != nullptr) {
    for (int64_t m = 0; m < p.M; ++m) {
      double sum = 0;
      for (const Partial& part : partials) sum += part.dbias[m];
      dbias[m] = static_cast<T>(sum);
    }
  }
}

template void conv2d_forward<float>(const Conv2dParams&, const float*, const float*, const float*,
                                    float*);
template void conv2d_forward<double>(const Conv2dParams&, const double*, const double*,
                                     const double*, double*);
template void conv2d_backward<float>(const Conv2dParams&, const float*, const float*, const float*,
                                     float*, float*, float*);
template void conv2d_backward<double>(const Conv2dParams&, const double*, const double*,
                                      const double*, double*, double*, double*);

}  // namespace ortmodule
