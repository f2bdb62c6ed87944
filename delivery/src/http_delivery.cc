// The delivery thread: one curl multi handle drives every transfer.
#include <curl/curl.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <variant>

#include <fmt/format.h>

#include "address_guard.hpp"
#include "conveyor/http_delivery.hpp"
#include "request_signer.hpp"

namespace conveyor::http_delivery {
namespace {

constexpr size_t kBodyPrefixBytes = 200;
constexpr long kMaxRedirects = 5;

void global_init() {
  static std::once_flag once;
  static CURLcode rc = CURLE_OK;
  std::call_once(once, [] { rc = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (rc != CURLE_OK) {
    throw std::runtime_error(
        fmt::format("libcurl initialisation failed: {}", curl_easy_strerror(rc)));
  }
}

bool iequals_prefix(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

struct UrlParts {
  std::string scheme, host;
};

// The scheme and host of url, or an error saying what is wrong with it.
std::variant<UrlParts, std::string> parse_url(const std::string& url) {
  CURLU* handle = curl_url();
  if (handle == nullptr) return std::string("out of memory parsing the URL");
  CURLUcode rc = curl_url_set(handle, CURLUPART_URL, url.c_str(), 0);
  if (rc != CURLUE_OK) {
    curl_url_cleanup(handle);
    return fmt::format("url '{}' is not a valid http or https URL ({})", url,
                       curl_url_strerror(rc));
  }
  UrlParts parts;
  for (auto [part, out] :
       {std::pair{CURLUPART_SCHEME, &parts.scheme}, std::pair{CURLUPART_HOST, &parts.host}}) {
    char* value = nullptr;
    if (curl_url_get(handle, part, &value, 0) == CURLUE_OK && value != nullptr) {
      *out = value;
      curl_free(value);
    }
  }
  curl_url_cleanup(handle);
  std::transform(parts.scheme.begin(), parts.scheme.end(), parts.scheme.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (parts.scheme != "http" && parts.scheme != "https") {
    return fmt::format("url '{}' has scheme '{}'; only http and https URLs can be delivered", url,
                       parts.scheme);
  }
  return parts;
}

bool has_line_break(std::string_view s) {
  return s.find_first_of("\r\n") != std::string_view::npos;
}

}  // namespace

// One request from submit to done.
struct Transfer {
  const Policy* policy = nullptr;
  Request request;
  std::function<void(Outcome)> done;
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  char error_buffer[CURL_ERROR_SIZE] = {};
  // Of the latest response (a followed redirect starts a new one).
  std::string body_prefix;
  size_t body_bytes = 0;
  bool body_cut = false;  // stopped reading at max_response_bytes
  std::string retry_after;
  std::optional<std::string> refused;  // the guard's message
  bool opened_socket = false;
  std::string host;  // of the request's URL

  ~Transfer() {
    if (easy != nullptr) curl_easy_cleanup(easy);
    curl_slist_free_all(headers);
  }

  static size_t on_header(char* data, size_t size, size_t count, void* self) {
    auto* t = static_cast<Transfer*>(self);
    std::string_view line(data, size * count);
    if (line.starts_with("HTTP/")) {
      t->body_prefix.clear();
      t->body_bytes = 0;
      t->body_cut = false;
      t->retry_after.clear();
    } else if (iequals_prefix(line, "retry-after:")) {
      t->retry_after = std::string(trim(line.substr(12)));
    }
    return size * count;
  }

  static size_t on_body(char* data, size_t size, size_t count, void* self) {
    auto* t = static_cast<Transfer*>(self);
    size_t n = size * count;
    size_t max = t->policy->max_response_bytes;
    size_t take = std::min(n, max - t->body_bytes);
    if (t->body_prefix.size() < kBodyPrefixBytes) {
      t->body_prefix.append(data, std::min(take, kBodyPrefixBytes - t->body_prefix.size()));
    }
    t->body_bytes += take;
    if (take < n) {
      // Returning short makes curl stop reading and drop the connection.
      t->body_cut = true;
      return 0;
    }
    return n;
  }

  static curl_socket_t on_open_socket(void* self, curlsocktype purpose, curl_sockaddr* address) {
    auto* t = static_cast<Transfer*>(self);
    if (purpose == CURLSOCKTYPE_IPCXN) {
      // The hop being connected (after a followed redirect, not the first URL).
      char* current = nullptr;
      curl_easy_getinfo(t->easy, CURLINFO_EFFECTIVE_URL, &current);
      std::string host;
      if (current != nullptr) {
        auto parsed = parse_url(current);
        if (auto* parts = std::get_if<UrlParts>(&parsed)) host = parts->host;
      }
      if (auto why = refusal(&address->addr, host, *t->policy)) {
        t->refused = std::move(why);
        return CURL_SOCKET_BAD;
      }
    }
    t->opened_socket = true;
    return ::socket(address->family, address->socktype | SOCK_CLOEXEC, address->protocol);
  }
};

struct Delivery::Impl {
  Policy policy;
  CURLM* multi = nullptr;
  std::atomic<size_t> in_flight{0};

  std::mutex mu;
  std::vector<std::unique_ptr<Transfer>> pending;  // guarded by mu
  bool stopping = false;                           // guarded by mu
  std::chrono::steady_clock::time_point deadline;  // guarded by mu

  std::mutex join_mu;
  std::thread thread;
  std::thread::id thread_id;  // set before any done can run

  // Delivery thread only.
  std::unordered_map<CURL*, std::unique_ptr<Transfer>> active;

  void finish(std::unique_ptr<Transfer> t, Outcome outcome) {
    try {
      t->done(std::move(outcome));
    } catch (...) {
      // done must not throw; if it does, the delivery thread carries on.
    }
    t.reset();
    in_flight.fetch_sub(1);
  }

  static Outcome permanent(std::string error) {
    Outcome o;
    o.kind = OutcomeKind::kPermanent;
    o.error = std::move(error);
    return o;
  }

  // Sets up the easy handle and adds it; an unusable request ends at once.
  void start(std::unique_ptr<Transfer> t) {
    auto parsed = parse_url(t->request.url);
    if (auto* error = std::get_if<std::string>(&parsed)) {
      return finish(std::move(t), permanent(std::move(*error)));
    }
    t->host = std::get<UrlParts>(parsed).host;
    const Request& r = t->request;
    if (r.method.empty() || has_line_break(r.method) || r.method.find(' ') != std::string::npos) {
      return finish(std::move(t),
                    permanent(fmt::format("method '{}' is not an HTTP method", r.method)));
    }
    if (r.timeout.count() <= 0) {
      // curl would take 0 as "no timeout": a hung downstream would hold the job for good.
      return finish(std::move(t), permanent(fmt::format("timeout must be positive, got {} ms",
                                                        r.timeout.count())));
    }
    for (const auto& [name, value] : r.headers) {
      if (name.empty() || has_line_break(name) || has_line_break(value) ||
          name.find(':') != std::string::npos) {
        return finish(std::move(t),
                      permanent(fmt::format("header '{}' is not a valid header (empty name, ':' "
                                            "in the name, or a line break)",
                                            name)));
      }
    }
    t->easy = curl_easy_init();
    if (t->easy == nullptr) {
      Outcome o;
      o.kind = OutcomeKind::kRetry;
      o.error = "out of memory creating a curl handle";
      return finish(std::move(t), std::move(o));
    }
    CURL* e = t->easy;
    for (const auto& [name, value] : r.headers) {
      t->headers = curl_slist_append(t->headers, fmt::format("{}: {}", name, value).c_str());
    }
    if (!r.secret.empty()) {
      int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
      t->headers =
          curl_slist_append(t->headers, fmt::format("{}: {}", kTimestampHeader, now).c_str());
      t->headers = curl_slist_append(
          t->headers,
          fmt::format("{}: {}", kSignatureHeader, signature(r.secret, now, r.body)).c_str());
    }
    // No "Expect: 100-continue" round trip (a second's wait on servers that ignore it).
    t->headers = curl_slist_append(t->headers, "Expect:");

    curl_easy_setopt(e, CURLOPT_URL, r.url.c_str());
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_PROXY, "");  // the guard must see the real target
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, static_cast<long>(r.timeout.count()));
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error_buffer);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "conveyor");
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Transfer::on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Transfer::on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, &Transfer::on_open_socket);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, t.get());
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, r.follow_redirects ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_MAXREDIRS, kMaxRedirects);
    if (r.method == "GET" && r.body.empty()) {
      curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else if (r.method == "HEAD") {
      curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else {
      // The body stays owned by the Transfer until the handle is cleaned up.
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, r.body.data());
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
      if (r.method != "POST") curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r.method.c_str());
    }
    CURLMcode rc = curl_multi_add_handle(multi, e);
    if (rc != CURLM_OK) {
      Outcome o;
      o.kind = OutcomeKind::kRetry;
      o.error = fmt::format("curl_multi_add_handle: {}", curl_multi_strerror(rc));
      return finish(std::move(t), std::move(o));
    }
    active.emplace(e, std::move(t));
  }

  Outcome outcome_of(Transfer& t, CURLcode rc) {
    long status = 0;
    curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
    Outcome o;
    if (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && t.body_cut)) {
      o = classify(static_cast<int>(status), t.body_prefix, t.retry_after,
                   std::chrono::system_clock::now());
    } else if (t.refused) {
      o = permanent(*t.refused);
    } else {
      switch (rc) {
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_URL_MALFORMAT:
        case CURLE_TOO_MANY_REDIRECTS:
          o.kind = OutcomeKind::kPermanent;
          break;
        default:
          o.kind = OutcomeKind::kRetry;
      }
      o.status = static_cast<int>(status);
      o.error = t.error_buffer[0] != '\0' ? std::string(t.error_buffer) : curl_easy_strerror(rc);
      curl_off_t pretransfer_us = 0;
      curl_easy_getinfo(t.easy, CURLINFO_PRETRANSFER_TIME_T, &pretransfer_us);
      if (rc == CURLE_OPERATION_TIMEDOUT && !t.opened_socket && pretransfer_us == 0) {
        // curl's text for a transfer that waited for a connection slot reads
        // as a DNS failure; say what it waited for.
        o.error = fmt::format(
            "timed out after {} ms before connecting to {} (resolving the name, or waiting while "
            "max_connections_per_host = {} connections to it were busy)",
            t.request.timeout.count(), t.host, policy.max_connections_per_host);
      }
    }
    o.response_bytes = t.body_bytes;
    return o;
  }

  void collect_done() {
    int queued = 0;
    while (CURLMsg* msg = curl_multi_info_read(multi, &queued)) {
      if (msg->msg != CURLMSG_DONE) continue;
      CURL* e = msg->easy_handle;
      CURLcode rc = msg->data.result;
      auto it = active.find(e);
      curl_multi_remove_handle(multi, e);
      if (it == active.end()) continue;
      std::unique_ptr<Transfer> t = std::move(it->second);
      active.erase(it);
      Outcome o = outcome_of(*t, rc);
      finish(std::move(t), std::move(o));
    }
  }

  void abort_all() {
    for (auto& [e, t] : active) curl_multi_remove_handle(multi, e);
    auto aborted = std::move(active);
    active.clear();
    for (auto& [e, t] : aborted) {
      Outcome o;
      o.kind = OutcomeKind::kRetry;
      o.error = "aborted at shutdown";
      finish(std::move(t), std::move(o));
    }
  }

  void run() {
    using namespace std::chrono;
    for (;;) {
      std::vector<std::unique_ptr<Transfer>> arrived;
      bool stop;
      steady_clock::time_point stop_by;
      {
        std::lock_guard lock(mu);
        arrived.swap(pending);
        stop = stopping;
        stop_by = deadline;
      }
      for (auto& t : arrived) start(std::move(t));
      int running = 0;
      curl_multi_perform(multi, &running);
      collect_done();
      if (stop) {
        // Nothing is added after stopping was seen (submit refuses), but a
        // done callback may have queued one before: loop once more for it.
        std::lock_guard lock(mu);
        if (active.empty() && pending.empty()) return;
      }
      int wait_ms = 1000;
      if (stop) {
        auto now = steady_clock::now();
        if (now >= stop_by) {
          abort_all();
          std::vector<std::unique_ptr<Transfer>> late;
          {
            std::lock_guard lock(mu);
            late.swap(pending);
          }
          for (auto& t : late) {
            Outcome o;
            o.kind = OutcomeKind::kRetry;
            o.error = "aborted at shutdown";
            finish(std::move(t), std::move(o));
          }
          return;
        }
        // Rounded up: waking a little early would abort before the deadline.
        auto left = std::chrono::ceil<milliseconds>(stop_by - now).count();
        wait_ms = static_cast<int>(std::min<long long>(wait_ms, left));
      }
      curl_multi_poll(multi, nullptr, 0, wait_ms, nullptr);
    }
  }
};

