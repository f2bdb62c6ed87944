#include "queue_options.hpp"

#include <array>
#include <string_view>

namespace conveyor::pgqueue {

QueueOptions parse_queue_options(const sdk::Options& options) {
  static constexpr std::array<std::string_view, 2> kOwnKeys = {"slots", "rotation_interval_ms"};
  QueueOptions out;
  out.pg = postgres::parse_options(options, kOwnKeys);
  if (!options.has("schema")) out.pg.schema = kDefaultSchema;
  out.slots = postgres::parse_bounded(options, "slots", kDefaultSlots, kMinSlots, kMaxSlots);
  out.rotation_interval_ms = postgres::parse_bounded(
      options, "rotation_interval_ms", kDefaultRotationMs, kMinRotationMs, kMaxRotationMs);
  return out;
}

}  // namespace conveyor::pgqueue
