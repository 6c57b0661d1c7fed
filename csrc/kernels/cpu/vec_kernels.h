// The table of vectorized kernels one instruction set provides (see cpu_isa.h
// for how one is chosen). Kept free of library headers: vec_avx2.cpp and vec_avx512.cpp
// include it while compiled with wider target flags.
#pragma once

#include <cstdint>

namespace ortmodule {

// Element-wise activations with a vector form (kernels/math/vec_math.h).
enum class VecActivation { kExp, kSigmoid, kTanh };

// The activation of bias_round_gelu_bf16: none, Gelu (erf) or its tanh approximation.
enum class VecGelu { kNone, kErf, kTanh };

// Element-wise float32 arithmetic of one IEEE operation per result (kSquare: a * a; kCube:
// (a * a) * a, the Pow kernel's fast exponents 2 and 3), so a vector form has the scalar
// loop's bits.
enum class VecArith { kAdd, kSub, kMul, kDiv, kSquare, kCube };

// One plane of a Winograd F(2x2, 3x3) tile transform (kernels/cpu/conv_winograd_transforms.h,
// whose scalar loops define the arithmetic): the plane read is [H, W], placed at row pad_top,
// column pad_left of the zero-padded plane the tiles cover; th x tw tiles, tile t = ty * tw + tx.
struct WinogradPlane {
  int64_t H, W, pad_top, pad_left, th, tw;
};

// Where a transform writes its tiles: tile t of the plane, element e, at
// base + ((t0 + t) / run) * run_stride + (t0 + t) % run + e * es. A plain [16, C, ld] block has
// run = ld; the packed GEMM's B panels run = their width.
struct WinogradColumns {
  float* base;
  int64_t es, t0, run, run_stride;
};

// Each entry runs over one contiguous chunk (the callers split work with parallel_for).
// A null entry means the caller's baseline loop runs.
struct VecKernels {
  // x, y: [n]; y may alias x.
  void (*activation)(VecActivation op, int64_t n, const float* x, float* y);
  // a, b, y: [n] (b unused by kSquare and kCube); y may alias a or b.
  void (*arith)(VecArith op, int64_t n, const float* a, const float* b, float* y);
  // x, y: [n]; y may alias x. tanh selects the tanh approximation of Gelu.
  void (*gelu_forward)(int64_t n, const float* x, float* y, bool tanh);
  // dy, x, dx: [n]; dx may alias dy. y: [n] or null: where given, gelu(x) too, bit for bit
  // gelu_forward's (y aliases neither x nor dy).
  void (*gelu_backward)(int64_t n, const float* dy, const float* x, float* dx, float* y, bool tanh);
  // x, y: [dim], y may alias x (softmax_forward's row semantics).
  void (*softmax_forward_row)(int64_t dim, const float* x, float* y, bool log);
  // dy, y, dx: [dim], dx may alias dy.
  void (*softmax_backward_row)(int64_t dim, const float* dy, const float* y, float* dx, bool log);
  // The boolean-mask attention softmax's element passes (softmax.cpp: scale_or_fill_row and
  // the masking of scaled_kept_softmax_backward). x, keep, y: [n], y = keep ? x * scale : fill;
  // keep, dx: [n], dx = keep ? dx * scale : 0. keep holds one byte per element.
  void (*scale_or_fill)(int64_t n, const float* x, float scale, const uint8_t* keep, float fill,
                        float* y);
  void (*scale_kept)(int64_t n, const uint8_t* keep, float scale, float* dx);
  // The additive-mask attention scores (softmax.cpp: scale_and_mask_row): x, mask, y: [n],
  // y = x * scale + mask, rounded after the product and after the sum (no fused multiply-add).
  void (*scale_add)(int64_t n, const float* x, float scale, const float* mask, float* y);
  // x, y: [cols]; scale: [cols]; bias (nullable): [cols]; mean, inv_std: one value each.
  void (*layernorm_forward_row)(int64_t cols, double eps, const float* x, const float* scale,
                                const float* bias, float* y, float* mean, float* inv_std);
  // dy, x, dx: [cols]; scale: [cols]; the row's saved mean and inv_std.
  void (*layernorm_backward_row)(int64_t cols, const float* dy, const float* x, const float* scale,
                                 float mean, float inv_std, float* dx);
  // The normalizations' parameter gradients over rows 0 <= r < rows of dy, x: [rows, cols]:
  // s_scale[c] += dy * (x - mean[r]) * inv_std[r] and, where s_bias is not null,
  // s_bias[c] += dy, in double, row by row (layernorm.cpp's partial sums, the same bits).
  // mean null: the mean is taken as 0 (RMS norm).
  void (*norm_param_grad_rows)(int64_t rows, int64_t cols, const float* dy, const float* x,
                               const float* mean, const float* inv_std, double* s_scale,
                               double* s_bias);
  // acc[c] += x[r * ld + c] for c < cols, rows r = 0 .. rows - 1 in order, in double (one
  // rounding per sum: the scalar loop's bits; sum_to_shape's bias-gradient sums).
  void (*sum_rows_f64)(int64_t rows, int64_t cols, const float* x, int64_t ld, double* acc);
  // RMS normalisation's rows (layernorm_*_row with the mean taken as 0, no bias).
  void (*rmsnorm_forward_row)(int64_t cols, double eps, const float* x, const float* scale,
                              float* y, float* inv_rms);
  void (*rmsnorm_backward_row)(int64_t cols, const float* dy, const float* x, const float* scale,
                               float inv_rms, float* dx);
  // The micro-kernel of the packed float32 GEMM (kernels/cpu/sgemm.cpp): one gemm_mr x gemm_nr
  // tile of C (row-major, row stride ldc) from packed panels a: [kc][gemm_mr] and
  // b: [kc][gemm_nr]. Only the first m rows and n columns of the tile are written. With
  // `first`, C = alpha * a*b + beta * C (beta == 0: C is not read); else C += alpha * a*b.
  void (*gemm_tile)(int64_t kc, const float* a, const float* b, float* c, int64_t ldc, int m, int n,
                    float alpha, float beta, bool first);
  // gemm_tile with A read in place rather than packed: all gemm_mr rows of op(A) at column k
  // are a[k * lda + i] (trans) or a[i * lda + k], for i < gemm_mr.
  void (*gemm_tile_a)(int64_t kc, const float* a, int64_t lda, bool trans, const float* b, float* c,
                      int64_t ldc, int m, int n, float alpha, float beta, bool first);
  int gemm_mr;
  int gemm_nr;
  // The micro-kernel of the packed bfloat16 GEMM (kernels/cpu/bgemm.cpp), on CPUs with
  // AVX512-BF16 (the avx512bf16 instruction set; null in every other table): one gemm_mr x
  // gemm_nr tile of float32 C from kp steps of packed pairs a: [kp][gemm_mr] and
  // b: [kp][gemm_nr], each a 32-bit word holding two bfloat16 values along K (the lower
  // column of K in the low half). Each step adds a0 * b0 + a1 * b1 to the float32 sums
  // (products exact; bfloat16 subnormals read as zero). m, n, alpha, beta, first: gemm_tile's.
  void (*bf16_gemm_tile)(int64_t kp, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc,
                         int m, int n, float alpha, float beta, bool first);
  // Rows [r0, r0 + rows) x columns [k0, k0 + kc) of op(X) as a panel of such pairs:
  // dst[p * width + r] holds op(X)[r0 + r, k0 + 2p] and op(X)[r0 + r, k0 + 2p + 1] (zero past
  // kc), rows <= r < width zero. x: bfloat16 bits, row stride ld; op(X) = X^T when trans.
  void (*bf16_pack_pairs)(const uint16_t* x, int64_t ld, bool trans, int64_t r0, int64_t rows,
                          int64_t k0, int64_t kc, int width, uint32_t* dst);
  // The packed bfloat16 GEMM on AMX tiles (the amx instruction set; null in every other
  // table). Panels are 32 rows deep in steps of 32 columns of K (16 pairs), each step 32 runs
  // of 16 words (64 bytes, a tile row). kc columns of K take (kc + 31) / 32 steps, zero past
  // kc; rows past `rows` zero. x, ld, trans, r0, rows, k0, kc: bf16_pack_pairs'.
  // A's panel: run r of step s holds row r's 16 pairs (an A tile per 16 rows).
  void (*amx_bf16_pack_a)(const uint16_t* x, int64_t ld, bool trans, int64_t r0, int64_t rows,
                          int64_t k0, int64_t kc, uint32_t* dst);
  // B's panel (rows are op(B)'s columns): run 16 t + p of step s holds pair p of columns
  // 16 t .. 16 t + 15 (a B tile, the pairs' layout the instruction reads, per 16 columns).
  void (*amx_bf16_pack_b)(const uint16_t* x, int64_t ld, bool trans, int64_t r0, int64_t rows,
                          int64_t k0, int64_t kc, uint32_t* dst);
  // One 32 x 32 tile of float32 C from `steps` steps of an A and a B panel (products exact,
  // float32 sums, bfloat16 subnormals read as zero and subnormal sums flushed, as tdpbf16ps
  // does). m, n, alpha, beta, first: gemm_tile's.
  void (*amx_bf16_tile)(int64_t steps, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc,
                        int m, int n, float alpha, float beta, bool first);
  // amx_bf16_tile for 32 whole rows of a row-major A read in place (a: row 0's first
  // column of the K block, lda: its row stride) over kc columns of K: A's values where the
  // packed panel would hold them, nothing read past kc.
  void (*amx_bf16_tile_a)(int64_t kc, const uint16_t* a, int64_t lda, const uint32_t* b, float* c,
                          int64_t ldc, int n, float alpha, float beta, bool first);
  // Called before each product: the first tile of each thread in it loads the tile
  // configuration again (torch's own AMX kernels run on the same threads between products
  // and leave theirs).
  void (*amx_bf16_begin)();
  // Packs rows of a row-major matrix as columns of a GEMM panel: dst[k * width + r] =
  // x[r * ld + k] for r < rows, k < kc; 0 for rows <= r < width (8x8 blocks transposed in
  // registers).
  void (*pack_transposed)(const float* x, int64_t ld, int64_t rows, int64_t kc, int width,
                          float* dst);
  // One output row of a k x k (k = 2 or 3), stride-2 max pool whose windows lie inside the
  // input: for ow < n, y[ow] = the max of r[j W + 2 ow + i] over rows j < k and columns i < k,
  // taken in row-major order (a later tap replaces the best when greater or NaN:
  // pool_max_replaces), and, when idx is not null, idx[ow] = first_at + 2 ow + the winning
  // tap's offset j W + i. Null without AVX2.
  void (*maxpool_s2_row)(const float* r, int64_t W, int k, int64_t n, int64_t first_at, float* y,
                         int64_t* idx);
  // y[i] = x[2 i] for i < n (im2col's rows for stride 2). Null without AVX2.
  void (*copy_stride2)(const float* x, int64_t n, float* y);
  // float32 <-> bfloat16 bits over n elements, as math::float_to_bf16 / bf16_to_float
  // (kernels/cpu/convert.h). Null without AVX2.
  void (*float_to_bf16)(int64_t n, const float* x, uint16_t* y);
  void (*bf16_to_float)(int64_t n, const uint16_t* x, float* y);
  // float32 rounded to the nearest bfloat16 and widened back, in registers: y holds the bits
  // of bf16_to_float(float_to_bf16(x)). x, y: [n]; y may alias x. Null without AVX-512.
  void (*round_bf16_float)(int64_t n, const float* x, float* y);
  // One row of a bfloat16 product's epilogue, in registers: v = x + bias (bias may be null),
  // p = v rounded to bfloat16 (into pre, when not null), y = gelu(p widened) rounded (kNone:
  // y = p). The bits of float_to_bf16, bf16_to_float and gelu_forward run one after the other
  // over buffers. x, bias: [n]; pre, y: [n]. Null without AVX-512.
  void (*bias_round_gelu_bf16)(int64_t n, const float* x, const float* bias, VecGelu gelu,
                               uint16_t* pre, uint16_t* y);
  // The Winograd transforms of one plane, vectorised over the plane's tiles. scratch:
  // winograd_scratch_floats(g) floats.
  // Input tiles: x [H, W] -> (B^T d B) per tile, into dst.
  void (*winograd_input)(const WinogradPlane& g, const float* x, const WinogradColumns& dst,
                         float* scratch);
  // Output tiles: m (element e of tile t at m[e * es + t]) -> y [H, W] = A^T m A + bias,
  // clipped at the bottom and right edges.
  void (*winograd_output)(const WinogradPlane& g, const float* m, int64_t es, float bias, float* y,
                          float* scratch);
  // Output-gradient tiles: dy [H, W] -> (A dY A^T) per tile at d[e * es + t]; tiles past the
  // edges read zeros.
  void (*winograd_output_gradient)(const WinogradPlane& g, const float* dy, float* d, int64_t es,
                                   float* scratch);
};

// The scratch a winograd_* entry takes for one plane: eight [th + 1, tw] phase planes.
static inline int64_t winograd_scratch_floats(const WinogradPlane& g) {
  return 8 * (g.th + 1) * g.tw;
}

// Defined in vec_avx2.cpp / vec_avx512.cpp / vec_avx512_bf16.cpp / vec_amx.cpp: null where the
// build lacks the ISA. The avx512bf16 table is the avx512 one with the bfloat16 GEMM entries;
// the amx table the avx512bf16 one with the AMX entries.
const VecKernels* vec_kernels_avx2();
const VecKernels* vec_kernels_avx512();
const VecKernels* vec_kernels_avx512_bf16();
const VecKernels* vec_kernels_amx();

}  // namespace ortmodule
