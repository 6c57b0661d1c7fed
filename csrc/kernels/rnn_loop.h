// The time loop of one recurrent layer in one direction (torch's RNN, LSTM, GRU cells:
// kernels/math/rnn.h), forward and backward through time, over raw pointers. The loop is
// written once for both devices: `Exec` supplies the products and the per-step element passes
// (kernels/cpu/rnn.cpp on the CPU, backends/cuda/rnn.cu on a GPU):
//   exec.gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc)   row-major C = op(A) op(B) + beta C
//   exec.recurrent_gemm(...)   the same, for the per-step products with the recurrent weight:
//                              one B at every step of the call (the CPU packs it once)
//   exec.step_forward(RnnStepForward, B)  /  exec.step_backward(RnnStepBackward, B)
//   exec.copy_rows(rows, cols, src, src_ld, dst)   dst [rows, cols] contiguous
//   exec.fill_zero(n, dst)  /  exec.column_sums(rows, cols, src, dst)   dst[c] = sum_r src[r, c]
//
// Shapes (time-major): x [T, B, I], w_ih [G*H, I], w_hh [G*H, H], biases [G*H], h0, c0 [B, H],
// y [T, B, H], saved [T, B, W] (math::rnn_saved_width). reverse runs t = T-1 down to 0.
// Performance: one GEMM projects the inputs of all steps, then one GEMM per step; backward
// runs one GEMM per step and three over all steps (dx, dW_ih, dW_hh).
#pragma once

#include <cstdint>

#include "kernels/math/rnn.h"

namespace ortmodule {
namespace rnn {

using math::RnnCell;

struct RnnDims {
  RnnCell cell = RnnCell::kTanh;
  int64_t T = 0, B = 0, I = 0, H = 0;
  bool reverse = false;
  int64_t G() const { return math::rnn_gates(cell); }
  int64_t W() const { return math::rnn_saved_width(cell, H); }
  // The time index of processing step s.
  int64_t time(int64_t s) const { return reverse ? T - 1 - s : s; }
};

template <typename T>
struct RnnForwardArgs {
  const T* x = nullptr;
  const T* w_ih = nullptr;
  const T* w_hh = nullptr;
  const T* b_ih = nullptr;  // or null
  const T* b_hh = nullptr;  // or null
  const T* h0 = nullptr;    // or null (zeros)
  const T* c0 = nullptr;    // LSTM, or null (zeros)
  T* y = nullptr;
  T* hn = nullptr;      // [B, H] or null
  T* cn = nullptr;      // LSTM [B, H] or null
  T* saved = nullptr;   // [T, B, W] (LSTM, GRU)
  T* gates = nullptr;   // scratch [T, B, G*H]
  T* hgates = nullptr;  // scratch [B, G*H]
};

template <typename T>
struct RnnBackwardArgs {
  const T* dy = nullptr;   // [T, B, H] or null
  const T* dhn = nullptr;  // [B, H] or null
  const T* dcn = nullptr;  // LSTM [B, H] or null
  const T* x = nullptr;
  const T* w_ih = nullptr;
  const T* w_hh = nullptr;
  const T* h0 = nullptr;  // or null
  const T* c0 = nullptr;  // or null
  const T* y = nullptr;
  const T* saved = nullptr;
  T* dx = nullptr;  // each output may be null (not wanted)
  T* dw_ih = nullptr;
  T* dw_hh = nullptr;
  T* db_ih = nullptr;
  T* db_hh = nullptr;
  T* dh0 = nullptr;
  T* dc0 = nullptr;
  T* dgi = nullptr;  // scratch [T, B, G*H]
  T* dgh = nullptr;  // GRU scratch [T, B, G*H] (the others use dgi)
  T* dh = nullptr;   // scratch [B, H]
  T* dc = nullptr;   // LSTM scratch [B, H]
};

// C = op(A) op(B) + beta C, also for K = 0 (C = beta C) and empty C; recurrent: a per-step
// product with the recurrent weight (exec.recurrent_gemm).
template <typename Exec, typename T>
void product(Exec& exec, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda,
             const T* B, int64_t ldb, bool accumulate, T* C, int64_t ldc, bool recurrent = false) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate) exec.fill_zero(M * N, C);
    return;
  }
  if (recurrent) {
    exec.recurrent_gemm(ta, tb, M, N, K, A, lda, B, ldb, accumulate ? T(1) : T(0), C, ldc);
  } else {
    exec.gemm(ta, tb, M, N, K, A, lda, B, ldb, accumulate ? T(1) : T(0), C, ldc);
  }
}