Delivery::Delivery(Policy policy) : impl_(std::make_unique<Impl>()) {
  global_init();
  impl_->policy = std::move(policy);
  impl_->multi = curl_multi_init();
  if (impl_->multi == nullptr) throw std::runtime_error("curl_multi_init failed");
  curl_multi_setopt(impl_->multi, CURLMOPT_MAX_HOST_CONNECTIONS,
                    static_cast<long>(impl_->policy.max_connections_per_host));
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
  impl_->thread_id = impl_->thread.get_id();
}

Delivery::~Delivery() {
  shutdown(std::chrono::steady_clock::now());
  curl_multi_cleanup(impl_->multi);
}

void Delivery::submit(Request request, std::function<void(Outcome)> done) {
  auto t = std::make_unique<Transfer>();
  t->policy = &impl_->policy;
  t->request = std::move(request);
  t->done = std::move(done);
  {
    std::lock_guard lock(impl_->mu);
    if (!impl_->stopping) {
      impl_->in_flight.fetch_add(1);
      impl_->pending.push_back(std::move(t));
    }
  }
  if (t) {
    Outcome o;
    o.kind = OutcomeKind::kRetry;
    o.error = "delivery is shut down";
    t->done(std::move(o));
    return;
  }
  curl_multi_wakeup(impl_->multi);
}

size_t Delivery::in_flight() const { return impl_->in_flight.load(); }

void Delivery::shutdown(std::chrono::steady_clock::time_point deadline) {
  if (std::this_thread::get_id() == impl_->thread_id) {
    // Joining itself would hang the delivery thread for good.
    throw std::logic_error("Delivery::shutdown called from a done callback");
  }
  {
    std::lock_guard lock(impl_->mu);
    if (!impl_->stopping || deadline < impl_->deadline) impl_->deadline = deadline;
    impl_->stopping = true;
  }
  curl_multi_wakeup(impl_->multi);
  std::lock_guard lock(impl_->join_mu);
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace conveyor::http_delivery
