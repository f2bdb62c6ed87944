// Fuzzes the config parser: any bytes either parse into a Config or raise a
// ConfigError; nothing else may escape, crash or trip a sanitizer. An empty
// environment keeps runs reproducible.
#include <conveyor/config.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const conveyor::EnvLookup no_env = [](const char*) -> std::optional<std::string> {
    return std::nullopt;
  };
  try {
    conveyor::Config c = conveyor::parse_config(
        std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.toml", no_env);
    // A config that parsed must be internally consistent.
    if (c.engine.retry_backoff_base_ms > c.engine.retry_backoff_max_ms) __builtin_trap();
    for (const auto& [name, q] : c.queues)
      if (q.rate_limit && (q.rate_limit->burst < 1 || !(q.rate_limit->rate_per_sec > 0)))
        __builtin_trap();
  } catch (const conveyor::ConfigError&) {
  }
  return 0;
}
