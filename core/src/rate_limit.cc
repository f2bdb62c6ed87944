// RateLimit construction and LimitSource names (rate_limit.hpp).
#include <conveyor/rate_limit.hpp>
#include <conveyor/validation.hpp>

namespace conveyor {

RateLimit make_rate_limit(double rate_per_sec, int64_t burst, LimitScope scope) {
  validate_rate(rate_per_sec);
  validate_burst(burst, /*zero_means_auto=*/true);
  const uint32_t resolved = burst == 0 ? auto_burst(rate_per_sec) : static_cast<uint32_t>(burst);
  return RateLimit{rate_per_sec, resolved, scope};
}

const char* to_string(LimitScope scope) noexcept {
  return scope == LimitScope::kFleet ? "fleet" : "process";
}

LimitScope parse_limit_scope(std::string_view text) {
  if (text == "process") return LimitScope::kProcess;
  if (text == "fleet") return LimitScope::kFleet;
  throw ValidationError("scope",
                        "scope must be \"process\" (a bucket per process) or \"fleet\" "
                        "(one bucket for every process on the storage), got " +
                            quote_for_message(text));
}

const char* to_string(SwitchSource source) noexcept {
  return source == SwitchSource::kStorage ? "storage" : "config";
}

const char* to_string(LimitSource source) noexcept {
  switch (source) {
    case LimitSource::kDisabled:
      return "disabled";
    case LimitSource::kOverride:
      return "override";
    case LimitSource::kQueueConfig:
      return "queue-config";
    case LimitSource::kDefault:
      return "default";
    case LimitSource::kNone:
      return "none";
    case LimitSource::kBackoff:
      return "backoff";
    case LimitSource::kEveryKeyOverride:
      return "per-key-override";
  }
  return "none";
}

}  // namespace conveyor
