#include "runtime/cpu_gemm.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/sgemm.h"

namespace ortmodule {
namespace {

constexpr const char* kGemmEnv = "ORTMODULE_CPU_GEMM";

bool cpu_is_intel() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return false;
  char vendor[13];
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  vendor[12] = '\0';
  return std::strcmp(vendor, "GenuineIntel") == 0;
#else
  return false;
#endif
}

// MKL's own CPU-vendor check, which libtorch_cpu exports when MKL is linked into it.
bool torch_blas_is_mkl() {
  void* const library = dlopen("libtorch_cpu.so", RTLD_LAZY | RTLD_NOLOAD);
  return library != nullptr && dlsym(library, "mkl_serv_intel_cpu_true") != nullptr;
}

// auto's preference, fixed for the process (the instruction set is checked per call, since
// tests switch it).
bool auto_prefers_packed() {
  static const bool prefers = torch_blas_is_mkl() && !cpu_is_intel();
  return prefers;
}

CpuGemm resolve_from_environment() {
  const char* env = std::getenv(kGemmEnv);
  if (!env || !*env) return CpuGemm::kAuto;
  try {
    return parse_cpu_gemm(env);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(kGemmEnv) + ": " + e.what());
  }
}

std::atomic<int> g_mode{-1};

}  // namespace

const char* cpu_gemm_name(CpuGemm mode) {
  switch (mode) {
    case CpuGemm::kAuto:
      return "auto";
    case CpuGemm::kBlas:
      return "blas";
    case CpuGemm::kPacked:
      return "packed";
  }
  return "unknown";
}

CpuGemm parse_cpu_gemm(const std::string& name) {
  for (CpuGemm mode : {CpuGemm::kAuto, CpuGemm::kBlas, CpuGemm::kPacked})
    if (name == cpu_gemm_name(mode)) return mode;
  throw std::invalid_argument("\"" + name +
                              "\" is not a CPU GEMM choice; expected auto, blas or packed");
}

void set_cpu_gemm(CpuGemm mode) {
  if (mode == CpuGemm::kPacked && !packed_sgemm_available()) {
    throw std::invalid_argument(
        std::string("the packed GEMM needs the avx2 or avx512 instruction set, but the active "
                    "one is ") +
        cpu_isa_name(active_cpu_isa()) + "; choose blas or auto");
  }
  g_mode.store(static_cast<int>(mode));
}

CpuGemm cpu_gemm_mode() {
  static const bool resolved = [] {
    const CpuGemm mode = resolve_from_environment();
    int unset = -1;
    g_mode.compare_exchange_strong(unset, static_cast<int>(mode));
    return true;
  }();
  (void)resolved;
  return static_cast<CpuGemm>(g_mode.load());
}

namespace {

// The mode's answer: never under blas, wherever the micro-kernel exists under packed, and
// `auto_choice` under auto.
bool packed_under_mode(bool auto_choice) {
  switch (cpu_gemm_mode()) {
    case CpuGemm::kBlas:
      return false;
    case CpuGemm::kPacked:
      return packed_sgemm_available();
    case CpuGemm::kAuto:
      break;
  }
  return auto_choice;
}

}  // namespace

bool use_packed_sgemm() {
  return packed_under_mode(auto_prefers_packed() && cpu_isa_has_avx512(active_cpu_isa()));
}

bool auto_convolutions_on_blas() {
  static const bool on_blas = !cpu_is_intel() && !cpu_isa_supported(CpuIsa::kAvx512);
  return on_blas;
}

bool use_packed_micro_kernels() {
  return packed_under_mode(packed_sgemm_available() && !auto_convolutions_on_blas());
}

bool winograd_conv_gradients() {
  return cpu_gemm_mode() != CpuGemm::kAuto || !auto_convolutions_on_blas();
}

namespace {

// auto's reason for the products alone.
std::string auto_gemm_reason() {
  if (!torch_blas_is_mkl()) return "torch's BLAS is not MKL";
  if (cpu_is_intel()) return "MKL on an Intel CPU";
  if (!cpu_isa_has_avx512(active_cpu_isa()))
    return std::string("MKL on a non-Intel CPU, but the instruction set is ") +
           cpu_isa_name(active_cpu_isa());
  return "MKL on a non-Intel AVX-512 CPU runs its AVX2 kernels";
}

}  // namespace

std::string cpu_gemm_reason() {
  const std::string mode = cpu_gemm_name(cpu_gemm_mode());
  const std::string used = use_packed_sgemm() ? "packed" : "blas";
  if (cpu_gemm_mode() != CpuGemm::kAuto) return used + " (" + kGemmEnv + " or set: " + mode + ")";
  const bool winograd = use_packed_micro_kernels() && !use_packed_sgemm();
  const char* convolutions =
      winograd ? "; Winograd convolutions on the packed micro-kernel"
      : auto_convolutions_on_blas()
          ? "; convolutions on im2col + the BLAS: a non-Intel CPU without AVX-512"
          : "";
  return used + " (auto: " + auto_gemm_reason() + convolutions + ")";
}

}  // namespace ortmodule