template <typename Exec, typename T>
void rnn_forward(Exec& exec, const RnnDims& d, const RnnForwardArgs<T>& a) {
  const int64_t GH = d.G() * d.H, W = d.W(), BH = d.B * d.H;
  product(exec, false, true, d.T * d.B, GH, d.I, a.x, d.I, a.w_ih, d.I, false, a.gates, GH);
  for (int64_t s = 0; s < d.T; ++s) {
    const int64_t t = d.time(s), t_prev = s > 0 ? d.time(s - 1) : -1;
    math::RnnStepForward<T> step;
    step.cell = d.cell;
    step.H = d.H;
    step.gi = a.gates + t * d.B * GH;
    step.b_ih = a.b_ih;
    step.b_hh = a.b_hh;
    step.h_prev = s > 0 ? a.y + t_prev * BH : a.h0;
    if (step.h_prev) {
      product(exec, false, true, d.B, GH, d.H, step.h_prev, d.H, a.w_hh, d.H, false, a.hgates, GH,
              true);
      step.gh = a.hgates;
    }
    if (d.cell == RnnCell::kLstm) {
      step.c_prev = s > 0 ? a.saved + t_prev * d.B * W + 4 * d.H : a.c0;
      step.c_prev_ld = s > 0 ? W : d.H;
    }
    step.h = a.y + t * BH;
    step.saved = W ? a.saved + t * d.B * W : nullptr;
    exec.step_forward(step, d.B);
  }
  const int64_t t_last = d.T > 0 ? d.time(d.T - 1) : -1;
  if (a.hn) {
    if (t_last >= 0)
      exec.copy_rows(d.B, d.H, a.y + t_last * BH, d.H, a.hn);
    else if (a.h0)
      exec.copy_rows(d.B, d.H, a.h0, d.H, a.hn);
    else
      exec.fill_zero(BH, a.hn);
  }
  if (a.cn) {
    if (t_last >= 0)
      exec.copy_rows(d.B, d.H, a.saved + t_last * d.B * W + 4 * d.H, W, a.cn);
    else if (a.c0)
      exec.copy_rows(d.B, d.H, a.c0, d.H, a.cn);
    else
      exec.fill_zero(BH, a.cn);
  }
}

template <typename Exec, typename T>
void rnn_backward(Exec& exec, const RnnDims& d, const RnnBackwardArgs<T>& a) {
  const int64_t G = d.G(), GH = G * d.H, W = d.W(), BH = d.B * d.H;
  const bool lstm = d.cell == RnnCell::kLstm, gru = d.cell == RnnCell::kGru;
  T* dgh = gru ? a.dgh : a.dgi;
  if (a.dhn)
    exec.copy_rows(d.B, d.H, a.dhn, d.H, a.dh);
  else
    exec.fill_zero(BH, a.dh);
  if (lstm) {
    if (a.dcn)
      exec.copy_rows(d.B, d.H, a.dcn, d.H, a.dc);
    else
      exec.fill_zero(BH, a.dc);
  }
  for (int64_t s = d.T - 1; s >= 0; --s) {
    const int64_t t = d.time(s), t_prev = s > 0 ? d.time(s - 1) : -1;
    math::RnnStepBackward<T> step;
    step.cell = d.cell;
    step.H = d.H;
    step.dy = a.dy ? a.dy + t * BH : nullptr;
    step.dh = a.dh;
    step.dc = a.dc;
    step.h = a.y + t * BH;
    step.h_prev = s > 0 ? a.y + t_prev * BH : a.h0;
    if (lstm) {
      step.c_prev = s > 0 ? a.saved + t_prev * d.B * W + 4 * d.H : a.c0;
      step.c_prev_ld = s > 0 ? W : d.H;
    }
    step.saved = W ? a.saved + t * d.B * W : nullptr;
    step.dgi = a.dgi + t * d.B * GH;
    step.dgh = gru ? a.dgh + t * d.B * GH : nullptr;
    exec.step_backward(step, d.B);
    // dh_prev = dgh_t W_hh (+ dh z, which the GRU step left in dh).
    product(exec, false, false, d.B, d.H, GH, dgh + t * d.B * GH, GH, a.w_hh, d.H, gru, a.dh, d.H,
            true);
  }
  if (a.dh0) exec.copy_rows(d.B, d.H, a.dh, d.H, a.dh0);
  if (a.dc0) {
    if (lstm)
      exec.copy_rows(d.B, d.H, a.dc, d.H, a.dc0);
    else
      exec.fill_zero(BH, a.dc0);
  }
  const int64_t TB = d.T * d.B;
  if (a.dx) product(exec, false, false, TB, d.I, GH, a.dgi, GH, a.w_ih, d.I, false, a.dx, d.I);
  if (a.dw_ih) product(exec, true, false, GH, d.I, TB, a.dgi, GH, a.x, d.I, false, a.dw_ih, d.I);
  if (a.dw_hh) {
    // sum_t dgh_t^T h_prev(t): h_prev(t) is y at the previous step's time for every step but
    // the first (a contiguous run of y's rows, one step off), and h0 for the first.
    const int64_t steps = d.T > 0 ? d.T - 1 : 0;
    const T* dg_rows = dgh + (d.reverse ? 0 : d.B * GH);
    const T* y_rows = a.y + (d.reverse ? BH : 0);
    product(exec, true, false, GH, d.H, steps * d.B, dg_rows, GH, y_rows, d.H, false, a.dw_hh, d.H);
    if (a.h0 && d.T > 0)
      product(exec, true, false, GH, d.H, d.B, dgh + d.time(0) * d.B * GH, GH, a.h0, d.H, true,
              a.dw_hh, d.H);
  }
  if (a.db_ih) exec.column_sums(TB, GH, a.dgi, a.db_ih);
  if (a.db_hh) exec.column_sums(TB, GH, dgh, a.db_hh);
}

}  // namespace rnn
}  // namespace ortmodule
