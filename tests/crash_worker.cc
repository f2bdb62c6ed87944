// A worker process for the crash tests: the engine with a "record" job kind
// that appends "<job id> <pid>" to a file before running the job (one
// O_APPEND write, so lines from several processes never interleave), then
// sleeps the payload's "ms". Runs until SIGTERM/SIGINT (graceful stop), or
// until killed.
//   crash_worker CONFIG RECORD_FILE
#include "worker_process_start.hpp"

#include <conveyor/engine.hpp>

#include <signal.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <thread>

// libpqxx 6.4 leaks the PGresult of a statement whose connection broke while
// it ran (a few KB per lost connection; fixed in libpqxx 7): the PostgreSQL
// restart test provokes exactly that, so LeakSanitizer is told about this
// one path, as in plugins/postgres-common/pg_test_support.cc. Any other leak
// still fails.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:pqxx::connection_base::exec_prepared\n"
         "leak:pqxx::connection_base::register_prepared\n"
         "leak:pqxx::connection_base::exec\n"
         // The same leak seen through an unsymbolised libpqxx frame (a
         // truncated stack names only the module): anything libpqxx itself
         // allocated. Our own allocations never have a libpqxx frame.
         "leak:libpqxx-6.4.so\n";
}

int main(int argc, char** argv) {
  conveyor::test::WorkerProcess process;
  if (const int rc = conveyor::test::start_worker_process(argc, argv, "RECORD_FILE",
                                                          "open record file", process))
    return rc;
  const int fd = process.fd;
  conveyor::Engine engine(conveyor::load_config_file(argv[1]));
  engine.register_handler("record", [fd](const conveyor::Job& job) {
    const std::string line = std::to_string(job.id) + " " + std::to_string(::getpid()) + "\n";
    if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      throw std::runtime_error("cannot write the record file");
    const int ms = nlohmann::json::parse(job.payload).value("ms", 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  });
  engine.start();
  int sig = 0;
  sigwait(&process.stop_signals, &sig);
  engine.stop();
  ::close(fd);
  return 0;
}
