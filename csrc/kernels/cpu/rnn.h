// One recurrent layer in one direction on the CPU (torch's RNN, LSTM and GRU cells), forward
// and backward through time: kernels/rnn_loop.h's loop with the engine's GEMM
// (kernels/gemm.h) and threaded per-step element passes (kernels/math/rnn.h).
#pragma once

#include "kernels/rnn_loop.h"

namespace ortmodule {

template <typename T>
void rnn_layer_forward(const rnn::RnnDims& dims, const rnn::RnnForwardArgs<T>& args);

template <typename T>
void rnn_layer_backward(const rnn::RnnDims& dims, const rnn::RnnBackwardArgs<T>& args);

}  // namespace ortmodule
