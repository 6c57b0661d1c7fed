#include "runtime/profiler.h"

#include <atomic>
#include <mutex>

namespace ortmodule {
namespace {
std::atomic<bool> g_enabled{false};
std::mutex g_mu;
std::map<std::string, OpTiming>& timings() {
  static auto* t = new std::map<std::string, OpTiming>();
  return *t;
}
}  // namespace

void set_profiling(bool enabled) { g_enabled = enabled; }
bool profiling_enabled() { return g_enabled.load(std::memory_order_relaxed); }

void record_op_time(const std::string& op, double seconds) {
  std::lock_guard<std::mutex> lock(g_mu);
  OpTiming& t = timings()[op];
  ++t.calls;
  t.seconds += seconds;
}

std::map<std::string, OpTiming> profile_snapshot(bool reset) {
  std::lock_guard<std::mutex> lock(g_mu);
  std::map<std::string, OpTiming> out = timings();
  if (reset) timings().clear();
  return out;
}

}  // namespace ortmodule
