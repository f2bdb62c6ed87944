// HTTP delivery: the queue itself makes a job's HTTP call. One background
// thread drives libcurl's multi interface, so thousands of requests can be in
// flight without a thread each; every request ends in exactly one Outcome that
// says whether the job succeeded, should back off, be retried or be failed.
//
// Outcomes (delivery/README.md has the table):
//   2xx (even if the body then ends early) kSucceeded (a warning says so)
//   429, 503                              kBackpressure (retry_after from Retry-After)
//   408, 425, 500, 502, 504, timeout,
//   connection and other transport errors kRetry
//   other statuses (3xx not followed,
//   other 4xx), a URL that is not
//   http/https, a host the guard refuses,
//   a 303 to a request with a body, an
//   https -> http redirect, a certificate
//   that is not trusted                   kPermanent
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace conveyor::http_delivery {

// TLS settings of a request (https:// URLs and redirects to them).
struct Tls {
  std::string ca_file;      // PEM bundle of trusted CAs (CURLOPT_CAINFO); empty: the system's
  std::string ca_dir;       // c_rehash'ed directory of CAs (CURLOPT_CAPATH); empty: none
  std::string client_cert;  // PEM client certificate for mutual TLS; empty: none
  std::string client_key;   // its PEM private key (set with client_cert)
  // Where these are configured, named in certificate errors so they say
  // what to set: "[http]" or "[queues.NAME.http]".
  std::string section = "[http]";
};

struct Request {
  std::string method = "POST";
  std::string url;  // http:// or https:// only
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  // The whole transfer must end within this, counted from when it is sent:
  // resolving, connecting, sending and the response (and any redirects). A
  // wait for a free connection (Policy::max_connections_per_host) before
  // that does not count. Must be positive.
  std::chrono::milliseconds timeout{30000};
  // The job's time limit (JobResult::time_limit()), when it has one: the
  // transfer must also end by this time (steady clock), whatever timeout
  // says and however long it waited for a connection. Each hop's timeout is
  // cut to what is left; a request whose deadline passed while it waited is
  // not sent. A transfer it cut ends in kRetry with deadline_error (e.g.
  // "timed out after 30 s (job_timeout_s)") and where it was.
  std::optional<std::chrono::steady_clock::time_point> deadline;
  std::string deadline_error;
  // Non-empty: the request carries Conveyor-Timestamp and Conveyor-Signature
  // (HMAC-SHA256 of "<timestamp>.<body>" with this secret).
  std::string secret;
  // At most 5 hops when true, each of which passes the address guard. A
  // followed 301, 302, 307 or 308 sends the same method and body again.
  // The headers and the signature go only to the origin of url (scheme,
  // host and port): a hop to another origin carries only Content-Type. A
  // 303 is followed only by GET and HEAD requests without a body: any other
  // ends in kPermanent (it would turn into a GET without the body), and so
  // does a redirect from https to http.
  bool follow_redirects = false;
  Tls tls;
};

enum class OutcomeKind {
  kSucceeded,     // 2xx
  kBackpressure,  // 429/503: the downstream asks the queue to slow down
  kRetry,         // transient: try again later
  kPermanent,     // retrying will not help until something is changed
};

struct Outcome {
  OutcomeKind kind = OutcomeKind::kRetry;
  int status = 0;  // the final response's status; 0: no response
  std::optional<std::chrono::milliseconds> retry_after;
  // Empty on success; else for a job's last_error: "HTTP 404: <first 200
  // bytes of the body>", curl's error text, or what to set to allow a target.
  std::string error;
  size_t response_bytes = 0;  // bytes of the final response's body read
  // A kRetry that Request::deadline ended (error begins with deadline_error).
  bool deadline_cut = false;
  // Set on a kSucceeded whose response broke off after its 2xx status and
  // headers (a body shorter than its Content-Length, a reset): the request
  // was delivered, so it is not retried, but the break is worth a log line.
  std::string warning;
};

struct Policy {
  // Off: targets on loopback, private, link-local, CGNAT, multicast,
  // unspecified or any other special-purpose address (IPv4 carried in IPv6
  // judged as itself) are refused, checked on the address actually
  // connected (so a DNS answer cannot redirect a request inward).
  bool allow_private = false;
  // Hosts (exact, case-insensitive, as written in the URL) exempt from the guard.
  std::vector<std::string> allow_hosts;
  // Bytes of a response body read at most; the rest is not read (the
  // connection is closed instead) and this is not an error.
  size_t max_response_bytes = 64 * 1024;
  // Requests sent to one host ("host:port" of the URL) at once at most (0: no
  // limit), so at most this many connections are open to it. The other
  // requests wait in a FIFO per host, in Delivery, and are sent (their
  // timeout starting then) as earlier ones finish. Idle connections are
  // reused across requests to the same host.
  size_t max_connections_per_host = 64;
};

// Asynchronous delivery. Proxies from the environment are not used (the guard
// checks the address connected, which would be the proxy's).
class Delivery {
 public:
  // Starts the delivery thread. Throws std::runtime_error if libcurl cannot
  // be initialised.
  explicit Delivery(Policy policy);
  // shutdown(now): whatever is still in flight is aborted.
  ~Delivery();

  Delivery(const Delivery&) = delete;
  Delivery& operator=(const Delivery&) = delete;

  // Queues the request; never blocks on the network. done runs exactly once
  // with the outcome, on the delivery thread, and must not block (it may
  // call submit). Thread-safe. After shutdown has begun the request is not
  // sent: done runs at once, on the caller's thread, with kRetry.
  void submit(Request request, std::function<void(Outcome)> done);

  // Requests submitted whose done has not yet returned. Thread-safe.
  size_t in_flight() const;

  // Stops taking requests; those already submitted get until deadline to
  // finish, then are aborted (done runs with kRetry, "aborted at shutdown").
  // Returns when every done has run and the thread has ended. Idempotent;
  // thread-safe. Throws std::logic_error if called from a done callback.
  void shutdown(std::chrono::steady_clock::time_point deadline);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The outcome of a response with this status, body and Retry-After header
// value (empty: absent), per the table above. Pure; thread-safe.
Outcome classify(int status, std::string_view body, std::string_view retry_after_header,
                 std::chrono::system_clock::time_point now);

// A Retry-After value (RFC 9110 10.2.3): delta-seconds, or an HTTP-date
// (IMF-fixdate, RFC 850 or asctime form) relative to now; a date already
// past gives 0. Negative, overflowing or malformed: nullopt. Pure.
std::optional<std::chrono::milliseconds> parse_retry_after(
    std::string_view value, std::chrono::system_clock::time_point now);

}  // namespace conveyor::http_delivery
