#include "notification_listener.hpp"

#include "pg_errors.hpp"
#include "pg_log.hpp"

#include <pqxx/notification>

#include <algorithm>
#include <chrono>
#include <thread>

namespace conveyor::postgres {
namespace {

constexpr size_t kMaxIdentifier = 63;

// The clock delayed jobs' run_at is compared with: the host's wall clock,
// which claims in this process compare run_at with too.
int64_t wall_now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string bounded_channel(const std::string& prefix, const std::string& schema) {
  std::string name = prefix + schema;
  if (name.size() <= kMaxIdentifier) return name;
  // Too long: keep a readable start and make it unique with a hash (FNV-1a).
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : schema) h = (h ^ c) * 1099511628211ull;
  char hex[17];
  for (int i = 15; i >= 0; --i, h >>= 4) hex[i] = "0123456789abcdef"[h & 0xF];
  hex[16] = '\0';
  return prefix + schema.substr(0, kMaxIdentifier - prefix.size() - 17) + "_" + hex;
}

}  // namespace

NotifyChannels channels_for_schema(const std::string& schema) {
  return NotifyChannels{bounded_channel("conveyor_jobs_", schema),
                        bounded_channel("conveyor_ctl_", schema),
                        bounded_channel("conveyor_later_", schema)};
}

// Collects what libpqxx delivers on one channel; the listener translates it
// after the wait, outside libpqxx's callback.
class NotificationListener::Receiver : public pqxx::notification_receiver {
 public:
  Receiver(pqxx::connection_base& c, const std::string& channel,
           std::vector<std::pair<std::string, std::string>>& out)
      : pqxx::notification_receiver(c, channel), out_(out) {}
  void operator()(const std::string& payload, int /*backend_pid*/) override {
    out_.emplace_back(channel(), payload);
  }

 private:
  std::vector<std::pair<std::string, std::string>>& out_;
};

NotificationListener::NotificationListener(std::string conninfo, std::string target,
                                           SessionSettings session, NotifyChannels channels,
                                           std::function<std::vector<std::string>()> known_queues,
                                           LaterSeen later_seen)
    : conninfo_(std::move(conninfo)),
      target_(std::move(target)),
      session_(session),
      channels_(std::move(channels)),
      known_queues_(std::move(known_queues)),
      later_seen_(std::move(later_seen)) {}

NotificationListener::~NotificationListener() { drop(); }

void NotificationListener::drop() noexcept {
  receivers_.clear();  // before the connection they belong to
  conn_.reset();
}

void NotificationListener::connect() {
  try {
    conn_ = open_connection(conninfo_, target_, session_);
    // LISTEN first, then the catch-up: nothing sent in between is missed.
    receivers_.push_back(std::make_unique<Receiver>(conn_->conn, channels_.jobs, received_));
    receivers_.push_back(std::make_unique<Receiver>(conn_->conn, channels_.control, received_));
    receivers_.push_back(std::make_unique<Receiver>(conn_->conn, channels_.later, received_));
    if (!conn_->conn.is_open()) throw pqxx::broken_connection("connection lost during LISTEN");
  } catch (const sdk::Error& e) {
    drop();
    backoff_.failed(e.what());
    throw;
  } catch (...) {
    Failure f = classify_current_exception(false);
    drop();
    const std::string msg = "cannot LISTEN on PostgreSQL at " + target_ + ": " + f.message;
    backoff_.failed(msg);
    throw sdk::Error(CONVEYOR_E_UNAVAILABLE, msg);
  }
  backoff_.succeeded();
  catch_up_ = true;
  if (outage_since_) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - *outage_since_);
    log_info("the LISTEN connection to PostgreSQL at " + target_ + " is back after " +
             std::to_string(ms.count()) + " ms; notifications work again");
    outage_since_.reset();
  }
}

void NotificationListener::report(const std::string& message) {
  const auto now = Clock::now();
  if (outage_since_ && now - reported_at_ < kReportAgainAfter) return;
  std::string text = message;
  if (outage_since_) {
    text += " (down for " +
            std::to_string(
                std::chrono::duration_cast<std::chrono::seconds>(now - *outage_since_).count()) +
            " s; still retrying)";
  } else {
    outage_since_ = now;
    text += " (retrying quietly; a line follows when it is back)";
  }
  reported_at_ = now;
  throw sdk::Error(CONVEYOR_E_UNAVAILABLE, text);
}

