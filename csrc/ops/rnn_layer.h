// The node-side view of the recurrent layer ops (rnn_ops.cpp) that both kernels need: the
// checked dims of a LSTMTorch / GRUTorch / RNNTorch node (or of its *Grad), and its tensors
// and scratch as the pointers of kernels/rnn_loop.h. Internal to csrc/ops and the CUDA twin.
//
// LSTMTorch(X, W_ih, W_hh, B_ih?, B_hh?, H0?, C0?; reverse) -> (Y, H_n, C_n, saved)
// GRUTorch(X, W_ih, W_hh, B_ih?, B_hh?, H0?; reverse) -> (Y, H_n, saved)
// RNNTorch(X, W_ih, W_hh, B_ih?, B_hh?, H0?; reverse, nonlinearity) -> (Y, H_n)
// <Op>Grad(dY?, dH_n?, dC_n?, X, W_ih, W_hh, H0?, C0?, Y, saved?; reverse[, nonlinearity])
//   -> (dX, dW_ih, dW_hh, dB_ih, dB_hh, dH0, dC0)
#pragma once

#include <cstdint>

#include "kernels/rnn_loop.h"
#include "ops/op_table.h"

namespace ortmodule {

// Forward inputs, and the grad op's inputs and outputs.
namespace rnn_io {
constexpr size_t kX = 0, kWih = 1, kWhh = 2, kBih = 3, kBhh = 4, kH0 = 5, kC0 = 6;
constexpr size_t kGradDy = 0, kGradDhn = 1, kGradDcn = 2, kGradX = 3, kGradWih = 4, kGradWhh = 5,
                 kGradH0 = 6, kGradC0 = 7, kGradY = 8, kGradSaved = 9;
constexpr size_t kDx = 0, kDwih = 1, kDwhh = 2, kDbih = 3, kDbhh = 4, kDh0 = 5, kDc0 = 6;
}  // namespace rnn_io

// The layer's dims from the node's inputs (forward, or its *Grad when `grad`), checked; the
// cell from the op type (and RNN's nonlinearity).
rnn::RnnDims rnn_layer_dims(const OpContext& ctx, bool grad);

// The forward output index of H_n's cell state C_n (LSTM) and of the saved gates (-1: none).
int rnn_cn_output(math::RnnCell cell);
int rnn_saved_output(math::RnnCell cell);

// Scratch of one kernel call, allocated on the node's device.
struct RnnScratch {
  Tensor gates, hgates, saved, dgh, dh, dc;
};

template <typename T>
const T* rnn_optional(const OpContext& ctx, size_t i) {
  return ctx.has_input(i) ? ctx.in(i).data<T>() : nullptr;
}

template <typename T>
T* rnn_optional_out(OpContext& ctx, int i) {
  return i >= 0 && ctx.has_output(static_cast<size_t>(i))
             ? ctx.out(static_cast<size_t>(i)).data<T>()
             : nullptr;
}

template <typename T>
rnn::RnnForwardArgs<T> rnn_forward_args(OpContext& ctx, const rnn::RnnDims& d, RnnScratch& s) {
  using namespace rnn_io;
  const Tensor& x = ctx.in(kX);
  rnn::RnnForwardArgs<T> a;
  a.x = x.data<T>();
  a.w_ih = ctx.in(kWih).data<T>();
  a.w_hh = ctx.in(kWhh).data<T>();
  a.b_ih = rnn_optional<T>(ctx, kBih);
  a.b_hh = rnn_optional<T>(ctx, kBhh);
  a.h0 = rnn_optional<T>(ctx, kH0);
  a.c0 = d.cell == math::RnnCell::kLstm ? rnn_optional<T>(ctx, kC0) : nullptr;
  a.y = ctx.out(0).data<T>();
  a.hn = rnn_optional_out<T>(ctx, 1);
  a.cn = rnn_optional_out<T>(ctx, rnn_cn_output(d.cell));
  a.saved = rnn_optional_out<T>(ctx, rnn_saved_output(d.cell));
  if (!a.saved && d.W() > 0) {  // no gradient graph: the saved rows are scratch
    s.saved = Tensor::empty(x.dtype(), {d.T * d.B * d.W()}, x.device());
    a.saved = s.saved.data<T>();
  }
  s.gates = Tensor::empty(x.dtype(), {d.T * d.B * d.G() * d.H}, x.device());
  s.hgates = Tensor::empty(x.dtype(), {d.B * d.G() * d.H}, x.device());
  a.gates = s.gates.data<T>();
  a.hgates = s.hgates.data<T>();
  return a;
}

template <typename T>
rnn::RnnBackwardArgs<T> rnn_backward_args(OpContext& ctx, const rnn::RnnDims& d, RnnScratch& s) {
  using namespace rnn_io;
  const Tensor& x = ctx.in(kGradX);
  const bool lstm = d.cell == math::RnnCell::kLstm;
  rnn::RnnBackwardArgs<T> a;
  a.dy = rnn_optional<T>(ctx, kGradDy);
  a.dhn = rnn_optional<T>(ctx, kGradDhn);
  a.dcn = lstm ? rnn_optional<T>(ctx, kGradDcn) : nullptr;
  a.x = x.data<T>();
  a.w_ih = ctx.in(kGradWih).data<T>();
  a.w_hh = ctx.in(kGradWhh).data<T>();
  a.h0 = rnn_optional<T>(ctx, kGradH0);
  a.c0 = lstm ? rnn_optional<T>(ctx, kGradC0) : nullptr;
  a.y = ctx.in(kGradY).data<T>();
  a.saved = d.W() > 0 ? ctx.in(kGradSaved).data<T>() : nullptr;
  a.dx = rnn_optional_out<T>(ctx, kDx);
  a.dw_ih = rnn_optional_out<T>(ctx, kDwih);
  a.dw_hh = rnn_optional_out<T>(ctx, kDwhh);
  a.db_ih = rnn_optional_out<T>(ctx, kDbih);
  a.db_hh = rnn_optional_out<T>(ctx, kDbhh);
  a.dh0 = rnn_optional_out<T>(ctx, kDh0);
  a.dc0 = rnn_optional_out<T>(ctx, kDc0);
  const int64_t GH = d.G() * d.H;
  s.gates = Tensor::empty(x.dtype(), {d.T * d.B * GH}, x.device());
  a.dgi = s.gates.data<T>();
  if (d.cell == math::RnnCell::kGru) {
    s.dgh = Tensor::empty(x.dtype(), {d.T * d.B * GH}, x.device());
    a.dgh = s.dgh.data<T>();
  }
  s.dh = Tensor::empty(x.dtype(), {d.B * d.H}, x.device());
  a.dh = s.dh.data<T>();
  if (lstm) {
    s.dc = Tensor::empty(x.dtype(), {d.B * d.H}, x.device());
    a.dc = s.dc.data<T>();
  }
  return a;
}

}  // namespace ortmodule
