#include "pg_test_support.hpp"

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <pqxx/nontransaction>
#include <pqxx/transaction>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <random>

// libpqxx 6.4 leaks the PGresult of a statement whose connection broke while
// it ran (connection_base::make_result asks the dead connection for its
// encoding and throws before the result is owned): a few KB per lost
// connection, fixed in libpqxx 7. The reconnect tests provoke exactly that,
// so LeakSanitizer is told about this one path; any other leak still fails.
extern "C" const char* __lsan_default_suppressions() {
  return "leak:pqxx::connection_base::exec_prepared\n"
         "leak:pqxx::connection_base::register_prepared\n"
         "leak:pqxx::connection_base::exec\n";
}

namespace conveyor::postgres::test {

std::optional<std::string> test_dsn() {
  const char* v = std::getenv("CONVEYOR_TEST_PG_DSN");
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

bool server_required() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

std::map<std::string, std::string> dsn_fields(const std::string& dsn) {
  char* errmsg = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(dsn.c_str(), &errmsg);
  std::map<std::string, std::string> out;
  if (parsed == nullptr) {
    if (errmsg != nullptr) PQfreemem(errmsg);
    return out;
  }
  for (PQconninfoOption* o = parsed; o->keyword != nullptr; ++o)
    if (o->val != nullptr) out.emplace(o->keyword, o->val);
  PQconninfoFree(parsed);
  return out;
}

std::string keyvalue_dsn(const std::map<std::string, std::string>& fields) {
  std::string out;
  for (const auto& [k, v] : fields) {
    out += (out.empty() ? "" : " ") + k + "='";
    for (char c : v) {
      if (c == '\'' || c == '\\') out += '\\';
      out += c;
    }
    out += "'";
  }
  return out;
}

TcpProxy::TcpProxy(const std::string& target_host, int target_port)
    : host_(target_host), target_port_(target_port) {
  if (::pipe(wake_) != 0) throw std::runtime_error("pipe failed");
  listen_on_port();
  thread_ = std::thread([this] { loop(); });
}

TcpProxy::~TcpProxy() {
  request(3);
  thread_.join();
  ::close(wake_[0]);
  ::close(wake_[1]);
}

void TcpProxy::listen_on_port() {
  listener_ = ::socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  ::setsockopt(listener_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port_));
  if (::bind(listener_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener_, 64) != 0)
    throw std::runtime_error("proxy cannot listen on port " + std::to_string(port_));
  socklen_t len = sizeof addr;
  ::getsockname(listener_, reinterpret_cast<sockaddr*>(&addr), &len);
  port_ = ntohs(addr.sin_port);
}

void TcpProxy::go_down() { request(1); }
void TcpProxy::come_back() { request(2); }

void TcpProxy::request(int command) {
  std::unique_lock lock(mu_);
  pending_ = command;
  const char c = static_cast<char>(command);
  if (::write(wake_[1], &c, 1) != 1) throw std::runtime_error("proxy wake-up failed");
  cv_.wait(lock, [&] { return pending_ == 0; });
}

void TcpProxy::loop() {
  std::vector<std::pair<int, int>> pairs;  // (client, server)
  auto close_all = [&] {
    for (auto [a, b] : pairs) {
      ::close(a);
      ::close(b);
    }
    pairs.clear();
  };
  for (;;) {
    std::vector<pollfd> fds{{wake_[0], POLLIN, 0}};
    if (listener_ >= 0) fds.push_back({listener_, POLLIN, 0});
    const size_t first_pair = fds.size(), polled = pairs.size();
    for (auto [a, b] : pairs) {
      fds.push_back({a, POLLIN, 0});
      fds.push_back({b, POLLIN, 0});
    }
    if (::poll(fds.data(), fds.size(), -1) < 0) continue;
    if (fds[0].revents != 0) {
      char c = 0;
      if (::read(wake_[0], &c, 1) == 1) {
        if (c == 1 || c == 3) {
          close_all();
          if (listener_ >= 0) ::close(listener_);
          listener_ = -1;
        } else if (c == 2 && listener_ < 0) {
          listen_on_port();
        }
        std::lock_guard lock(mu_);
        pending_ = 0;
        cv_.notify_all();
        if (c == 3) return;
      }
      continue;  // the fd set changed
    }
    std::vector<size_t> dead;
    for (size_t i = 0; i < polled; ++i) {
      for (int side = 0; side < 2; ++side) {
        const pollfd& p = fds[first_pair + 2 * i + side];
        if (p.revents == 0) continue;
        const int from = side == 0 ? pairs[i].first : pairs[i].second;
        const int to = side == 0 ? pairs[i].second : pairs[i].first;
        char buf[65536];
        ssize_t n = ::read(from, buf, sizeof buf);
        bool ok = n > 0;
        for (ssize_t off = 0; ok && off < n;) {
          ssize_t w = ::send(to, buf + off, static_cast<size_t>(n - off), MSG_NOSIGNAL);
          ok = w > 0;
          off += w;
        }
        if (!ok) {
          dead.push_back(i);
          break;
        }
      }
    }
    for (auto it = dead.rbegin(); it != dead.rend(); ++it) {
      ::close(pairs[*it].first);
      ::close(pairs[*it].second);
      pairs.erase(pairs.begin() + static_cast<std::ptrdiff_t>(*it));
    }
    // Accepted last: the pairs above are the ones fds was built from.
    if (listener_ >= 0 && fds[1].revents != 0) {
      int client = ::accept(listener_, nullptr, nullptr);
      if (client >= 0) {
        int server = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(static_cast<uint16_t>(target_port_));
        ::inet_pton(AF_INET, host_.c_str(), &addr.sin_addr);
        if (::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
          pairs.emplace_back(client, server);
        } else {
          ::close(server);
          ::close(client);
        }
      }
    }
  }
}

std::string with_application_name(const std::string& dsn, const std::string& name) {
  const bool uri = dsn.rfind("postgresql://", 0) == 0 || dsn.rfind("postgres://", 0) == 0;
  if (!uri) return dsn + " application_name=" + name;
  return dsn + (dsn.find('?') == std::string::npos ? "?" : "&") + "application_name=" + name;
}

std::string unique_name(const std::string& prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  uint64_t v = rng();
  std::string out = prefix;
  for (int i = 0; i < 16; ++i, v >>= 4) out += kHex[v & 0xF];
  return out;
}

std::string s(conveyor_str v) { return v.len == 0 ? std::string() : std::string(v.data, v.len); }

int64_t wall_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

namespace {

JobCopy copy_job(const conveyor_job* j) {
  JobCopy c;
  EXPECT_EQ(j->struct_size, sizeof(conveyor_job));
  EXPECT_EQ(j->reserved0, 0);
  c.id = j->id;
  c.state = j->state;
  c.queue = s(j->queue);
  c.kind = s(j->kind);
  c.payload = s(j->payload);
  c.last_error = s(j->last_error);
  c.priority = j->priority;
  c.attempt = j->attempt;
  c.max_attempts = j->max_attempts;
  c.run_at = j->run_at_us;
  c.created_at = j->created_at_us;
  c.finalized_at = j->finalized_at_us;
  c.lease_token = j->lease_token;
  c.lease_expires = j->lease_expires_us;
  return c;
}

void collect_job(void* ctx, const conveyor_job* j) {
  static_cast<std::vector<JobCopy>*>(ctx)->push_back(copy_job(j));
}

}  // namespace

void PgTest::SetUp() {
  api_ = conveyor_storage_plugin_entry(CONVEYOR_ABI_MAJOR, CONVEYOR_ABI_MINOR);
  ASSERT_NE(api_, nullptr) << "entry point refused the host's ABI version";
  CONVEYOR_REQUIRE_PG();
  dsn_ = *test_dsn();
  schema_ = unique_name("t_");
  admin_ = std::make_unique<pqxx::connection>(dsn_);
}

void PgTest::TearDown() {
  for (conveyor_storage* h : handles_) api_->close(h);
  handles_.clear();
  if (admin_) {
    try {
      pqxx::nontransaction tx(*admin_);
      tx.exec("DROP SCHEMA IF EXISTS \"" + schema_ + "\" CASCADE");
    } catch (const std::exception& e) {
      ADD_FAILURE() << "dropping test schema " << schema_ << ": " << e.what();
    }
  }
}

Opts PgTest::base_options() const {
  return Opts{{"dsn", with_application_name(dsn_, schema_)}, {"schema", schema_}};
}

conveyor_status PgTest::try_open(const Opts& opts, conveyor_storage** out, std::string* message) {
  std::vector<conveyor_option> raw;
  for (const auto& [k, v] : opts) raw.push_back({str(k), str(v)});
  conveyor_error err{};
  conveyor_status st = api_->open(raw.data(), raw.size(), out, &err);
  if (message != nullptr) *message = st == CONVEYOR_OK ? "" : err.message;
  if (st != CONVEYOR_OK) {
    EXPECT_EQ(err.code, st) << "err.code must match the status";
  }
  return st;
}

conveyor_storage* PgTest::open_store(const Opts& extra, bool migrate) {
  Opts opts = base_options();
  for (const auto& o : extra) {
    auto it = std::find_if(opts.begin(), opts.end(), [&](auto& e) { return e.first == o.first; });
    if (it != opts.end())
      it->second = o.second;
    else
      opts.push_back(o);
  }
  conveyor_storage* h = nullptr;
  std::string msg;
  conveyor_status st = try_open(opts, &h, &msg);
  EXPECT_EQ(st, CONVEYOR_OK) << "open failed: " << msg;
  if (st != CONVEYOR_OK) return nullptr;
  handles_.push_back(h);
  if (migrate) {
    conveyor_error err{};
    EXPECT_EQ(api_->migrate(h, &err), CONVEYOR_OK) << "migrate failed: " << err.message;
  }
  return h;
}

void PgTest::close_store(conveyor_storage* h) {
  auto it = std::find(handles_.begin(), handles_.end(), h);
  ASSERT_NE(it, handles_.end());
  handles_.erase(it);
  api_->close(h);
}

int64_t PgTest::enqueue(conveyor_storage* h, const std::string& queue, int32_t priority,
                        int64_t run_at, int32_t max_attempts, const std::string& payload,
                        const std::string& kind) {
  conveyor_new_job j{str(queue), str(kind), str(payload), priority, max_attempts, run_at};
  int64_t id = 0;
  conveyor_error err{};
  EXPECT_EQ(api_->enqueue(h, &j, 1, &id, &err), CONVEYOR_OK) << err.message;
  return id;
}

std::vector<int64_t> PgTest::enqueue_many(conveyor_storage* h, const std::string& queue, size_t n,
                                          int64_t run_at) {
  std::vector<conveyor_new_job> jobs(n, conveyor_new_job{str(queue), conveyor_str{"noop", 4},
                                                         conveyor_str{"{}", 2}, 0, 3, run_at});
  std::vector<int64_t> ids(n);
  conveyor_error err{};
  EXPECT_EQ(api_->enqueue(h, jobs.data(), n, ids.data(), &err), CONVEYOR_OK) << err.message;
  return ids;
}

std::vector<JobCopy> PgTest::claim(conveyor_storage* h, const std::string& queue, uint32_t max,
                                   int64_t token, int64_t now, int64_t expires,
                                   conveyor_status expect) {
  std::vector<JobCopy> out;
  uint32_t n = 12345;
  conveyor_error err{};
  conveyor_status st =
      api_->claim(h, str(queue), max, token, now, expires, collect_job, &out, &n, &err);
  EXPECT_EQ(st, expect) << err.message;
  if (st == CONVEYOR_OK) {
    EXPECT_EQ(n, out.size()) << "out_claimed must match the callbacks";
  }
  return out;
}

namespace {
using LeaseFn = conveyor_status (*)(conveyor_storage*, const conveyor_lease*, size_t, int64_t,
                                    conveyor_status*, conveyor_error*);
std::vector<conveyor_status> leases_op(LeaseFn fn, conveyor_storage* h,
                                       const std::vector<conveyor_lease>& leases, int64_t t) {
  std::vector<conveyor_status> results(leases.size(), -1);
  conveyor_error err{};
  EXPECT_EQ(fn(h, leases.data(), leases.size(), t, results.data(), &err), CONVEYOR_OK)
      << err.message;
  return results;
}
}  // namespace

std::vector<conveyor_status> PgTest::complete(conveyor_storage* h,
                                              const std::vector<conveyor_lease>& l, int64_t now) {
  return leases_op(api_->complete, h, l, now);
}
std::vector<conveyor_status> PgTest::release(conveyor_storage* h,
                                             const std::vector<conveyor_lease>& l, int64_t now) {
  return leases_op(api_->release, h, l, now);
}
std::vector<conveyor_status> PgTest::extend(conveyor_storage* h,
                                            const std::vector<conveyor_lease>& l, int64_t expires) {
  return leases_op(api_->extend_leases, h, l, expires);
}

conveyor_status PgTest::fail(conveyor_storage* h, conveyor_lease l, const std::string& text,
                             int64_t retry_at, int64_t now, std::string* msg) {
  conveyor_error err{};
  conveyor_status st = api_->fail(h, l, str(text), retry_at, now, &err);
  if (msg != nullptr) *msg = err.message;
  return st;
}

conveyor_status PgTest::get(conveyor_storage* h, int64_t id, int64_t now, JobCopy* out) {
  std::vector<JobCopy> got;
  conveyor_error err{};
  conveyor_status st = api_->get_job(h, id, now, collect_job, &got, &err);
  if (st == CONVEYOR_OK) {
    EXPECT_EQ(got.size(), 1u) << "get_job must call on_job exactly once";
    if (!got.empty() && out != nullptr) *out = got[0];
  } else {
    EXPECT_TRUE(got.empty()) << "no callback on error";
  }
  return st;
}

JobCopy PgTest::job(conveyor_storage* h, int64_t id, int64_t now) {
  JobCopy j;
  EXPECT_EQ(get(h, id, now, &j), CONVEYOR_OK) << "job " << id;
  return j;
}

std::vector<StatsCopy> PgTest::stats(conveyor_storage* h, int64_t now) {
  std::vector<StatsCopy> out;
  conveyor_error err{};
  EXPECT_EQ(api_->queue_stats(
                h, now,
                [](void* ctx, const conveyor_queue_stats* q) {
                  EXPECT_EQ(q->struct_size, sizeof(conveyor_queue_stats));
                  static_cast<std::vector<StatsCopy>*>(ctx)->push_back(
                      StatsCopy{s(q->queue), q->paused, q->pending, q->scheduled, q->running,
                                q->completed, q->failed, q->cancelled});
                },
                &out, &err),
            CONVEYOR_OK)
      << err.message;
  return out;
}

std::vector<LimitCopy> PgTest::limits(conveyor_storage* h) {
  std::vector<LimitCopy> out;
  conveyor_error err{};
  EXPECT_EQ(api_->list_rate_limits(
                h,
                [](void* ctx, const conveyor_rate_limit* l) {
                  EXPECT_EQ(l->struct_size, sizeof(conveyor_rate_limit));
                  static_cast<std::vector<LimitCopy>*>(ctx)->push_back(
                      LimitCopy{s(l->queue), l->rate_per_sec, l->burst, l->updated_at_us});
                },
                &out, &err),
            CONVEYOR_OK)
      << err.message;
  return out;
}

std::vector<std::pair<std::string, int32_t>> PgTest::queues(conveyor_storage* h) {
  std::vector<std::pair<std::string, int32_t>> out;
  conveyor_error err{};
  EXPECT_EQ(api_->list_queues(
                h,
                [](void* ctx, conveyor_str q, int32_t paused) {
                  static_cast<std::vector<std::pair<std::string, int32_t>>*>(ctx)->emplace_back(
                      s(q), paused);
                },
                &out, &err),
            CONVEYOR_OK)
      << err.message;
  return out;
}

int64_t PgTest::marker(conveyor_storage* h) {
  int64_t m = 0;
  conveyor_error err{};
  EXPECT_EQ(api_->change_marker(h, &m, &err), CONVEYOR_OK) << err.message;
  return m;
}

void PgTest::pause(conveyor_storage* h, const std::string& q, bool paused) {
  conveyor_error err{};
  EXPECT_EQ(api_->set_queue_paused(h, str(q), paused ? 1 : 0, 0, &err), CONVEYOR_OK) << err.message;
}

conveyor_status PgTest::wait_notify(conveyor_storage* h, int64_t timeout_us,
                                    std::vector<Notice>* out, std::string* message) {
  conveyor_error err{};
  conveyor_status st = api_->wait_for_notification(
      h, timeout_us,
      [](void* ctx, int32_t kind, conveyor_str queue) {
        static_cast<std::vector<Notice>*>(ctx)->push_back(Notice{kind, s(queue)});
      },
      out, &err);
  if (message != nullptr) *message = st == CONVEYOR_OK ? "" : err.message;
  return st;
}

std::string PgTest::generic_plan(const std::string& statement_sql, const std::string& args,
                                 const std::vector<std::string>& settings) {
  pqxx::work tx(*admin_);
  tx.exec("SET LOCAL plan_cache_mode = force_generic_plan");
  for (const std::string& setting : settings) tx.exec(setting);
  tx.exec("PREPARE p AS " + statement_sql);
  std::string plan;
  for (const auto& row : tx.exec("EXPLAIN EXECUTE p" + args))
    plan += std::string(row[0].c_str()) + "\n";
  tx.exec("DEALLOCATE p");
  return plan;
}

pqxx::result PgTest::sql(const std::string& query) {
  pqxx::nontransaction tx(*admin_);
  return tx.exec(query);
}

int PgTest::terminate_plugin_connections() {
  pqxx::nontransaction tx(*admin_);
  pqxx::result r = tx.exec_params(
      "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity"
      " WHERE application_name = $1 AND pid <> pg_backend_pid()",
      schema_);
  return r[0][0].as<int>();
}

std::vector<int64_t> ids_of(const std::vector<JobCopy>& jobs) {
  std::vector<int64_t> ids;
  for (const auto& j : jobs) ids.push_back(j.id);
  return ids;
}

std::vector<conveyor_lease> leases_of(const std::vector<JobCopy>& jobs) {
  std::vector<conveyor_lease> l;
  for (const auto& j : jobs) l.push_back({j.id, j.lease_token});
  return l;
}

}  // namespace conveyor::postgres::test
