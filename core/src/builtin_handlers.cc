#include <conveyor/engine.hpp>
#include <conveyor/validation.hpp>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <string>
#include <thread>

namespace conveyor {

int64_t parse_sleep_payload(std::string_view payload) {
  constexpr int64_t kMaxMs = 3'600'000;
  constexpr const char* kForm =
      "sleep job payload: must be a JSON object {\"ms\": N}, N a whole "
      "number of milliseconds from 0 to 3600000";
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(payload.empty() ? std::string_view("{}") : payload);
  } catch (const nlohmann::json::exception& e) {
    throw ValidationError("payload", std::string(kForm) + "; it is not JSON: " + e.what());
  }
  if (!doc.is_object())
    throw ValidationError("payload", std::string(kForm) + "; got " + doc.type_name());
  const auto it = doc.find("ms");
  if (it == doc.end() || it->is_null()) return 0;
  const nlohmann::json& ms = *it;
  // 5 and 5.0 are the same number in JSON; 5.5 is not a whole one.
  const bool whole =
      ms.is_number_integer() || (ms.is_number_float() && std::isfinite(ms.get<double>()) &&
                                 std::trunc(ms.get<double>()) == ms.get<double>());
  if (!whole || ms.get<double>() < 0 || ms.get<double>() > static_cast<double>(kMaxMs))
    throw ValidationError("payload", fmt::format("sleep job payload: ms must be a whole number "
                                                 "from 0 to 3600000 (milliseconds), got {}",
                                                 ms.dump()));
  return static_cast<int64_t>(ms.get<double>());
}

void register_builtin_handlers(Engine& engine) {
  engine.register_handler("noop", [](const Job&) {});
  engine.register_handler("sleep", [](const Job& job) {
    int64_t ms = 0;
    try {
      ms = parse_sleep_payload(job.payload);
    } catch (const ValidationError& e) {
      // Enqueued before enqueue checked it, or straight into storage.
      throw PermanentError(e.what());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  });
}

}  // namespace conveyor
