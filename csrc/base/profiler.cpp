#include "base/profiler.h"

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>

namespace ortmodule {
namespace {
std::atomic<bool> g_enabled{false};
std::mutex g_mu;
std::map<std::string, OpTiming>& op_timings(bool backward) {
  static auto* forward = new std::map<std::string, OpTiming>();
  static auto* backward_ops = new std::map<std::string, OpTiming>();
  return backward ? *backward_ops : *forward;
}
std::map<std::string, GemmTiming>& gemm_timings() {
  static auto* t = new std::map<std::string, GemmTiming>();
  return *t;
}
std::map<std::string, OpTiming>& phase_timings() {
  static auto* t = new std::map<std::string, OpTiming>();
  return *t;
}

void record(std::map<std::string, OpTiming>& table, const std::string& key, double seconds) {
  std::lock_guard<std::mutex> lock(g_mu);
  OpTiming& t = table[key];
  ++t.calls;
  t.seconds += seconds;
}

std::map<std::string, OpTiming> snapshot(std::map<std::string, OpTiming>& table, bool reset) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::map<std::string, OpTiming> out = table;
  if (reset) table.clear();
  return out;
}
}  // namespace

void set_profiling(bool enabled) { g_enabled = enabled; }
bool profiling_enabled() { return g_enabled.load(std::memory_order_relaxed); }

void record_op_time(const std::string& op, double seconds, bool backward) {
  record(op_timings(backward), op, seconds);
}

std::map<std::string, OpTiming> profile_snapshot(bool reset) {
  std::map<std::string, OpTiming> out = snapshot(op_timings(false), reset);
  for (const auto& [op, t] : snapshot(op_timings(true), reset)) {
    OpTiming& sum = out[op];
    sum.calls += t.calls;
    sum.seconds += t.seconds;
  }
  return out;
}

std::map<std::string, OpTiming> op_snapshot(bool backward, bool reset) {
  return snapshot(op_timings(backward), reset);
}

std::atomic<const OpEventHooks*>& installed_op_event_hooks() {
  static std::atomic<const OpEventHooks*> hooks{nullptr};
  return hooks;
}

void set_op_event_hooks(const OpEventHooks* hooks) {
  installed_op_event_hooks().store(hooks, std::memory_order_release);
}

void record_phase_time(const char* phase, double seconds) {
  record(phase_timings(), phase, seconds);
}

std::map<std::string, OpTiming> phase_snapshot(bool reset) {
  return snapshot(phase_timings(), reset);
}

void record_gemm_time(bool trans_a, bool trans_b, int64_t batch, int64_t M, int64_t N, int64_t K,
                      double seconds) {
  std::string key = std::string(trans_a ? "T" : "N") + (trans_b ? "T " : "N ");
  if (batch != 1) key += std::to_string(batch) + " x ";
  key += std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K);
  std::lock_guard<std::mutex> lock(g_mu);
  GemmTiming& t = gemm_timings()[key];
  ++t.calls;
  t.seconds += seconds;
  t.flops += 2.0 * static_cast<double>(batch) * static_cast<double>(M) * static_cast<double>(N) *
             static_cast<double>(K);
}

std::map<std::string, GemmTiming> gemm_snapshot(bool reset) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::map<std::string, GemmTiming> out = gemm_timings();
  if (reset) gemm_timings().clear();
  return out;
}

}  // namespace ortmodule
