// The engine for scripts/soak-limits.sh: the configured storage and queues,
// and a "noop" job kind that does nothing but note when it started, as
// "<job id> <queue> <steady-clock ns>\n" appended to a file (one O_APPEND
// write per job, nothing kept in memory, so the process's RSS is the
// engine's). The first line, "0 engine-start <ns>", is written just before
// the engine starts: no rate limit can begin earlier. Runs until
// SIGTERM/SIGINT, then stops gracefully.
//   soak_worker CONFIG STARTS_FILE
#include "worker_process_start.hpp"

#include <conveyor/engine.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>

int main(int argc, char** argv) {
  conveyor::test::WorkerProcess process;
  if (const int rc = conveyor::test::start_worker_process(argc, argv, "STARTS_FILE",
                                                          "open starts file", process))
    return rc;
  const int fd = process.fd;
  auto note = [fd](int64_t id, const std::string& what) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::steady_clock::now().time_since_epoch())
                        .count();
    const std::string line = std::to_string(id) + " " + what + " " + std::to_string(ns) + "\n";
    if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      throw std::runtime_error("cannot write the starts file");
  };
  try {
    conveyor::Engine engine(conveyor::load_config_file(argv[1]));
    engine.register_handler("noop", [&note](const conveyor::Job& job) { note(job.id, job.queue); });
    note(0, "engine-start");
    engine.start();
    int sig = 0;
    sigwait(&process.stop_signals, &sig);
    engine.stop();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "soak_worker: %s\n", e.what());
    return 1;
  }
  ::close(fd);
  return 0;
}
