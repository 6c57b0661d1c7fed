// Optional timing of executor steps (off by default; one branch per step when off).
// Ops: the kernel alone, per op type. Phases: whole parts of a run (the executor's
// forward, each backward stage, the torch boundary around them), so that a benchmark can
// split a step into kernels, executor bookkeeping and boundary work
// (benchmarks/bench_step_overhead.py, benchmarks/profile_ops.py).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>

namespace ortmodule {

struct OpTiming {
  int64_t calls = 0;
  double seconds = 0;
};

void set_profiling(bool enabled);
bool profiling_enabled();
void record_op_time(const std::string& op, double seconds);
// Accumulated kernel timings per op type since the last reset.
std::map<std::string, OpTiming> profile_snapshot(bool reset);
void record_phase_time(const char* phase, double seconds);
// Accumulated timings per phase since the last reset.
std::map<std::string, OpTiming> phase_snapshot(bool reset);

// GEMM calls by shape: "<op(A)><op(B)> [batch x ]MxNxK" (N: as stored, T: transposed), so a
// profile can show which products run below the BLAS's best (benchmarks/profile_ops.py).
// Seconds count the whole call; flops = 2*batch*M*N*K per call.
struct GemmTiming {
  int64_t calls = 0;
  double seconds = 0;
  double flops = 0;
};
void record_gemm_time(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                      double seconds);
std::map<std::string, GemmTiming> gemm_snapshot(bool reset);

// Times one GEMM call into the profiler's shape table while profiling is on.
class GemmTimer {
 public:
  GemmTimer(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K)
      : on_(profiling_enabled()), ta_(trans_a), tb_(trans_b), batch_(batch), m_(M), n_(N), k_(K) {
    if (on_) start_ = std::chrono::steady_clock::now();
  }
  ~GemmTimer() {
    if (!on_) return;
    std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
    record_gemm_time(ta_, tb_, batch_, m_, n_, k_, elapsed.count());
  }
  GemmTimer(const GemmTimer&) = delete;
  GemmTimer& operator=(const GemmTimer&) = delete;

 private:
  bool on_, ta_, tb_;
  int64_t batch_, m_, n_, k_;
  std::chrono::steady_clock::time_point start_;
};

// Records the time from construction to destruction as `phase` while profiling is on.
class PhaseTimer {
 public:
  explicit PhaseTimer(const char* phase) : phase_(profiling_enabled() ? phase : nullptr) {
    if (phase_) start_ = std::chrono::steady_clock::now();
  }
  ~PhaseTimer() {
    if (!phase_) return;
    std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start_;
    record_phase_time(phase_, elapsed.count());
  }
  PhaseTimer(const PhaseTimer&) = delete;
  PhaseTimer& operator=(const PhaseTimer&) = delete;

 private:
  const char* phase_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace ortmodule
