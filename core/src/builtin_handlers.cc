#include <conveyor/engine.hpp>

#include <nlohmann/json.hpp>

#include <thread>

namespace conveyor {

void register_builtin_handlers(Engine& engine) {
  engine.register_handler("noop", [](const Job&) {});
  engine.register_handler("sleep", [](const Job& job) {
    int64_t ms = 0;
    try {
      auto payload = nlohmann::json::parse(job.payload.empty() ? "{}" : job.payload);
      ms = payload.value("ms", int64_t{0});
    } catch (const nlohmann::json::exception& e) {
      throw PermanentError(std::string("sleep: payload must be {\"ms\": N}: ") + e.what());
    }
    if (ms < 0 || ms > 3'600'000) throw PermanentError("sleep: ms must be between 0 and 3600000");
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  });
}

}  // namespace conveyor
