// What this process and this machine look like: CPU time used, threads, and
// the hardware the figures were measured on.
#pragma once

#include "results.hpp"

#include <cstdint>

namespace conveyor::bench {

// User + system CPU time of the whole process so far (getrusage), seconds.
double process_cpu_seconds();
// Threads of this process now (/proc/self/task).
uint32_t process_threads();
// Resident memory of this process now (/proc/self/statm), bytes; 0 if unknown.
int64_t process_rss_bytes();
// CPU model, online cores, kernel release, memory.
MachineInfo machine_info();

}  // namespace conveyor::bench
