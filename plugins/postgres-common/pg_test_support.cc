#include "pg_test_support.hpp"

#include <arpa/inet.h>
#include <libpq-fe.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <pqxx/nontransaction>
#include <pqxx/transaction>

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
         "leak:pqxx::connection_base::exec\n"
         // The same leak seen through an unsymbolised libpqxx frame (a
         // truncated stack names only the module): anything libpqxx itself
         // allocated. Our own allocations never have a libpqxx frame.
         "leak:libpqxx-6.4.so\n";
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

ScratchDatabase::ScratchDatabase(const std::string& admin_dsn, const std::string& create_suffix)
    : name_(unique_name("t_db_")), admin_(std::make_unique<pqxx::connection>(admin_dsn)) {
  sql("CREATE DATABASE \"" + name_ + "\" " + create_suffix);
  std::map<std::string, std::string> fields = dsn_fields(admin_dsn);
  fields["dbname"] = name_;
  dsn_ = keyvalue_dsn(fields);
}

ScratchDatabase::~ScratchDatabase() {
  try {
    sql("DROP DATABASE IF EXISTS \"" + name_ + "\" WITH (FORCE)");
  } catch (const std::exception& e) {
    ADD_FAILURE() << "dropping scratch database " << name_ << ": " << e.what();
  }
}

pqxx::result ScratchDatabase::sql(const std::string& query) {
  pqxx::nontransaction tx(*admin_);
  return tx.exec(query);
}

void PgTest::SetUp() {
  api_ = conveyor_storage_plugin_entry(CONVEYOR_ABI_MAJOR, CONVEYOR_ABI_MINOR);
  ASSERT_NE(api_, nullptr) << "entry point refused the host's ABI version";
  CONVEYOR_REQUIRE_PG();
  dsn_ = *test_dsn();
  schema_ = unique_name("t_");
  admin_ = std::make_unique<pqxx::connection>(dsn_);
}

void PgTest::TearDown() {
  close_all();
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

conveyor_storage* PgTest::open_store(const Opts& extra, bool migrate) {
  return open_tracked(plugin_testing::with_options(base_options(), extra), migrate);
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

}  // namespace conveyor::postgres::test
