#include "kernels/cpu/rnn.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "base/profiler.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/sgemm.h"
#include "kernels/gemm.h"
#include "kernels/parallel.h"

namespace ortmodule {

namespace {

// The CPU side of rnn_loop.h's Exec.
template <typename T>
struct CpuRnnExec {
  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda, const T* B,
            int64_t ldb, T beta, T* C, int64_t ldc) {
    ortmodule::gemm<T>(ta, tb, M, N, K, T(1), A, lda, B, ldb, beta, C, ldc);
  }
  // The per-step products with the recurrent weight: a step's few rows of hidden state (the
  // batch) against all of W_hh, so that packing W_hh on every step cost as long as the
  // product itself (lstm-lm's 20x1024x256 at 111 GFLOP/s on 2 threads). W_hh is packed once
  // per call where the instruction set has the packed micro-kernel.
  void recurrent_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const T* A, int64_t lda,
                      const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
    if constexpr (std::is_same_v<T, float>) {
      if (packed_sgemm_available() && M <= kRecurrentRows) {
        if (!packed_w || packed_source != B || packed_trans != tb || packed_w->K() != K ||
            packed_w->N() != N || packed_ld != ldb) {
          packed_w = std::make_unique<PackedSgemmB>(tb, K, N, B, ldb);
          packed_source = B;
          packed_trans = tb;
          packed_ld = ldb;
        }
        GemmTimer timer(ta, tb, 1, M, N, K);
        packed_w->multiply(ta, M, 1.0f, A, lda, beta, C, ldc);
        return;
      }
    }
    gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
  }
  // Above this batch, B's packing is a small share of each product.
  static constexpr int64_t kRecurrentRows = 128;
  std::unique_ptr<PackedSgemmB> packed_w;
  const T* packed_source = nullptr;
  bool packed_trans = false;
  int64_t packed_ld = 0;
  // Rows of the batch in parallel chunks of at least ~16k elements (a step is short: threads
  // pay off only for large batches and hidden sizes).
  static int64_t grain(int64_t H) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, H)); }
  void step_forward(const math::RnnStepForward<T>& step, int64_t B) {
    if constexpr (std::is_same_v<T, float>) {
      if (step.cell == math::RnnCell::kLstm && vec_kernels().activation) {
        lstm_step_forward_vec(step, B);
        return;
      }
      if (step.cell == math::RnnCell::kGru && vec_kernels().activation) {
        gru_step_forward_vec(step, B);
        return;
      }
    }
    parallel_for(0, B, grain(step.H), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b)
        for (int64_t j = 0; j < step.H; ++j) math::rnn_step_forward(step, b, j);
    });
  }
  // The first `cols` pre-activations of a batch row whose gates all take the recurrent
  // product (LSTM's four, GRU's r and z), in rnn_pre's order of additions.
  static void recurrent_pre_activations(const math::RnnStepForward<float>& step, const float* gi,
                                        const float* gh, int64_t cols, float* out) {
    for (int64_t k = 0; k < cols; ++k) {
      float a = gi[k];
      if (step.b_ih) a += step.b_ih[k];
      if (gh) a += gh[k];
      if (step.b_hh) a += step.b_hh[k];
      out[k] = a;
    }
  }
  // GRU over float rows with the vector sigmoid and tanh (three per element), in
  // rnn_step_forward's order of operations: r and z, then hn = gh_n + b_hn, then
  // n = tanh(gi_n + b_in + r hn) and h = (1 - z) n + z h_prev.
  static void gru_step_forward_vec(const math::RnnStepForward<float>& step, int64_t B) {
    const auto act = vec_kernels().activation;
    const int64_t H = step.H, GH = 3 * H, W = math::rnn_saved_width(math::RnnCell::kGru, H);
    parallel_for(0, B, grain(H), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        float* sv = step.saved + b * W;  // r, z, n, hn
        const float* gi = step.gi + b * GH;
        const float* gh = step.gh ? step.gh + b * GH : nullptr;
        recurrent_pre_activations(step, gi, gh, 2 * H, sv);
        act(VecActivation::kSigmoid, 2 * H, sv, sv);
        float* n = sv + 2 * H;
        float* hn = sv + 3 * H;
        for (int64_t j = 0; j < H; ++j) {
          float h_n = gh ? gh[2 * H + j] : 0.0f;
          if (step.b_hh) h_n += step.b_hh[2 * H + j];
          hn[j] = h_n;
          float a = gi[2 * H + j];
          if (step.b_ih) a += step.b_ih[2 * H + j];
          n[j] = a + sv[j] * h_n;
        }
        act(VecActivation::kTanh, H, n, n);
        const float* h_prev = step.h_prev ? step.h_prev + b * H : nullptr;
        float* h = step.h + b * H;
        for (int64_t j = 0; j < H; ++j)
          h[j] = (1.0f - sv[H + j]) * n[j] + sv[H + j] * (h_prev ? h_prev[j] : 0.0f);
      }
    });
  }
  // LSTM over float rows with the vector sigmoid and tanh (five per element, which the
  // scalar libm calls made most of the step): the pre-activations go to the saved row, the
  // gates are activated in place, then c and h = o tanh(c).
  static void lstm_step_forward_vec(const math::RnnStepForward<float>& step, int64_t B) {
    const auto act = vec_kernels().activation;
    const int64_t H = step.H, GH = 4 * H, W = math::rnn_saved_width(math::RnnCell::kLstm, H);
    parallel_for(0, B, grain(H), [&](int64_t b0, int64_t b1) {
      std::vector<float> tc(static_cast<size_t>(H));
      for (int64_t b = b0; b < b1; ++b) {
        float* sv = step.saved + b * W;
        const float* gi = step.gi + b * GH;
        const float* gh = step.gh ? step.gh + b * GH : nullptr;
        recurrent_pre_activations(step, gi, gh, GH, sv);
        act(VecActivation::kSigmoid, 2 * H, sv, sv);  // i, f
        act(VecActivation::kTanh, H, sv + 2 * H, sv + 2 * H);
        act(VecActivation::kSigmoid, H, sv + 3 * H, sv + 3 * H);
        const float* c_prev = step.c_prev ? step.c_prev + b * step.c_prev_ld : nullptr;
        float* c = sv + 4 * H;
        for (int64_t j = 0; j < H; ++j)
          c[j] = sv[H + j] * (c_prev ? c_prev[j] : 0.0f) + sv[j] * sv[2 * H + j];
        act(VecActivation::kTanh, H, c, tc.data());
        float* h = step.h + b * H;
        for (int64_t j = 0; j < H; ++j) h[j] = sv[3 * H + j] * tc[j];
      }
    });
  }
  void step_backward(const math::RnnStepBackward<T>& step, int64_t B) {
    if constexpr (std::is_same_v<T, float>) {
      if (step.cell == math::RnnCell::kLstm && vec_kernels().activation) {
        lstm_step_backward_vec(step, B);
        return;
      }
    }
    parallel_for(0, B, grain(step.H), [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b)
        for (int64_t j = 0; j < step.H; ++j) math::rnn_step_backward(step, b, j);
    });
  }
  // LSTM backward over float rows: tanh(c) of a row vectorized, the rest as the scalar step.
  static void lstm_step_backward_vec(const math::RnnStepBackward<float>& step, int64_t B) {
    const auto act = vec_kernels().activation;
    const int64_t H = step.H, W = math::rnn_saved_width(math::RnnCell::kLstm, H);
    parallel_for(0, B, grain(H), [&](int64_t b0, int64_t b1) {
      std::vector<float> tc(static_cast<size_t>(H));
      for (int64_t b = b0; b < b1; ++b) {
        act(VecActivation::kTanh, H, step.saved + b * W + 4 * H, tc.data());
        for (int64_t j = 0; j < H; ++j) {
          const int64_t e = b * H + j;
          const float dh = step.dy ? step.dh[e] + step.dy[e] : step.dh[e];
          math::lstm_step_backward_at(step, b, j, dh, tc[static_cast<size_t>(j)]);
        }
      }
    });
  }
  void copy_rows(int64_t rows, int64_t cols, const T* src, int64_t src_ld, T* dst) {
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(dst + r * cols, src + r * src_ld, static_cast<size_t>(cols) * sizeof(T));
  }
  void fill_zero(int64_t n, T* dst) { std::fill(dst, dst + n, T(0)); }
  void column_sums(int64_t rows, int64_t cols, const T* src, T* dst) {
    parallel_for(0, cols, 256, [&](int64_t c0, int64_t c1) {
      std::fill(dst + c0, dst + c1, T(0));
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = c0; c < c1; ++c) dst[c] += src[r * cols + c];
    });
  }
};

}  // namespace

template <typename T>
void rnn_layer_forward(const rnn::RnnDims& dims, const rnn::RnnForwardArgs<T>& args) {
  CpuRnnExec<T> exec;
  rnn::rnn_forward(exec, dims, args);
}

template <typename T>
void rnn_layer_backward(const rnn::RnnDims& dims, const rnn::RnnBackwardArgs<T>& args) {
  CpuRnnExec<T> exec;
  rnn::rnn_backward(exec, dims, args);
}

#define ORTM_INSTANTIATE_RNN(T)                                                           \
  template void rnn_layer_forward<T>(const rnn::RnnDims&, const rnn::RnnForwardArgs<T>&); \
  template void rnn_layer_backward<T>(const rnn::RnnDims&, const rnn::RnnBackwardArgs<T>&);
ORTM_INSTANTIATE_RNN(float)
ORTM_INSTANTIATE_RNN(double)
#undef ORTM_INSTANTIATE_RNN

}  // namespace ortmodule
