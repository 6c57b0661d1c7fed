#include "kernels/cpu/cpu_isa.h"

#include <atomic>
#include <cstdlib>
#include <stdexcept>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && (defined(__x86_64__) || defined(__i386__))
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace ortmodule {

namespace {

constexpr const char* kIsaEnv = "ORTMODULE_CPU_ISA";

// Linux hands a process AMX's tile data (8 KiB more per thread's saved state) only when asked
// (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA); without it the first tile
// instruction is a fault. Asked once; false where the kernel refuses or is older than 5.16.
// CPUID leaf 7's AMX-TILE (EDX bit 24) and AMX-BF16 (bit 22): __builtin_cpu_supports knows
// them in GCC, not in every clang.
bool cpu_has_amx_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  return (edx >> 24 & 1u) && (edx >> 22 & 1u);
#else
  return false;
#endif
}

bool amx_permitted() {
#if defined(__linux__) && defined(__x86_64__) && defined(SYS_arch_prctl)
  static const bool permitted = [] {
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return permitted;
#else
  return false;
#endif
}

bool cpu_has(CpuIsa isa) {
#if defined(__x86_64__) || defined(__i386__)
  // __builtin_cpu_supports also checks that the OS saves the wider registers.
  switch (isa) {
    case CpuIsa::kBaseline:
      return true;
    case CpuIsa::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case CpuIsa::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx2") &&
             __builtin_cpu_supports("fma");
    case CpuIsa::kAvx512Bf16:
      return cpu_has(CpuIsa::kAvx512) && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
    case CpuIsa::kAmx:
      return cpu_has(CpuIsa::kAvx512Bf16) && cpu_has_amx_bf16() && amx_permitted();
  }
  return false;
#else
  return isa == CpuIsa::kBaseline;
#endif
}

const VecKernels* kernels_of(CpuIsa isa) {
  static const VecKernels kBaselineKernels{};
  switch (isa) {
    case CpuIsa::kAvx2:
      return vec_kernels_avx2();
    case CpuIsa::kAvx512:
      return vec_kernels_avx512();
    case CpuIsa::kAvx512Bf16:
      return vec_kernels_avx512_bf16();
    case CpuIsa::kAmx:
      return vec_kernels_amx();
    case CpuIsa::kBaseline:
      break;
  }
  return &kBaselineKernels;
}

CpuIsa best_supported() {
  if (cpu_isa_supported(CpuIsa::kAmx)) return CpuIsa::kAmx;
  if (cpu_isa_supported(CpuIsa::kAvx512Bf16)) return CpuIsa::kAvx512Bf16;
  if (cpu_isa_supported(CpuIsa::kAvx512)) return CpuIsa::kAvx512;
  if (cpu_isa_supported(CpuIsa::kAvx2)) return CpuIsa::kAvx2;
  return CpuIsa::kBaseline;
}

CpuIsa resolve_from_environment() {
  const char* env = std::getenv(kIsaEnv);
  if (!env || !*env) return best_supported();
  CpuIsa isa;
  try {
    isa = parse_cpu_isa(env);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(std::string(kIsaEnv) + ": " + e.what());
  }
  if (!cpu_isa_supported(isa))
    throw std::invalid_argument(std::string(kIsaEnv) + "=" + env +
                                " names an instruction set this CPU or build cannot run; "
                                "unset it or choose " +
                                cpu_isa_name(best_supported()) + " or lower");
  return isa;
}

std::atomic<const VecKernels*> g_active_kernels{nullptr};
std::atomic<int> g_active_isa{-1};

}  // namespace

const char* cpu_isa_name(CpuIsa isa) {
  switch (isa) {
    case CpuIsa::kBaseline:
      return "baseline";
    case CpuIsa::kAvx2:
      return "avx2";
    case CpuIsa::kAvx512:
      return "avx512";
    case CpuIsa::kAvx512Bf16:
      return "avx512bf16";
    case CpuIsa::kAmx:
      return "amx";
  }
  return "unknown";
}

CpuIsa parse_cpu_isa(const std::string& name) {
  for (CpuIsa isa :
       {CpuIsa::kBaseline, CpuIsa::kAvx2, CpuIsa::kAvx512, CpuIsa::kAvx512Bf16, CpuIsa::kAmx})
    if (name == cpu_isa_name(isa)) return isa;
  throw std::invalid_argument(
      "\"" + name +
      "\" is not a CPU instruction set; expected baseline, avx2, avx512, avx512bf16 or amx");
}

bool cpu_isa_has_avx512(CpuIsa isa) {
  return isa == CpuIsa::kAvx512 || isa == CpuIsa::kAvx512Bf16 || isa == CpuIsa::kAmx;
}

bool cpu_isa_supported(CpuIsa isa) { return cpu_has(isa) && kernels_of(isa) != nullptr; }

void set_cpu_isa(CpuIsa isa) {
  if (!cpu_isa_supported(isa))
    throw std::invalid_argument(std::string("this CPU or build cannot run the ") +
                                cpu_isa_name(isa) + " kernels; the best it runs is " +
                                cpu_isa_name(best_supported()));
  // Kernels first: a reader that sees the ISA set also sees its kernels.
  g_active_kernels.store(kernels_of(isa));
  g_active_isa.store(static_cast<int>(isa));
}

namespace {
void ensure_resolved() {
  // Resolved once (thread-safe static); a bad ORTMODULE_CPU_ISA throws here, on the
  // first kernel call. An earlier set_cpu_isa wins over the environment.
  static const bool resolved = [] {
    const CpuIsa isa = resolve_from_environment();
    if (g_active_isa.load() < 0) {
      g_active_kernels.store(kernels_of(isa));
      g_active_isa.store(static_cast<int>(isa));
    }
    return true;
  }();
  (void)resolved;
}
}  // namespace

CpuIsa active_cpu_isa() {
  ensure_resolved();
  return static_cast<CpuIsa>(g_active_isa.load());
}

const VecKernels& vec_kernels() {
  const VecKernels* k = g_active_kernels.load();
  if (k) return *k;
  ensure_resolved();
  return *g_active_kernels.load();
}

}  // namespace ortmodule
