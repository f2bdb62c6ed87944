// Conveyor embedded in a C++ program: configure in code, register a handler,
// enqueue, run, stop. Usage: embedded_example DB_PATH [PLUGIN_DIR]
// PLUGIN_DIR defaults to the plugin directory of the Conveyor it was built
// against (CONVEYOR_PACKAGE_PLUGIN_DIR, set by find_package(Conveyor)).
// Exits 0 when every job ran exactly once.
#include <conveyor/engine.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <set>
#include <thread>

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DB_PATH [PLUGIN_DIR]\n", argv[0]);
    return 2;
  }
  std::filesystem::remove(argv[1]);

  conveyor::Config config;  // or conveyor::load_config_file("conveyor.toml")
  config.storage.plugin = "sqlite";
  // The engine looks for plugins beside its executable (../lib/conveyor/plugins),
  // which a program of your own is not installed with: point it at Conveyor's.
  config.storage.plugin_dir = argc > 2 ? argv[2] : CONVEYOR_PACKAGE_PLUGIN_DIR;
  config.storage.options = {{"path", argv[1]}};
  config.engine.poll_interval_ms = 100;
  config.queues["greetings"].rate_limit = conveyor::RateLimit{200, 20};

  conveyor::Engine engine(config);
  std::mutex mu;
  std::multiset<std::string> greeted;
  engine.register_handler("greet", [&](const conveyor::Job& job) {
    std::lock_guard lock(mu);
    greeted.insert(job.payload);
  });
  engine.start();

  const int kJobs = 50;
  for (int i = 0; i < kJobs; ++i)
    engine.enqueue("greetings", "greet", "{\"name\":\"friend " + std::to_string(i) + "\"}");

  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (;;) {
    {
      std::lock_guard lock(mu);
      if (greeted.size() >= kJobs) break;
    }
    if (std::chrono::steady_clock::now() > deadline) {
      std::fprintf(stderr, "timed out: %zu of %d jobs ran\n", greeted.size(), kJobs);
      return 1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  engine.stop();

  std::set<std::string> distinct(greeted.begin(), greeted.end());
  for (const auto& q : engine.queues())
    std::printf("%s: %lld completed, limit %s\n", q.stats.queue.c_str(),
                static_cast<long long>(q.stats.completed), conveyor::to_string(q.limit.source));
  if (distinct.size() != static_cast<size_t>(kJobs) ||
      greeted.size() != static_cast<size_t>(kJobs)) {
    std::fprintf(stderr, "expected %d distinct jobs once each, got %zu runs of %zu jobs\n", kJobs,
                 greeted.size(), distinct.size());
    return 1;
  }
  std::printf("all %d jobs ran exactly once\n", kJobs);
  return 0;
}