int NotificationListener::backend_pid() {
  std::lock_guard lock(mu_);
  return conn_ && conn_->conn.is_open() ? conn_->conn.backendpid() : 0;
}

void NotificationListener::wait(int64_t timeout_us, const sdk::NotifySink& sink) {
  std::lock_guard lock(mu_);
  timeout_us = std::max<int64_t>(timeout_us, 0);
  if (!conn_) {
    if (auto left = backoff_.remaining(); left.count() > 0) {
      // Wakes already owed need no connection: keep them on time.
      std::chrono::microseconds nap =
          std::min<std::chrono::microseconds>(left, std::chrono::microseconds(timeout_us));
      if (const std::optional<int64_t> next = due_.next())
        nap = std::clamp(std::chrono::microseconds(*next - wall_now_us()),
                         std::chrono::microseconds(0), nap);
      std::this_thread::sleep_for(nap);
      for (const std::string& q : due_.take_due(wall_now_us())) sink(CONVEYOR_NOTIFY_JOBS, q);
      if (outage_since_) report(backoff_.last_error());  // only when due again
      return;
    }
    try {
      connect();
    } catch (const sdk::Error& e) {
      report(e.what());
      return;  // already reported in this outage
    }
  }

  std::vector<std::string> woken;
  bool limits_changed = false;
  if (catch_up_) {
    try {
      woken = known_queues_();
      limits_changed = true;
      catch_up_ = false;
    } catch (...) {
      // The pool is failing too; the engine's polling covers this while the
      // catch-up is retried on the next wait.
    }
  }

  // A delayed job coming due ends the wait, as a notification would.
  if (const std::optional<int64_t> next = due_.next())
    timeout_us = std::clamp<int64_t>(*next - wall_now_us(), 0, timeout_us);

  received_.clear();
  try {
    if (!conn_->conn.is_open()) throw pqxx::broken_connection("listen connection closed");
    if (limits_changed || timeout_us == 0) {
      conn_->conn.get_notifs();  // report at once; do not wait
    } else {
      conn_->conn.await_notification(static_cast<long>(timeout_us / 1'000'000),
                                     static_cast<long>(timeout_us % 1'000'000));
    }
    if (!conn_->conn.is_open()) throw pqxx::broken_connection("listen connection closed");
  } catch (...) {
    Failure f = classify_current_exception(false);
    f.kind = FailureKind::kConnectionLost;
    drop();
    report("lost the LISTEN connection to PostgreSQL at " + target_ + ": " +
           explain(f, session_.statement_timeout_ms));
    return;
  }

  if (limits_changed) sink(CONVEYOR_NOTIFY_RATE_LIMITS, {});
  for (const std::string& q : woken) sink(CONVEYOR_NOTIFY_JOBS, q);
  for (const auto& [channel, payload] : received_) {
    std::string_view p = payload;
    if (channel == channels_.jobs) {
      sink(CONVEYOR_NOTIFY_JOBS, p);
    } else if (channel == channels_.later) {
      if (auto later = parse_later_payload(p)) {
        if (later_seen_) later_seen_(later->second, later->first);
        due_.add(later->first, std::move(later->second));
      }
    } else if (p.substr(0, kLimitsPrefix.size()) == kLimitsPrefix) {
      sink(CONVEYOR_NOTIFY_RATE_LIMITS, p.substr(kLimitsPrefix.size()));
    } else if (p.substr(0, kQueueStatePrefix.size()) == kQueueStatePrefix) {
      sink(CONVEYOR_NOTIFY_QUEUE_STATE, p.substr(kQueueStatePrefix.size()));
    }
  }
  received_.clear();
  // Owed wakes whose time has come, announced on an earlier wait or just now
  // (by a process whose clock is ahead of ours).
  for (const std::string& q : due_.take_due(wall_now_us())) sink(CONVEYOR_NOTIFY_JOBS, q);
}

}  // namespace conveyor::postgres
