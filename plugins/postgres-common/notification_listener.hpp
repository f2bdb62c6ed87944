// The LISTEN side of LISTEN/NOTIFY: one dedicated connection that waits for
// notifications on the plugin's two channels and turns them into
// conveyor_notify_fn calls.
//
//   jobs channel     payload: queue name          -> CONVEYOR_NOTIFY_JOBS
//   later channel    payload: "<run_at_us> <queue>" -> CONVEYOR_NOTIFY_JOBS for
//                    queue once run_at has come by this process's clock
//                    (CONVEYOR_CAP_NOTIFY_DUE; due_wakes.hpp)
//   control channel  payload: "limits:" + queue   -> CONVEYOR_NOTIFY_RATE_LIMITS
//                    payload: "state:" + queue    -> CONVEYOR_NOTIFY_QUEUE_STATE
//
// Notifications sent while the connection was down are lost, so after every
// (re)connect the listener reports a catch-up: overrides changed, and new jobs
// in every known queue. The connection gets the plugin's session settings
// (idle_session_timeout = 0 among them: an idle listener is not closed by
// the server). A dead connection is reopened with backoff, quietly: a loss
// is reported once (wait throws, so the host logs one warning and knows
// notifications may have been missed), the reconnect attempts that fail
// after it are not (again only if it stays down for kReportAgainAfter), and
// an info line says when it is back. Delayed
// jobs announced while it was down are not learned again: the host's rare
// re-poll of drained queues picks them up.
#ifndef CONVEYOR_PLUGINS_POSTGRES_NOTIFICATION_LISTENER_HPP
#define CONVEYOR_PLUGINS_POSTGRES_NOTIFICATION_LISTENER_HPP

#include "due_wakes.hpp"
#include "pg_connect.hpp"

#include <conveyor/storage_plugin.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor::postgres {

// Channel names for a schema, bounded to PostgreSQL's 63-byte identifiers.
struct NotifyChannels {
  std::string jobs;
  std::string control;
  std::string later;  // delayed jobs: "<run_at_us> <queue>"
};
NotifyChannels channels_for_schema(const std::string& schema);

inline constexpr std::string_view kLimitsPrefix = "limits:";
inline constexpr std::string_view kQueueStatePrefix = "state:";

class NotificationListener {
 public:
  // known_queues lists the queues to wake after a reconnect (may throw).
  // later_seen, if set, hears of every delayed job announced on the later
  // channel (queue, run_at_us), as it arrives, on the waiting thread.
  using LaterSeen = std::function<void(std::string_view queue, int64_t run_at_us)>;
  NotificationListener(std::string conninfo, std::string target, SessionSettings session,
                       NotifyChannels channels,
                       std::function<std::vector<std::string>()> known_queues,
                       LaterSeen later_seen = {});
  ~NotificationListener();
  NotificationListener(const NotificationListener&) = delete;
  NotificationListener& operator=(const NotificationListener&) = delete;

  // Waits up to timeout_us for notifications and reports them through sink.
  // Returns normally on timeout. Throws sdk::Error(CONVEYOR_E_UNAVAILABLE)
  // when the connection is lost or cannot be opened: once per outage (and
  // again every kReportAgainAfter while it lasts, so the host keeps
  // distrusting notifications); between those it just waits out the timeout.
  void wait(int64_t timeout_us, const sdk::NotifySink& sink);

  // A lost connection that stays lost is reported again this often (the
  // host stops trusting notifications for 30 s after a reported failure).
  static constexpr std::chrono::seconds kReportAgainAfter{25};

  // The listening connection's backend pid (0: not connected). Tests.
  int backend_pid();

 private:
  class Receiver;
  using Clock = std::chrono::steady_clock;
  void connect();
  void drop() noexcept;
  // An outage begins (once) or goes on: throws message when the host must
  // hear of it, else returns.
  void report(const std::string& message);

  const std::string conninfo_;
  const std::string target_;
  const SessionSettings session_;
  const NotifyChannels channels_;
  const std::function<std::vector<std::string>()> known_queues_;
  const LaterSeen later_seen_;
  ReconnectBackoff backoff_;

  std::mutex mu_;  // one waiter at a time
  std::unique_ptr<PgConnection> conn_;
  std::vector<std::unique_ptr<Receiver>> receivers_;           // destroyed before conn_
  std::vector<std::pair<std::string, std::string>> received_;  // (channel, payload)
  bool catch_up_ = false;                                      // report a catch-up on the next wait
  DueWakes due_;                                               // mu_
  std::optional<Clock::time_point> outage_since_;              // mu_: lost, not back yet
  Clock::time_point reported_at_{};                            // mu_: last report to the host
};

}  // namespace conveyor::postgres

#endif  // CONVEYOR_PLUGINS_POSTGRES_NOTIFICATION_LISTENER_HPP
