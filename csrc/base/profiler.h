// Optional timing of executor steps (off by default; one branch per step when off).
// Ops: the kernel alone, per op type, forward and backward apart. Phases: whole parts of a run (the
// executor's forward, each backward stage, the torch boundary around them), so that a benchmark can
// split a step into kernels, executor bookkeeping and boundary work
// (benchmarks/bench_step_overhead.py, benchmarks/profile_ops.py).
#pragma once

#include <atomic>
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
void record_op_time(const std::string& op, double seconds, bool backward);
// Accumulated kernel timings per op type since the last reset, forward and backward summed.
std::map<std::string, OpTiming> profile_snapshot(bool reset);
// The same, of forward's steps or of backward's, each reset on its own.
std::map<std::string, OpTiming> op_snapshot(bool backward, bool reset);
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

// Named events for an outside profiler, one per executed op. The engine has no torch
// headers: the Python extension installs hooks that open an at::RecordFunction
// (torch.profiler shows the op), the standalone C++ library installs none. An executor run
// asks once whether a profiler listens (op_event_listener); while none does, an op costs a
// null check.
struct OpEventHooks {
  bool (*listening)();
  void* (*begin)(const std::string& op_type, const std::string& node_name);
  void (*end)(void* event);
};
void set_op_event_hooks(const OpEventHooks* hooks);  // null: none
std::atomic<const OpEventHooks*>& installed_op_event_hooks();

// The installed hooks while a profiler listens on this thread, else null.
inline const OpEventHooks* op_event_listener() {
  const OpEventHooks* hooks = installed_op_event_hooks().load(std::memory_order_acquire);
  return hooks && hooks->listening() ? hooks : nullptr;
}

// An event around one op, where `hooks` (op_event_listener()) is set.
class OpEvent {
 public:
  OpEvent(const OpEventHooks* hooks, const std::string& op_type, const std::string& node_name)
      : hooks_(hooks) {
    if (hooks_) event_ = hooks_->begin(op_type, node_name);
  }
  ~OpEvent() {
    if (event_) hooks_->end(event_);
  }
  OpEvent(const OpEvent&) = delete;
  OpEvent& operator=(const OpEvent&) = delete;

 private:
  const OpEventHooks* hooks_;
  void* event_ = nullptr;
};

}  // namespace ortmodule
