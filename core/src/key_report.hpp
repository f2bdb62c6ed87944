// The keys of a queue for Engine::keys: storage's keys with ready jobs
// (list_ready_keys, every page) merged with what this process's dispatch unit
// knows live (KeyTurns::snapshot: running, throttled), busiest first.
#pragma once

#include <conveyor/config.hpp>
#include <conveyor/internal/limit_resolver.hpp>
#include <conveyor/internal/storage.hpp>
#include <conveyor/queue_report.hpp>

#include "key_turns.hpp"

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

namespace conveyor {

// Validates queue (its name) and limit (1..kKeysMax; ValidationError naming
// "limit"). live: the unit's keys when an engine runs here (empty for a
// queue that is not keyed or not known yet); nullopt: running and throttled
// unknown. Throws StorageError (CONVEYOR_E_UNSUPPORTED naming the plugin
// before ABI 1.4).
// limits: the run-time key settings (each key's limit, its source, its
// weight).
KeysReport build_keys_report(Storage& storage, const Config& config, const LimitResolver& limits,
                             std::string_view queue, uint32_t limit,
                             const std::optional<std::vector<KeyTurns::KeyView>>& live,
                             int64_t now_us);

}  // namespace conveyor
