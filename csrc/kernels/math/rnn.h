// Per-element math of torch's recurrent cells (one time step, one (batch row b, unit j)
// element), shared by the CPU loops (kernels/cpu/rnn.cpp) and the CUDA kernels
// (backends/cuda/rnn.cu). The time loop around them is kernels/rnn_loop.h.
//
// Gate pre-activations of a step are gi + b_ih + gh + b_hh, gi = x_t W_ih^T and
// gh = h_{t-1} W_hh^T (rows of G * H, the gates in torch's order):
//   RNN (G = 1):  h = act(a)                                  act = tanh or relu
//   LSTM (G = 4, i f g o): i, f, o = sigmoid, g = tanh; c = f c_prev + i g; h = o tanh(c)
//   GRU (G = 3, r z n): r, z = sigmoid(gi + b_ih + gh + b_hh);
//                       n = tanh(gi_n + b_ih_n + r (gh_n + b_hh_n)); h = (1 - z) n + z h_prev
// What backward reads is saved per step, [B, W] rows: LSTM i f g o c (W = 5H), GRU r z n and
// gh_n + b_hh_n (W = 4H); RNN saves nothing (its output gives act').
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/elementwise.h"
#include "kernels/math/host_device.h"

namespace ortmodule {
namespace math {

enum class RnnCell : int32_t { kTanh = 0, kRelu = 1, kLstm = 2, kGru = 3 };

ORTM_HOST_DEVICE int64_t rnn_gates(RnnCell cell) {
  return cell == RnnCell::kLstm ? 4 : cell == RnnCell::kGru ? 3 : 1;
}

// The width of a step's saved row (per batch row) for hidden size H.
ORTM_HOST_DEVICE int64_t rnn_saved_width(RnnCell cell, int64_t H) {
  return cell == RnnCell::kLstm ? 5 * H : cell == RnnCell::kGru ? 4 * H : 0;
}

// One step forward. Null pointers stand for zeros (no bias, no recurrent product at a first
// step without an initial state, no initial cell state).
template <typename T>
struct RnnStepForward {
  RnnCell cell = RnnCell::kTanh;
  int64_t H = 0;
  const T* gi = nullptr;      // [B, G*H] input product of the step
  const T* gh = nullptr;      // [B, G*H] recurrent product, or null
  const T* b_ih = nullptr;    // [G*H] or null
  const T* b_hh = nullptr;    // [G*H] or null
  const T* h_prev = nullptr;  // [B, H] (GRU), or null
  const T* c_prev = nullptr;  // LSTM: [B, H] rows c_prev_ld apart, or null
  int64_t c_prev_ld = 0;
  T* h = nullptr;      // [B, H] the step's output
  T* saved = nullptr;  // [B, W] (LSTM, GRU)
};

template <typename T>
ORTM_HOST_DEVICE T rnn_pre(const RnnStepForward<T>& s, int64_t row, int64_t k, bool recurrent) {
  const int64_t col = k * s.H;
  T a = s.gi[row + col];
  if (s.b_ih) a += s.b_ih[col];
  if (recurrent) {
    if (s.gh) a += s.gh[row + col];
    if (s.b_hh) a += s.b_hh[col];
  }
  return a;
}

template <typename T>
ORTM_HOST_DEVICE void rnn_step_forward(const RnnStepForward<T>& p, int64_t b, int64_t j) {
  const int64_t H = p.H;
  const int64_t G = rnn_gates(p.cell);
  RnnStepForward<T> s = p;
  // Shift the per-row pointers to column j (rnn_pre reads them at k * H).
  s.gi += j;
  if (s.gh) s.gh += j;
  if (s.b_ih) s.b_ih += j;
  if (s.b_hh) s.b_hh += j;
  const int64_t row = b * G * H;
  T* h = p.h + b * H + j;
  if (p.cell == RnnCell::kTanh || p.cell == RnnCell::kRelu) {
    const T a = rnn_pre(s, row, 0, true);
    *h = p.cell == RnnCell::kTanh ? std::tanh(a) : relu(a);
    return;
  }
  T* saved = p.saved + b * rnn_saved_width(p.cell, H) + j;
  if (p.cell == RnnCell::kLstm) {
    const T i = sigmoid(rnn_pre(s, row, 0, true));
    const T f = sigmoid(rnn_pre(s, row, 1, true));
    const T g = std::tanh(rnn_pre(s, row, 2, true));
    const T o = sigmoid(rnn_pre(s, row, 3, true));
    const T c_prev = p.c_prev ? p.c_prev[b * p.c_prev_ld + j] : T(0);
    const T c = f * c_prev + i * g;
    *h = o * std::tanh(c);
    saved[0] = i;
    saved[H] = f;
    saved[2 * H] = g;
    saved[3 * H] = o;
    saved[4 * H] = c;
    return;
  }
  const T r = sigmoid(rnn_pre(s, row, 0, true));
  const T z = sigmoid(rnn_pre(s, row, 1, true));
  T hn = s.gh ? s.gh[row + 2 * H] : T(0);
  if (s.b_hh) hn += s.b_hh[2 * H];
  const T n = std::tanh(rnn_pre(s, row, 2, false) + r * hn);
  const T h_prev = p.h_prev ? p.h_prev[b * H + j] : T(0);
  *h = (T(1) - z) * n + z * h_prev;
  saved[0] = r;
  saved[H] = z;
  saved[2 * H] = n;
  saved[3 * H] = hn;
}

// One step backward: the gradients of the step's pre-activations from dh (the gradient of the
// step's output: dy_t plus what later steps sent back) and, for LSTM, dc.
template <typename T>
struct RnnStepBackward {
  RnnCell cell = RnnCell::kTanh;
  int64_t H = 0;
  const T* dy = nullptr;  // [B, H] dY at the step, or null
  // [B, H] in: the gradient from later steps. Out (GRU): dh z, the part of dh_prev that does
  // not pass through W_hh (the caller adds dgh W_hh); the other cells leave it to the caller.
  T* dh = nullptr;
  T* dc = nullptr;            // LSTM [B, H]: in the gradient from later steps, out dc_prev
  const T* h = nullptr;       // [B, H] the step's output (RNN)
  const T* h_prev = nullptr;  // GRU [B, H], or null (zero)
  const T* c_prev = nullptr;  // LSTM [B, H] rows c_prev_ld apart, or null (zero)
  int64_t c_prev_ld = 0;
  const T* saved = nullptr;  // [B, W]
  T* dgi = nullptr;          // [B, G*H] d(input pre-activations)
  T* dgh = nullptr;          // GRU [B, G*H] d(recurrent products plus b_hh)
};

// LSTM's step backward at row b, column j, from dh (the step output's whole gradient) and
// tc = tanh(c) of the step's cell state (the CPU computes a row's tc vectorized).
template <typename T>
ORTM_HOST_DEVICE void lstm_step_backward_at(const RnnStepBackward<T>& p, int64_t b, int64_t j, T dh,
                                            T tc) {
  const int64_t H = p.H, e = b * H + j;
  const T* saved = p.saved + b * rnn_saved_width(RnnCell::kLstm, H) + j;
  T* dgi = p.dgi + b * 4 * H + j;
  const T i = saved[0], f = saved[H], g = saved[2 * H], o = saved[3 * H];
  const T c_prev = p.c_prev ? p.c_prev[b * p.c_prev_ld + j] : T(0);
  const T dc = p.dc[e] + dh * o * (T(1) - tc * tc);
  dgi[0] = sigmoid_grad(dc * g, i);
  dgi[H] = sigmoid_grad(dc * c_prev, f);
  dgi[2 * H] = tanh_grad(dc * i, g);
  dgi[3 * H] = sigmoid_grad(dh * tc, o);
  p.dc[e] = dc * f;
}

template <typename T>
ORTM_HOST_DEVICE void rnn_step_backward(const RnnStepBackward<T>& p, int64_t b, int64_t j) {
  const int64_t H = p.H;
  const int64_t G = rnn_gates(p.cell);
  const int64_t e = b * H + j;
  T dh = p.dh[e];
  if (p.dy) dh += p.dy[e];
  T* dgi = p.dgi + b * G * H + j;
  if (p.cell == RnnCell::kTanh || p.cell == RnnCell::kRelu) {
    const T h = p.h[e];
    dgi[0] = p.cell == RnnCell::kTanh ? tanh_grad(dh, h) : relu_grad(dh, h);
    return;
  }
  const T* saved = p.saved + b * rnn_saved_width(p.cell, H) + j;
  if (p.cell == RnnCell::kLstm) {
    lstm_step_backward_at(p, b, j, dh, std::tanh(saved[4 * H]));
    return;
  }
  const T r = saved[0], z = saved[H], n = saved[2 * H], hn = saved[3 * H];
  const T h_prev = p.h_prev ? p.h_prev[e] : T(0);
  const T dn = tanh_grad(dh * (T(1) - z), n);
  const T dr = sigmoid_grad(dn * hn, r);
  const T dz = sigmoid_grad(dh * (h_prev - n), z);
  T* dgh = p.dgh + b * G * H + j;
  dgi[0] = dr;
  dgi[H] = dz;
  dgi[2 * H] = dn;
  dgh[0] = dr;
  dgh[H] = dz;
  dgh[2 * H] = dn * r;
  p.dh[e] = dh * z;
}

}  // namespace math
}  // namespace ortmodule
