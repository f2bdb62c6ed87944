#include "isolated_run.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>

namespace conveyor::conformance {
namespace {

using Clock = std::chrono::steady_clock;

struct Child {
  pid_t pid = -1;
  int fd = -1;  // read end of the report pipe
};

// fork + exec with the report pipe's write end kept open across exec.
Child spawn(const std::string& executable, const std::vector<std::string>& args,
            const std::string& filter, const std::vector<std::string>& gtest_args) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return {};
  std::vector<std::string> argv_s = {executable};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  argv_s.insert(argv_s.end(), {"--filter", filter, "--report-fd", std::to_string(fds[1])});
  if (!gtest_args.empty()) {
    argv_s.push_back("--");
    argv_s.insert(argv_s.end(), gtest_args.begin(), gtest_args.end());
  }
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::fflush(nullptr);  // the child's output must follow ours, not interleave with a buffer
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::fcntl(fds[1], F_SETFD, 0);  // keep the write end across exec
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    return {};
  }
  return Child{pid, fds[0]};
}

std::string describe_exit(int status) {
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    return "the test process died of signal " + std::to_string(sig) + " (" + ::strsignal(sig) + ")";
  }
  if (WIFEXITED(status))
    return "the test process exited with status " + std::to_string(WEXITSTATUS(status));
  return "the test process ended abnormally";
}

}  // namespace

std::string filter_excluding(const std::string& filter, const std::vector<std::string>& exclude) {
  std::string positive = filter, negative;
  if (const size_t dash = filter.find('-'); dash != std::string::npos) {
    positive = filter.substr(0, dash);
    negative = filter.substr(dash + 1);
  }
  if (positive.empty()) positive = "*";
  for (const std::string& name : exclude) negative += (negative.empty() ? "" : ":") + name;
  return negative.empty() ? positive : positive + "-" + negative;
}

IsolatedRun run_isolated(const std::string& executable, const std::vector<std::string>& args,
                         const std::string& filter, const std::vector<std::string>& gtest_args,
                         std::chrono::seconds test_timeout) {
  IsolatedRun run;
  ReportParser parser;
  for (;;) {
    std::vector<std::string> finished;
    for (const Outcome& o : parser.outcomes()) finished.push_back(o.test);
    const size_t before = finished.size();
    Child child = spawn(executable, args, filter_excluding(filter, finished), gtest_args);
    if (child.pid < 0) {
      run.process_errors.push_back(std::string("cannot start the test process: ") +
                                   std::strerror(errno));
      break;
    }
    parser.restart();
    std::string buffer;
    auto started = Clock::now();
    std::optional<std::string> watched;
    bool timed_out = false;
    bool exited = false;
    int status = 0;
    // Reads what is there (waiting up to wait_ms); false at end of file.
    auto pump = [&](int wait_ms) {
      pollfd p{child.fd, POLLIN, 0};
      const int ready = ::poll(&p, 1, wait_ms);
      if (ready <= 0) return ready == 0 || errno == EINTR;
      char chunk[4096];
      const ssize_t n = ::read(child.fd, chunk, sizeof chunk);
      if (n < 0) return errno == EINTR;
      if (n == 0) return false;
      buffer.append(chunk, static_cast<size_t>(n));
      for (size_t nl; (nl = buffer.find('\n')) != std::string::npos;) {
        parser.feed(std::string_view(buffer).substr(0, nl));
        buffer.erase(0, nl + 1);
      }
      return true;
    };
    for (;;) {
      const bool open = pump(200);
      // The child's own exit ends the stream even when a process it forked
      // (a test's helper) still holds the pipe.
      if (::waitpid(child.pid, &status, WNOHANG) == child.pid) {
        exited = true;
        for (pollfd p{child.fd, POLLIN, 0}; ::poll(&p, 1, 0) > 0 && pump(0);) {
        }
        break;
      }
      if (!open) break;
      if (parser.running() != watched) {
        watched = parser.running();
        started = Clock::now();
      }
      if (watched && !timed_out && Clock::now() - started > test_timeout) {
        ::kill(child.pid, SIGKILL);
        parser.end_running(Result::kTimedOut,
                           "did not finish within " + std::to_string(test_timeout.count()) +
                               " s (a hang or deadlock in the plugin?); the test process was "
                               "killed");
        timed_out = true;
      }
    }
    ::close(child.fd);
    while (!exited && ::waitpid(child.pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (parser.done()) {
      if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0))
        run.process_errors.push_back(describe_exit(status) +
                                     " after all tests had finished (see the output above, e.g. "
                                     "a sanitizer report)");
      break;
    }
    if (parser.running()) {
      parser.end_running(Result::kCrashed,
                         describe_exit(status) + " during this test (see the output above)");
    } else if (!timed_out) {
      // Died between tests, or never started one: not attributable, and a
      // restart would do the same again.
      if (parser.outcomes().size() == before)
        run.process_errors.push_back(describe_exit(status) + " before running any test");
      else
        run.process_errors.push_back(describe_exit(status) + " between tests");
      break;
    }
    std::printf("conveyor-conformance: continuing with the remaining tests in a new process\n");
  }
  run.outcomes = parser.outcomes();
  return run;
}

}  // namespace conveyor::conformance
