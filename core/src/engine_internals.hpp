// In-tree access to what the public Engine API does not offer: an engine
// built on a given storage (tests wrap storage to inject faults).
#pragma once

#include <conveyor/engine.hpp>
#include <conveyor/storage.hpp>

#include <memory>

namespace conveyor {

struct EngineInternals {
  static std::unique_ptr<Engine> make(Config config, const Clock& clock,
                                      std::shared_ptr<Storage> storage) {
    return std::unique_ptr<Engine>(new Engine(std::move(config), clock, std::move(storage)));
  }
};

}  // namespace conveyor
