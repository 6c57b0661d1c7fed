#include "runtime/profiler.h"

#include <atomic>
#include <mutex>

namespace ortmodule {
namespace {
std::atomic<bool> g_enabled{false};
std::mutex g_mu;
std::map<std::string, OpTiming>& op_timings() {
  static auto* t = new std::map<std::string, OpTiming>();
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

void record_op_time(const std::string& op, double seconds) { record(op_timings(), op, seconds); }

std::map<std::string, OpTiming> profile_snapshot(bool reset) {
  return snapshot(op_timings(), reset);
}

void record_phase_time(const char* phase, double seconds) {
  record(phase_timings(), phase, seconds);
}

std::map<std::string, OpTiming> phase_snapshot(bool reset) {
  return snapshot(phase_timings(), reset);
}

}  // namespace ortmodule
