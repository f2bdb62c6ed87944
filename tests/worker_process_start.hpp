// The start shared by the engine processes the tests and scripts run
// (tests/crash_worker, tests/soak_worker): `NAME CONFIG FILE` on the command
// line, SIGINT and SIGTERM blocked (the engine's threads, started later,
// inherit the mask; main awaits them with sigwait for a graceful stop), and
// FILE opened for appending (O_APPEND: one write per line, so lines from
// several processes never interleave).
#pragma once

#include <fcntl.h>
#include <signal.h>

#include <cstdio>

namespace conveyor::test {

struct WorkerProcess {
  sigset_t stop_signals;
  int fd = -1;  // FILE, open for appending
};

// Returns 0 when the process may go on (argv[1] is CONFIG), else the exit
// code to return from main: 2 on a bad command line (usage names file_arg),
// 1 when FILE cannot be opened (perror with open_what).
inline int start_worker_process(int argc, char** argv, const char* file_arg, const char* open_what,
                                WorkerProcess& out) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CONFIG %s\n", argv[0], file_arg);
    return 2;
  }
  sigemptyset(&out.stop_signals);
  sigaddset(&out.stop_signals, SIGINT);
  sigaddset(&out.stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &out.stop_signals, nullptr);

  out.fd = ::open(argv[2], O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (out.fd < 0) {
    std::perror(open_what);
    return 1;
  }
  return 0;
}

}  // namespace conveyor::test
