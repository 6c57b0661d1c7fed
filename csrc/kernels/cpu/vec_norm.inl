// The row kernels of LayerNormalization and RMS normalisation (forward, backward, the
// parameter gradients) and the float32 row sums into double (sum_to_shape's leading axes),
// over vec_kernels.inl's register wrapper V: included by vec_kernels.inl inside its anonymous
// namespace (math::layernorm_* come from its kernels/math/layernorm.h). layernorm.cpp's
// scalar loops define the arithmetic; sums accumulate in double.

// x, y: [cols] (layernorm.cpp: the row body of layernorm_forward). Two passes, sums in
// double; the centring uses the float mean (its rounding shifts the sum of squares by
// cols * delta^2 only). Uncentred (RMS normalisation): one pass, the mean taken as 0.
template <typename V, bool kCentred>
void norm_forward_row(int64_t cols, double eps, const float* x, const float* scale,
                      const float* bias, float* y, float* mean, float* inv_std) {
  using F = typename V::F;
  const int64_t full = cols - cols % V::kWidth;
  auto acc = V::dacc_zero();
  float m = 0;
  if constexpr (kCentred) {
    for (int64_t c = 0; c < full; c += V::kWidth) V::dacc_add(acc, V::load(x + c));
    double sum = V::dacc_sum(acc);
    for (int64_t c = full; c < cols; ++c) sum += x[c];
    m = math::layernorm_mean<float>(sum, cols);
    acc = V::dacc_zero();
  }
  const F vm = V::set1(m);
  // x - 0 is x: the uncentred rows skip the subtraction.
  auto centred = [&](const float* p) { return kCentred ? V::sub(V::load(p), vm) : V::load(p); };
  for (int64_t c = 0; c < full; c += V::kWidth) {
    const F d = centred(x + c);
    V::dacc_add(acc, V::mul(d, d));
  }
  double sq = V::dacc_sum(acc);
  for (int64_t c = full; c < cols; ++c) {
    const float d = x[c] - m;
    sq += static_cast<double>(d) * d;
  }
  const float is = math::layernorm_inv_std<float>(sq, cols, eps);
  const F vis = V::set1(is);
  for (int64_t c = 0; c < full; c += V::kWidth) {
    const F xhat = V::mul(centred(x + c), vis);
    // x * inv_rms * scale rounded after each product, as RMSNorm modules write it.
    V::store(y + c, bias ? V::fmadd(xhat, V::load(scale + c), V::load(bias + c))
                         : V::mul(xhat, V::load(scale + c)));
  }
  for (int64_t c = full; c < cols; ++c) {
    const float xhat = (x[c] - m) * is;
    y[c] = bias ? xhat * scale[c] + bias[c] : xhat * scale[c];
  }
  if (mean) *mean = m;
  *inv_std = is;
}

// dy, x, dx: [cols] (layernorm.cpp: the dx body of layernorm_backward):
// dx = inv_std * (g - mean(g) - xhat * mean(g * xhat)), g = dy * scale; uncentred, the
// mean and mean(g) are 0.
template <typename V, bool kCentred>
void norm_backward_row(int64_t cols, const float* dy, const float* x, const float* scale,
                       float mean, float inv_std, float* dx) {
  using F = typename V::F;
  const int64_t full = cols - cols % V::kWidth;
  const F vm = V::set1(mean), vis = V::set1(inv_std);
  auto xhat_at = [&](int64_t c) {
    return V::mul(kCentred ? V::sub(V::load(x + c), vm) : V::load(x + c), vis);
  };
  auto acc_g = V::dacc_zero(), acc_gx = V::dacc_zero();
  for (int64_t c = 0; c < full; c += V::kWidth) {
    const F g = V::mul(V::load(dy + c), V::load(scale + c));
    if constexpr (kCentred) V::dacc_add(acc_g, g);
    V::dacc_add(acc_gx, V::mul(g, xhat_at(c)));
  }
  double sum_g = V::dacc_sum(acc_g), sum_gx = V::dacc_sum(acc_gx);
  for (int64_t c = full; c < cols; ++c) {
    const float g = dy[c] * scale[c];
    sum_g += g;
    sum_gx += static_cast<double>(g) * ((x[c] - mean) * inv_std);
  }
  const float mg = kCentred ? math::layernorm_mean<float>(sum_g, cols) : 0.0f;
  const float mgx = math::layernorm_mean<float>(sum_gx, cols);
  const F vmg = V::set1(mg), vmgx = V::set1(mgx);
  for (int64_t c = 0; c < full; c += V::kWidth) {
    const F g = V::mul(V::load(dy + c), V::load(scale + c));
    V::store(dx + c, V::mul(vis, V::fnmadd(xhat_at(c), vmgx, kCentred ? V::sub(g, vmg) : g)));
  }
  for (int64_t c = full; c < cols; ++c) {
    const float g = dy[c] * scale[c];
    const float xhat = (x[c] - mean) * inv_std;
    dx[c] = math::layernorm_dx(g, xhat, inv_std, mg, mgx);
  }
}

template <typename V>
void sum_rows_f64(int64_t rows, int64_t cols, const float* x, int64_t ld, double* acc) {
  const int64_t full = cols - cols % V::kWidth;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ld;
    for (int64_t c = 0; c < full; c += V::kWidth)
      V::dstore(acc + c, V::dadd(V::dload(acc + c), V::widen(V::load(xr + c))));
    for (int64_t c = full; c < cols; ++c) acc[c] += xr[c];
  }
}

template <typename V>
void norm_param_grad_rows(int64_t rows, int64_t cols, const float* dy, const float* x,
                          const float* mean, const float* inv_std, double* s_scale,
                          double* s_bias) {
  const int64_t full = cols - cols % V::kWidth;
  for (int64_t r = 0; r < rows; ++r) {
    const float* gr = dy + r * cols;
    const float* xr = x + r * cols;
    const double m = mean ? static_cast<double>(mean[r]) : 0.0;
    const double is = inv_std[r];
    for (int64_t c = 0; c < full; c += V::kWidth) {
      const auto g = V::widen(V::load(gr + c));
      // (g * (x - m)) * is, each step rounded in double, as the scalar sum; the product is
      // kept from being contracted with the sum (scale_add's barrier).
      auto t = V::dmul(V::dmul(g, V::dsub(V::widen(V::load(xr + c)), m)), is);
      __asm__("" : "+v"(t.lo), "+v"(t.hi));
      V::dstore(s_scale + c, V::dadd(V::dload(s_scale + c), t));
      if (s_bias) V::dstore(s_bias + c, V::dadd(V::dload(s_bias + c), g));
    }
    for (int64_t c = full; c < cols; ++c) {
      double t = static_cast<double>(gr[c]) * (xr[c] - m) * is;
      __asm__("" : "+x"(t));
      s_scale[c] += t;
      if (s_bias) s_bias[c] += gr[c];
    }
  }
}

template <typename V>
void rmsnorm_forward_row(int64_t cols, double eps, const float* x, const float* scale, float* y,
                         float* inv_rms) {
  norm_forward_row<V, false>(cols, eps, x, scale, nullptr, y, nullptr, inv_rms);
}

template <typename V>
void rmsnorm_backward_row(int64_t cols, const float* dy, const float* x, const float* scale,
                          float inv_rms, float* dx) {
  norm_backward_row<V, false>(cols, dy, x, scale, 0.0f, inv_rms, dx);
}
