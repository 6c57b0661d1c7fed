// Optional per-op timing of executor steps (off by default; one branch per step
// when off). Used by benchmarks/profile_ops.py to find where a step spends time.
#pragma once

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
// Accumulated timings per op type since the last reset.
std::map<std::string, OpTiming> profile_snapshot(bool reset);

}  // namespace ortmodule
