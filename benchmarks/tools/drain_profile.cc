// drain_profile: a single-threaded drain through a storage plugin's C table,
// timed per phase in wall and CPU seconds (CPU time is what the plugin's
// statements cost, and it is far less disturbed by other processes on a busy
// machine than wall time). Built as build/bin/conveyor-drain-profile:
//   conveyor-drain-profile <plugin.so> <db path> [jobs=200000] [batch=100]
// Under `valgrind --tool=callgrind` it counts instructions per job, which
// repeat exactly from run to run.
// It deletes <db path> (and its -wal, -shm) first.
#include <conveyor/storage_plugin.h>
#include <dlfcn.h>
#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

double cpu_s() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

// User-space instructions retired by this thread (deterministic enough to
// compare statement shapes on a noisy machine); -1 when perf events are not
// available.
int instr_fd = -1;
void open_instr() {
  perf_event_attr a{};
  a.size = sizeof a;
  a.type = PERF_TYPE_HARDWARE;
  a.config = PERF_COUNT_HW_INSTRUCTIONS;
  a.exclude_kernel = 1;
  a.exclude_hv = 1;
  instr_fd = static_cast<int>(syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
}
double instr() {
  long long v = 0;
  if (instr_fd < 0 || read(instr_fd, &v, sizeof v) != sizeof v) return -1;
  return static_cast<double>(v);
}

double wall_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

conveyor_str s(const std::string& v) { return {v.data(), v.size()}; }

void check(conveyor_status st, const conveyor_error& e, const char* what) {
  if (st == CONVEYOR_OK) return;
  std::fprintf(stderr, "%s failed (%d): %s\n", what, static_cast<int>(st), e.message);
  std::exit(1);
}

struct Claimed {
  std::vector<conveyor_lease> leases;
};

void on_job(void* ctx, const conveyor_job* j) {
  static_cast<Claimed*>(ctx)->leases.push_back({j->id, j->lease_token});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s <plugin.so> <db path> [jobs] [batch]\n", argv[0]);
    return 2;
  }
  const std::string db = argv[2];
  const long jobs = argc > 3 ? std::atol(argv[3]) : 200000;
  const uint32_t batch = argc > 4 ? static_cast<uint32_t>(std::atol(argv[4])) : 100;
  for (const char* suffix : {"", "-wal", "-shm"}) std::remove((db + suffix).c_str());
  void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "dlopen: %s\n", dlerror());
    return 1;
  }
  auto entry = reinterpret_cast<conveyor_plugin_entry_fn>(dlsym(lib, CONVEYOR_PLUGIN_ENTRY_SYMBOL));
  const conveyor_storage_plugin* t = entry(CONVEYOR_ABI_MAJOR, CONVEYOR_ABI_MINOR);
  conveyor_error err{};
  const std::string k_path = "path", queue = "q", kind = "noop", payload = "{}";
  conveyor_option opt{s(k_path), s(db)};
  conveyor_storage* h = nullptr;
  check(t->open(&opt, 1, &h, &err), err, "open");
  check(t->migrate(h, &err), err, "migrate");

  open_instr();
  double w0 = wall_s(), c0 = cpu_s();
  std::vector<conveyor_new_job> batch_jobs(
      1000, conveyor_new_job{s(queue), s(kind), s(payload), 0, 3, 0});
  std::vector<int64_t> ids(1000);
  for (long done = 0; done < jobs; done += 1000) {
    const size_t n = static_cast<size_t>(std::min<long>(1000, jobs - done));
    check(t->enqueue(h, batch_jobs.data(), n, ids.data(), &err), err, "enqueue");
  }
  double w1 = wall_s(), c1 = cpu_s();
  std::printf("enqueue %ld: %.3f s wall %.3f s cpu (%.0f jobs/s wall, %.2f us cpu/job)\n", jobs,
              w1 - w0, c1 - c0, jobs / (w1 - w0), (c1 - c0) * 1e6 / jobs);

  Claimed claimed;
  std::vector<conveyor_status> results(batch);
  double claim_cpu = 0, complete_cpu = 0, claim_in = 0, complete_in = 0;
  long drained = 0;
  int64_t token = 1;
  for (;;) {
    claimed.leases.clear();
    uint32_t got = 0;
    const double a = cpu_s(), ai = instr();
    check(t->claim(h, s(queue), batch, token++, 1, INT64_MAX / 2, &on_job, &claimed, &got, &err),
          err, "claim");
    const double b = cpu_s(), bi = instr();
    claim_cpu += b - a;
    claim_in += bi - ai;
    if (got == 0) break;
    check(t->complete(h, claimed.leases.data(), claimed.leases.size(), 2, results.data(), &err),
          err, "complete");
    complete_cpu += cpu_s() - b;
    complete_in += instr() - bi;
    drained += got;
  }
  double w2 = wall_s(), c2 = cpu_s();
  std::printf(
      "drain %ld: %.3f s wall %.3f s cpu (%.0f jobs/s wall, %.2f us cpu/job: claim %.2f, "
      "complete %.2f) instr/job: claim %.0f complete %.0f\n",
      drained, w2 - w1, c2 - c1, drained / (w2 - w1), (c2 - c1) * 1e6 / drained,
      claim_cpu * 1e6 / drained, complete_cpu * 1e6 / drained, claim_in / drained,
      complete_in / drained);
  t->close(h);
  return 0;
}
