// Run-time choice of the CPU instruction set for the vectorized kernels.
//
// The build targets plain x86-64 (SSE2); the AVX2 and AVX-512 variants live in files
// compiled with their own target flags (vec_avx2.cpp, vec_avx512.cpp) and are only
// called when the CPU supports them. The choice is made once: the best ISA the CPU
// has, or the one ORTMODULE_CPU_ISA=baseline|avx2|avx512|avx512bf16|amx names (validated here, the
// one place that reads it). The baseline path is the scalar loops of each kernel file;
// it stays the fallback and the oracle the vector paths are tested against.
#pragma once

#include <string>

#include "kernels/cpu/vec_kernels.h"

namespace ortmodule {

// avx512bf16: the AVX-512 kernels plus the packed bfloat16 GEMM (AVX512-BF16's vdpbf16ps,
// kernels/cpu/bgemm.h); below it, bfloat16 products widen their operands to float32.
// amx: avx512bf16 with the bfloat16 GEMM on AMX tiles (tdpbf16ps; Intel Xeon from Sapphire
// Rapids), where the OS grants this process the tile data (Linux 5.16 and later).
enum class CpuIsa { kBaseline, kAvx2, kAvx512, kAvx512Bf16, kAmx };

// "baseline", "avx2", "avx512", "avx512bf16", "amx".
const char* cpu_isa_name(CpuIsa isa);
// Inverse of cpu_isa_name; throws std::invalid_argument naming the accepted values.
CpuIsa parse_cpu_isa(const std::string& name);
// Whether the ISA's float32 kernels are the AVX-512 ones (avx512, avx512bf16, amx).
bool cpu_isa_has_avx512(CpuIsa isa);
// True where this CPU (and OS) runs the ISA and this build compiled its kernels.
bool cpu_isa_supported(CpuIsa isa);
// The ISA the kernels use: resolved on first call from ORTMODULE_CPU_ISA or the CPU.
CpuIsa active_cpu_isa();
// Switches the ISA for later kernel calls (tests run every supported path in one
// process); throws std::invalid_argument if this CPU cannot run it.
void set_cpu_isa(CpuIsa isa);

// The kernels of the active ISA (all entries null for the baseline).
const VecKernels& vec_kernels();

}  // namespace ortmodule
