// Products with a bias through cuBLASLt's bias epilogue (FusedMatMulBias's GEMM and bias in
// one kernel, as torch's addmm computes nn.Linear): cuBLASLt's heuristic picks the kernel
// for the shape, bias and alignment, which is also the one eager's Linear layers run.
//
// Row-major y[rows, N] = alpha * x[rows, K] op(w) + bias[N] is computed as the column-major
// y^T[N, rows] = op(w)^T x^T + bias (bias along D's rows), so w is cuBLASLt's A and x its B.
// float32 accumulates in float32 (TF32 where torch's cuBLAS handle allows it,
// torch.backends.cuda.matmul.allow_tf32); float16/bfloat16 operands accumulate in float32
// and the biased result is rounded once.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backends/cuda/cuda_ops_internal.h"
#include "kernels/cuda/cuda_common.h"
#include "ops/op_utils.h"

namespace ortmodule {

namespace {

// The most workspace an algorithm may ask for (torch's default for cuBLASLt on Hopper).
constexpr size_t kMaxWorkspace = size_t(32) << 20;

bool lt_enabled() {
  static const bool enabled = [] {
    const char* env = std::getenv("ORTMODULE_CUDA_BLASLT");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  return enabled;
}

void check_lt(cublasStatus_t status, const char* what) {
  cuda::check_blas(status, (std::string("FusedMatMulBias (") + what + ")").c_str());
}

// The largest power of two up to 256 that divides the address: the alignment cuBLASLt's
// heuristic is told for each matrix (it assumes 256 bytes unless told less).
uint32_t alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && address % a != 0) a /= 2;
  return a;
}

// cuBLASLt's descriptors of one call, destroyed on every path out.
struct LtCall {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  ~LtCall() {
    if (pref) cublasLtMatmulPreferenceDestroy(pref);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

template <typename V>
void set_op(const LtCall& call, cublasLtMatmulDescAttributes_t attribute, const V& value,
            const char* what) {
  check_lt(cublasLtMatmulDescSetAttribute(call.op, attribute, &value, sizeof(value)), what);
}

void set_alignment(const LtCall& call, cublasLtMatmulPreferenceAttributes_t attribute,
                   const void* p) {
  const uint32_t bytes = alignment(p);
  check_lt(cublasLtMatmulPreferenceSetAttribute(call.pref, attribute, &bytes, sizeof(bytes)),
           "alignment preference");
}

}  // namespace

bool cuda_lt_matmul_bias(OpContext& ctx, const Tensor& x, const Tensor& w, const Tensor& bias,
                         bool trans_w, double alpha, Tensor& y) {
  if (!lt_enabled()) return false;
  cudaDataType type;
  switch (y.dtype()) {
    case DType::Float32:
      type = CUDA_R_32F;
      break;
    case DType::Float16:
      type = CUDA_R_16F;
      break;
    case DType::BFloat16:
      type = CUDA_R_16BF;
      break;
    default:
      return false;  // float64: the cuBLAS GEMM and the bias kernel
  }
  const int64_t N = y.shape().back(), K = x.shape().back();
  const int64_t rows = N ? y.numel() / N : 0;
  if (rows == 0 || N == 0 || K == 0) return false;
  const Device device = y.device();
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  if (type == CUDA_R_32F) {
    cublasMath_t mode;
    check_lt(cublasGetMathMode(cuda::blas_handle(device), &mode), "math mode");
    if (mode & CUBLAS_TF32_TENSOR_OP_MATH) compute = CUBLAS_COMPUTE_32F_FAST_TF32;
  }
  LtCall call;
  check_lt(cublasLtMatmulDescCreate(&call.op, compute, CUDA_R_32F), "descriptor");
  const cublasOperation_t op_w = trans_w ? CUBLAS_OP_T : CUBLAS_OP_N, op_x = CUBLAS_OP_N;
  set_op(call, CUBLASLT_MATMUL_DESC_TRANSA, op_w, "transA");
  set_op(call, CUBLASLT_MATMUL_DESC_TRANSB, op_x, "transB");
  const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
  set_op(call, CUBLASLT_MATMUL_DESC_EPILOGUE, epilogue, "epilogue");
  const void* bias_data = bias.raw();
  set_op(call, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias_data, "bias pointer");
  // Column-major: w is [K, N] (ld K) read transposed, or [N, K] (ld N); x is [K, rows] (ld K);
  // y is [N, rows] (ld N).
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  check_lt(trans_w ? cublasLtMatrixLayoutCreate(&call.a, type, u(K), u(N), K)
                   : cublasLtMatrixLayoutCreate(&call.a, type, u(N), u(K), N),
           "layout of the weight");
  check_lt(cublasLtMatrixLayoutCreate(&call.b, type, u(K), u(rows), K), "layout of the input");
  check_lt(cublasLtMatrixLayoutCreate(&call.d, type, u(N), u(rows), N), "layout of the output");
  check_lt(cublasLtMatmulPreferenceCreate(&call.pref), "preference");
  const size_t workspace_limit = kMaxWorkspace;
  check_lt(cublasLtMatmulPreferenceSetAttribute(call.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                &workspace_limit, sizeof(workspace_limit)),
           "workspace preference");
  set_alignment(call, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, w.raw());
  set_alignment(call, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, x.raw());
  set_alignment(call, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, y.raw());
  set_alignment(call, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, y.raw());
  cublasLtHandle_t lt = cuda::blas_lt_handle(device);
  cublasLtMatmulHeuristicResult_t result;
  std::memset(&result, 0, sizeof(result));
  int found = 0;
  const cublasStatus_t heuristic = cublasLtMatmulAlgoGetHeuristic(
      lt, call.op, call.a, call.b, call.d, call.d, call.pref, 1, &result, &found);
  // No algorithm for this shape, type and alignment: the caller's GEMM and bias kernel
  // compute the same values.
  if (heuristic == CUBLAS_STATUS_NOT_SUPPORTED || found == 0) return false;
  check_lt(heuristic, "algorithm heuristic");
  Tensor workspace;
  if (result.workspaceSize > 0)
    workspace = Tensor::empty(DType::UInt8, {static_cast<int64_t>(result.workspaceSize)}, device);
  const float scale = static_cast<float>(alpha), zero = 0.0f;
  check_lt(
      cublasLtMatmul(lt, call.op, &scale, w.raw(), call.a, x.raw(), call.b, &zero, y.raw(), call.d,
                     y.raw(), call.d, &result.algo, workspace.defined() ? workspace.raw() : nullptr,
                     result.workspaceSize, cuda::stream(device)),
      "cublasLtMatmul");
  return true;
}

}  // namespace ortmodule
