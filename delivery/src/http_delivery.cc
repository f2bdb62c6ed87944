// The delivery thread: one curl multi handle drives every transfer.
#include <curl/curl.h>
#include <openssl/x509.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <deque>
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

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

struct UrlParts {
  std::string scheme, host, port;
};

// The scheme, host and port of url, or an error saying what is wrong with it.
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
       {std::pair{CURLUPART_SCHEME, &parts.scheme}, std::pair{CURLUPART_HOST, &parts.host},
        std::pair{CURLUPART_PORT, &parts.port}}) {
    char* value = nullptr;
    if (curl_url_get(handle, part, &value, CURLU_DEFAULT_PORT) == CURLUE_OK && value != nullptr) {
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

// "scheme://host:port" (the port given or the scheme's default, the host in
// lower case): what a request's configured headers may be sent to.
std::string origin_of(const UrlParts& parts) {
  return parts.scheme + "://" + lower(parts.host) + ":" + parts.port;
}

bool has_line_break(std::string_view s) {
  return s.find_first_of("\r\n") != std::string_view::npos;
}

// The status of an "HTTP/1.1 200 OK" line; 0 if there is none.
int status_of(std::string_view line) {
  size_t space = line.find(' ');
  if (space == std::string_view::npos || line.size() < space + 4) return 0;
  int code = 0;
  for (size_t i = space + 1; i < space + 4; ++i) {
    if (line[i] < '0' || line[i] > '9') return 0;
    code = code * 10 + (line[i] - '0');
  }
  return code;
}

int64_t ms_of(curl_off_t us) { return static_cast<int64_t>((us + 999) / 1000); }

}  // namespace

// One request from submit to done.
struct Transfer {
  const Policy* policy = nullptr;
  Request request;
  std::function<void(Outcome)> done;
  CURL* easy = nullptr;
  // Sent to the request's origin: the configured headers and the signature.
  curl_slist* headers = nullptr;
  // Sent to any other origin a redirect leads to: of the configured
  // headers only Content-Type (the body still goes along), no signature.
  curl_slist* foreign_headers = nullptr;
  char error_buffer[CURL_ERROR_SIZE] = {};
  // Of the latest response (a followed redirect starts a new one).
  std::string body_prefix;
  size_t body_bytes = 0;
  bool body_cut = false;  // stopped reading at max_response_bytes
  std::string retry_after;
  int status = 0;                      // of the latest status line
  bool headers_complete = false;       // the latest response's header block has ended
  std::string location;                // the latest response's Location header
  std::optional<std::string> refused;  // the guard's message
  bool refused_see_other = false;      // a 303 not followed (it would drop the body)
  bool opened_socket = false;
  std::string scheme, host;  // of the request's URL
  std::string host_key;      // "host:port" of the request's URL: its connection slots
  std::string origin;        // origin_of the request's URL
  // Redirects are followed here, not by curl (each hop is a transfer of
  // its own on the same handle), so that each hop's headers are chosen.
  int redirects = 0;                              // followed so far
  std::chrono::steady_clock::time_point sent_at;  // of the first hop
  curl_off_t earlier_us = 0;                      // curl's total time of the earlier hops
  bool cut_by_deadline = false;  // the last hop's timeout was the request's deadline

  // GET without a body and HEAD: what a followed 303 turns a request into anyway.
  bool bodiless() const {
    return request.method == "HEAD" || (request.method == "GET" && request.body.empty());
  }

  ~Transfer() {
    if (easy != nullptr) curl_easy_cleanup(easy);
    curl_slist_free_all(headers);
    curl_slist_free_all(foreign_headers);
  }

  static size_t on_header(char* data, size_t size, size_t count, void* self) {
    auto* t = static_cast<Transfer*>(self);
    std::string_view line(data, size * count);
    if (line.starts_with("HTTP/")) {
      t->body_prefix.clear();
      t->body_bytes = 0;
      t->body_cut = false;
      t->retry_after.clear();
      t->location.clear();
      t->status = status_of(line);
      t->headers_complete = false;
    } else if (iequals_prefix(line, "retry-after:")) {
      t->retry_after = std::string(trim(line.substr(12)));
    } else if (iequals_prefix(line, "location:")) {
      t->location = std::string(trim(line.substr(9)));
    } else if (trim(line).empty()) {
      t->headers_complete = true;
      // curl would follow a 303 with a GET without the body (PUT and the
      // like keep their method but lose the body): refuse it before it does.
      if (t->status == 303 && t->request.follow_redirects && !t->location.empty() &&
          !t->bodiless()) {
        t->refused_see_other = true;
        return 0;  // aborts the transfer (CURLE_WRITE_ERROR)
      }
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
  // Per "host:port" while max_connections_per_host is set: the transfers
  // added to the multi handle, and those waiting (in order) for one of them
  // to finish. curl itself never queues a transfer (its own per-host limit
  // is unset), so no timeout runs while a request waits.
  struct HostSlots {
    size_t sending = 0;
    std::deque<std::unique_ptr<Transfer>> waiting;
  };
  std::unordered_map<std::string, HostSlots> hosts;

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

  static Outcome retry(std::string error) {
    Outcome o;
    o.kind = OutcomeKind::kRetry;
    o.error = std::move(error);
    return o;
  }

  // Checks the request; a usable one is sent now or waits for a connection
  // slot of its host, an unusable one ends at once.
  void start(std::unique_ptr<Transfer> t) {
    auto parsed = parse_url(t->request.url);
    if (auto* error = std::get_if<std::string>(&parsed)) {
      return finish(std::move(t), permanent(std::move(*error)));
    }
    const UrlParts& parts = std::get<UrlParts>(parsed);
    t->scheme = parts.scheme;
    t->host = parts.host;
    t->host_key = lower(parts.host) + ":" + parts.port;
    t->origin = origin_of(parts);
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
    if (policy.max_connections_per_host != 0) {
      HostSlots& slots = hosts[t->host_key];
      if (slots.sending >= policy.max_connections_per_host) {
        slots.waiting.push_back(std::move(t));
        return;
      }
      ++slots.sending;
    }
    send(std::move(t));
  }

  // Frees a connection slot of host_key: the next request waiting for it is sent.
  void release(const std::string& host_key) {
    if (policy.max_connections_per_host == 0) return;
    auto it = hosts.find(host_key);
    if (it == hosts.end()) return;
    --it->second.sending;
    if (!it->second.waiting.empty()) {
      std::unique_ptr<Transfer> next = std::move(it->second.waiting.front());
      it->second.waiting.pop_front();
      ++it->second.sending;
      return send(std::move(next));  // a failure here releases again
    }
    if (it->second.sending == 0) hosts.erase(it);
  }

  // Ends a transfer that held a connection slot (or would have).
  void end(std::unique_ptr<Transfer> t, Outcome outcome) {
    std::string host_key = t->host_key;
    release(host_key);
    finish(std::move(t), std::move(outcome));
  }

  // Sets up the easy handle and adds it (the timeout starts now); it holds
  // a connection slot of its host.
  void send(std::unique_ptr<Transfer> t) {
    t->easy = curl_easy_init();
    if (t->easy == nullptr) return end(std::move(t), retry("out of memory creating a curl handle"));
    const Request& r = t->request;
    CURL* e = t->easy;
    for (const auto& [name, value] : r.headers) {
      const std::string line = fmt::format("{}: {}", name, value);
      t->headers = curl_slist_append(t->headers, line.c_str());
      if (lower(name) == "content-type") {
        t->foreign_headers = curl_slist_append(t->foreign_headers, line.c_str());
      }
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
    t->foreign_headers = curl_slist_append(t->foreign_headers, "Expect:");

    curl_easy_setopt(e, CURLOPT_URL, r.url.c_str());
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_PROXY, "");  // the guard must see the real target
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    const std::optional<long> cut = deadline_cut(*t, r.timeout);
    if (cut && *cut <= 0) {
      Outcome o =
          retry(fmt::format("{} waiting for a connection to {}", r.deadline_error, t->host));
      o.deadline_cut = true;
      return end(std::move(t), std::move(o));
    }
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, cut.value_or(static_cast<long>(r.timeout.count())));
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t->error_buffer);
    curl_easy_setopt(e, CURLOPT_USERAGENT, "conveyor");
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, &Transfer::on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, t.get());
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Transfer::on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
    curl_easy_setopt(e, CURLOPT_OPENSOCKETFUNCTION, &Transfer::on_open_socket);
    curl_easy_setopt(e, CURLOPT_OPENSOCKETDATA, t.get());
    // Redirects are followed by follow() (curl would send every configured
    // header to any host but Authorization and Cookie). Each hop repeats
    // these options: the same method and body after any 3xx (a 303 that
    // would drop a body is refused in on_header).
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    if (!r.tls.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, r.tls.ca_file.c_str());
    if (!r.tls.ca_dir.empty()) curl_easy_setopt(e, CURLOPT_CAPATH, r.tls.ca_dir.c_str());
    if (!r.tls.client_cert.empty()) {
      curl_easy_setopt(e, CURLOPT_SSLCERT, r.tls.client_cert.c_str());
      curl_easy_setopt(e, CURLOPT_SSLCERTTYPE, "PEM");
    }
    if (!r.tls.client_key.empty()) {
      curl_easy_setopt(e, CURLOPT_SSLKEY, r.tls.client_key.c_str());
      curl_easy_setopt(e, CURLOPT_SSLKEYTYPE, "PEM");
    }
    if (r.method == "GET" && r.body.empty()) {
      curl_easy_setopt(e, CURLOPT_HTTPGET, 1L);
    } else if (r.method == "HEAD") {
      curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else {
      // The body stays owned by the Transfer until the handle is cleaned up.
      // Other methods are a POST whose method line is replaced, so they keep
      // their body across a 301/302 exactly as a POST does.
      curl_easy_setopt(e, CURLOPT_POSTFIELDS, r.body.data());
      curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
      if (r.method != "POST") curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r.method.c_str());
    }
    CURLMcode rc = curl_multi_add_handle(multi, e);
    if (rc != CURLM_OK) {
      return end(std::move(t),
                 retry(fmt::format("curl_multi_add_handle: {}", curl_multi_strerror(rc))));
    }
    t->sent_at = std::chrono::steady_clock::now();
    active.emplace(e, std::move(t));
  }

  // The absolute URL of the redirect a finished hop answered, if it is to
  // be followed: a 3xx with a Location (curl resolves a relative one), as
  // curl's own following would take.
  static std::optional<std::string> redirect_of(Transfer& t, CURLcode rc) {
    if (!t.request.follow_redirects) return std::nullopt;
    if (rc != CURLE_OK && !(rc == CURLE_WRITE_ERROR && t.body_cut)) return std::nullopt;
    long status = 0;
    curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
    if (status < 300 || status > 399) return std::nullopt;
    char* url = nullptr;
    curl_easy_getinfo(t.easy, CURLINFO_REDIRECT_URL, &url);
    if (url == nullptr) return std::nullopt;
    return std::string(url);
  }

  // Sends the next hop of a redirect to url on the same handle (and
  // connection slot), or ends the transfer if the hop may not be made. The
  // configured headers and the signature go only to the request's origin:
  // a hop to another scheme, host or port carries Content-Type alone.
  void follow(std::unique_ptr<Transfer> t, const std::string& url) {
    long status = 0;
    curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
    auto stop = [&](Outcome o) {
      o.status = static_cast<int>(status);
      o.response_bytes = t->body_bytes;
      end(std::move(t), std::move(o));
    };
    if (t->redirects >= kMaxRedirects) {
      // curl's CURLE_TOO_MANY_REDIRECTS text.
      return stop(permanent(fmt::format("Maximum ({}) redirects followed", kMaxRedirects)));
    }
    auto parsed = parse_url(url);
    if (auto* error = std::get_if<std::string>(&parsed)) {
      return stop(
          permanent(fmt::format("the downstream answered {} to {} with a redirect to {}: {}",
                                status, t->request.url, t->location, *error)));
    }
    const UrlParts& next = std::get<UrlParts>(parsed);
    if (t->scheme == "https" && next.scheme == "http") {
      return stop(permanent(fmt::format(
          "the downstream answered {} to {} with a redirect to {}: not followed from https to "
          "http, which would send the request unencrypted; point the url at the final https "
          "location",
          status, t->request.url, t->location)));
    }
    // The whole transfer keeps to the request's timeout: this hop gets what
    // is left (at least 1 ms, so that curl times it out and says where).
    const auto spent = std::chrono::duration_cast<std::chrono::milliseconds>(
        std::chrono::steady_clock::now() - t->sent_at);
    long left = static_cast<long>(std::max<int64_t>(1, (t->request.timeout - spent).count()));
    if (const std::optional<long> cut = deadline_cut(*t, std::chrono::milliseconds(left)))
      left = std::max(1L, *cut);
    curl_off_t hop_us = 0;
    curl_easy_getinfo(t->easy, CURLINFO_TOTAL_TIME_T, &hop_us);
    t->earlier_us += hop_us;
    ++t->redirects;
    // The next hop's response replaces this one's (a failure before it
    // arrives must not be read as this 3xx).
    t->body_prefix.clear();
    t->body_bytes = 0;
    t->body_cut = false;
    t->retry_after.clear();
    t->location.clear();
    t->status = 0;
    t->headers_complete = false;
    t->error_buffer[0] = '\0';

    CURL* e = t->easy;
    curl_easy_setopt(e, CURLOPT_URL, url.c_str());
    curl_easy_setopt(e, CURLOPT_HTTPHEADER,
                     origin_of(next) == t->origin ? t->headers : t->foreign_headers);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, left);
    CURLMcode rc = curl_multi_add_handle(multi, e);
    if (rc != CURLM_OK) {
      return end(std::move(t),
                 retry(fmt::format("curl_multi_add_handle: {}", curl_multi_strerror(rc))));
    }
    active.emplace(e, std::move(t));
  }

  // The host being talked to when the transfer ended (a redirect's, if followed).
  static std::string current_host(Transfer& t) {
    char* current = nullptr;
    curl_easy_getinfo(t.easy, CURLINFO_EFFECTIVE_URL, &current);
    if (current != nullptr) {
      auto parsed = parse_url(current);
      if (auto* parts = std::get_if<UrlParts>(&parsed)) return parts->host;
    }
    return t.host;
  }

  // The request's deadline, when it is nearer than timeout: what is left of
  // it in ms (0 or less: it passed). Marks the transfer as cut by it.
  static std::optional<long> deadline_cut(Transfer& t, std::chrono::milliseconds timeout) {
    t.cut_by_deadline = false;
    if (!t.request.deadline) return std::nullopt;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(
        *t.request.deadline - std::chrono::steady_clock::now());
    if (left >= timeout) return std::nullopt;
    t.cut_by_deadline = true;
    return static_cast<long>(left.count());
  }

  // What a timeout cut short, from curl's timings of the last hop.
  std::string timeout_error(Transfer& t) {
    curl_off_t total = 0, resolved = 0, connected = 0, handshaken = 0, sent = 0, first_byte = 0;
    curl_easy_getinfo(t.easy, CURLINFO_TOTAL_TIME_T, &total);
    curl_easy_getinfo(t.easy, CURLINFO_NAMELOOKUP_TIME_T, &resolved);
    curl_easy_getinfo(t.easy, CURLINFO_CONNECT_TIME_T, &connected);
    curl_easy_getinfo(t.easy, CURLINFO_APPCONNECT_TIME_T, &handshaken);
    curl_easy_getinfo(t.easy, CURLINFO_PRETRANSFER_TIME_T, &sent);
    curl_easy_getinfo(t.easy, CURLINFO_STARTTRANSFER_TIME_T, &first_byte);
    const char* phase;
    if (connected == 0 && !t.opened_socket && resolved == 0) {
      phase = "resolving the name of";
    } else if (connected == 0) {
      phase = "connecting to";
    } else if (sent == 0) {
      phase =
          handshaken == 0 && t.scheme == "https" ? "in the TLS handshake with" : "connecting to";
    } else if (first_byte == 0) {
      phase = "waiting for the response from";
    } else {
      phase = "reading the response from";
    }
    if (t.cut_by_deadline)
      return fmt::format("{} {} {}", t.request.deadline_error, phase, current_host(t));
    return fmt::format("timed out after {} ms (timeout_ms = {}) {} {}", ms_of(t.earlier_us + total),
                       t.request.timeout.count(), phase, current_host(t));
  }

  // A certificate or key problem: retrying cannot heal it, so it is
  // permanent, and the message says what to set.
  std::optional<std::string> tls_error(Transfer& t, CURLcode rc, const std::string& curl_text) {
    const Tls& tls = t.request.tls;
    switch (rc) {
      case CURLE_PEER_FAILED_VERIFICATION: {
        long verify = X509_V_OK;
        curl_easy_getinfo(t.easy, CURLINFO_SSL_VERIFYRESULT, &verify);
        const std::string host = current_host(t);
        // curl 7.88 checks the name itself once the chain is trusted; it
        // leaves the result at 0 or X509_V_ERR_UNSPECIFIED.
        const bool name_mismatch =
            verify == X509_V_OK || verify == X509_V_ERR_HOSTNAME_MISMATCH ||
            verify == X509_V_ERR_IP_ADDRESS_MISMATCH ||
            (verify == X509_V_ERR_UNSPECIFIED && curl_text.find("match") != std::string::npos);
        if (name_mismatch) verify = X509_V_OK;
        switch (verify) {
          case X509_V_OK:  // the chain is trusted, but it is issued for another name
            return fmt::format(
                "certificate of {} does not name it ({}): put the name the certificate is "
                "issued for in the url, or have the server present a certificate for {}",
                host, curl_text, host);
          case X509_V_ERR_CERT_HAS_EXPIRED:
          case X509_V_ERR_CERT_NOT_YET_VALID:
            return fmt::format(
                "certificate of {} is not valid now ({}): the server must renew it (or this "
                "machine's clock is wrong)",
                host, X509_verify_cert_error_string(verify));
          default:
            return fmt::format(
                "certificate of {} not trusted ({}): set {} ca_file (or ca_dir) to the CA that "
                "signed it{}",
                host, X509_verify_cert_error_string(verify), tls.section,
                tls.ca_file.empty() ? "" : fmt::format(" (ca_file is {})", tls.ca_file));
        }
      }
      case CURLE_RECV_ERROR:
      case CURLE_SSL_CONNECT_ERROR:
        // TLS 1.3: the server's alert arrives after the handshake, on the
        // first read. TLS 1.2 servers answer "handshake failure", which says
        // too little to be sure, and stays a retry.
        if (curl_text.find("alert certificate required") != std::string::npos) {
          return fmt::format(
              "{} requires a client certificate ({}): set {} client_cert and client_key{}",
              current_host(t), curl_text, tls.section,
              tls.client_cert.empty() ? "" : " to one it accepts");
        }
        if (!tls.client_cert.empty() &&
            (curl_text.find("alert unknown ca") != std::string::npos ||
             curl_text.find("alert bad certificate") != std::string::npos)) {
          return fmt::format(
              "{} refused the client certificate ({}): set {} client_cert and client_key to one "
              "signed by a CA it trusts (now '{}')",
              current_host(t), curl_text, tls.section, tls.client_cert);
        }
        return std::nullopt;
      case CURLE_SSL_ISSUER_ERROR:
        return fmt::format(
            "certificate of {} not issued by the expected issuer ({}): set {} "
            "ca_file to the CA that signed it",
            current_host(t), curl_text, tls.section);
      case CURLE_SSL_CACERT_BADFILE:
        return fmt::format(
            "the CA certificates could not be loaded ({}): set {} ca_file to a "
            "readable PEM bundle (now '{}') or ca_dir to a hashed directory "
            "(now '{}')",
            curl_text, tls.section, tls.ca_file, tls.ca_dir);
      case CURLE_SSL_CERTPROBLEM:
        return fmt::format(
            "the client certificate could not be used ({}): set {} client_cert "
            "and client_key to a PEM certificate and its PEM key (now '{}' and "
            "'{}')",
            curl_text, tls.section, tls.client_cert, tls.client_key);
      default:
        return std::nullopt;
    }
  }

  Outcome outcome_of(Transfer& t, CURLcode rc) {
    long status = 0;
    curl_easy_getinfo(t.easy, CURLINFO_RESPONSE_CODE, &status);
    const std::string curl_text =
        t.error_buffer[0] != '\0' ? std::string(t.error_buffer) : curl_easy_strerror(rc);
    Outcome o;
    if (rc == CURLE_OK || (rc == CURLE_WRITE_ERROR && t.body_cut)) {
      o = classify(static_cast<int>(status), t.body_prefix, t.retry_after,
                   std::chrono::system_clock::now());
    } else if (t.refused) {
      o = permanent(*t.refused);
    } else if (t.refused_see_other) {
      o = permanent(fmt::format(
          "the downstream answered 303 See Other to {} {} (Location: {}): following it would "
          "send a GET without the body, so it was not followed; point the url at the location "
          "that takes the {}",
          t.request.method, t.request.url, t.location, t.request.method));
      o.status = 303;
    } else if (t.headers_complete && t.status >= 200 && t.status <= 299) {
      // The status and headers of a 2xx arrived, then the body broke off:
      // the downstream took the request; sending it again would repeat it.
      o = classify(t.status, t.body_prefix, t.retry_after, std::chrono::system_clock::now());
      o.warning =
          fmt::format("the HTTP {} response broke off after its headers ({}); counted as delivered",
                      t.status, rc == CURLE_OPERATION_TIMEDOUT ? timeout_error(t) : curl_text);
    } else if (auto tls = tls_error(t, rc, curl_text)) {
      o = permanent(std::move(*tls));
    } else {
      switch (rc) {
        case CURLE_UNSUPPORTED_PROTOCOL:
        case CURLE_URL_MALFORMAT:
          o.kind = OutcomeKind::kPermanent;
          break;
        default:
          o.kind = OutcomeKind::kRetry;
      }
      o.status = static_cast<int>(status);
      o.error = rc == CURLE_OPERATION_TIMEDOUT ? timeout_error(t) : curl_text;
      o.deadline_cut = rc == CURLE_OPERATION_TIMEDOUT && t.cut_by_deadline;
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
      if (auto next = redirect_of(*t, rc)) {
        follow(std::move(t), *next);
        continue;
      }
      Outcome o = outcome_of(*t, rc);
      end(std::move(t), std::move(o));
    }
  }

  void abort_all() {
    // Those waiting first, so that no ended transfer sends one of them.
    std::vector<std::unique_ptr<Transfer>> aborted;
    for (auto& [key, slots] : hosts) {
      for (auto& t : slots.waiting) aborted.push_back(std::move(t));
    }
    hosts.clear();
    for (auto& [e, t] : active) {
      curl_multi_remove_handle(multi, e);
      aborted.push_back(std::move(t));
    }
    active.clear();
    for (auto& t : aborted) finish(std::move(t), retry("aborted at shutdown"));
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
        // (A request waiting for a slot implies one in active.)
        std::lock_guard lock(mu);
        if (active.empty() && pending.empty() && hosts.empty()) return;
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
          for (auto& t : late) finish(std::move(t), retry("aborted at shutdown"));
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
  // CURLMOPT_MAX_HOST_CONNECTIONS stays unset (no limit): Impl::start admits
  // at most max_connections_per_host transfers per host, so curl never
  // queues one while its timeout runs.
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
