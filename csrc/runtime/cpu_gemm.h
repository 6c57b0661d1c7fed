// Which implementation runs the engine's float32 CPU GEMMs (kernels/gemm.h): the BLAS that
// libtorch links (runtime/torch_backend.cpp) or the engine's packed GEMM (kernels/cpu/sgemm.h).
//
// The choice is the mode ORTMODULE_CPU_GEMM=auto|blas|packed names (auto when unset), read
// once here, or the last set_cpu_gemm. auto takes the packed GEMM where the BLAS leaves the
// CPU's AVX-512 units idle: torch's BLAS is MKL and the CPU is not Intel's (MKL dispatches
// its AVX-512 kernels by CPU vendor; on other AVX-512 CPUs it runs its AVX2 ones, which on an
// AMD Zen 5 measured half the packed kernel's throughput), and the active instruction set
// (cpu_isa.h) is AVX-512. Everywhere else auto keeps the BLAS. float64 always takes the BLAS.
#pragma once

#include <string>

namespace ortmodule {

enum class CpuGemm { kAuto, kBlas, kPacked };

// "auto", "blas", "packed".
const char* cpu_gemm_name(CpuGemm mode);
// Inverse of cpu_gemm_name; throws std::invalid_argument naming the accepted values.
CpuGemm parse_cpu_gemm(const std::string& name);
// Sets the mode for later GEMM calls; packed throws std::invalid_argument where the active
// instruction set has no GEMM micro-kernel (the baseline).
void set_cpu_gemm(CpuGemm mode);
// The mode: the last set_cpu_gemm, else ORTMODULE_CPU_GEMM (a bad value throws here).
CpuGemm cpu_gemm_mode();
// What a float32 GEMM runs now: true for the packed GEMM, false for the BLAS.
bool use_packed_sgemm();
// Whether auto keeps the 3x3 convolutions on im2col + the BLAS, their gradients included: on
// a non-Intel CPU without AVX-512 (AMD's Zen 2 and Zen 3), where the Winograd kernels lost to
// im2col + MKL (a Zen 3 EPYC, 2 threads, benchmarks/bench_gemm_modes.py alternating the modes
// in one process: the CNN benchmark 1.97x eager's speed with im2col + MKL against 1.75x with
// Winograd on the AVX2 micro-kernel and 1.79x with Winograd gradients on MKL; ResNet-18 1.53x
// against 1.48x).
bool auto_convolutions_on_blas();
// Whether kernels that write their operands as packed panels and call the micro-kernel
// themselves (the Winograd convolutions, kernels/gemm.h's gemm_uses_packed_kernels) do so now:
// under packed, and under auto wherever the instruction set has the micro-kernel (AVX2 or
// AVX-512), also where auto leaves the products on the BLAS (an Intel CPU, an AVX2-only one):
// the Winograd forward, input gradient and weight-gradient products beat im2col + MKL there
// (Xeon VM, 2 threads, modes alternated in one process: the CNN step 1.16x with the AVX-512
// kernels, 1.18x with the AVX2 ones and MKL's AVX2 path; ResNet-18 1.08x and 1.07x), but not
// where auto_convolutions_on_blas; never under blas.
bool use_packed_micro_kernels();
// Whether the gradients of Winograd-eligible float32 convolutions take Winograd
// (kernels/gemm.h's conv_gradients_use_winograd): under blas and packed, and under auto but
// where auto_convolutions_on_blas.
bool winograd_conv_gradients();
// Why auto chose what it chose, for reports: e.g. "packed: MKL on a non-Intel AVX-512 CPU".
std::string cpu_gemm_reason();

}  // namespace ortmodule
