// TLS against real HTTPS servers on 127.0.0.1 (cpp-httplib's SSLServer),
// with a private CA and certificates made here at run time with OpenSSL:
// ca_file / ca_dir make a private CA trusted, certificate errors are
// permanent and say what to set, client_cert / client_key answer a server
// that requires a client certificate, and no redirect leaves https for http.
#include <gtest/gtest.h>
#include <httplib.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <fmt/format.h>

#include "conveyor/http_delivery.hpp"
#include "testing/delivery_helpers.hpp"
#include "testing/raw_http_server.hpp"

namespace conveyor::http_delivery {
namespace {

using testing::deliver;
using testing::eventually;
using testing::private_allowed;
using testing::RawHttpServer;

struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct CertFree {
  void operator()(X509* x) const { X509_free(x); }
};
using Key = std::unique_ptr<EVP_PKEY, KeyFree>;
using Cert = std::unique_ptr<X509, CertFree>;

void check(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(std::string("OpenSSL: ") + what);
}

Key new_key() {
  Key key(EVP_EC_gen("P-256"));
  check(key != nullptr, "EVP_EC_gen");
  return key;
}

void add_ext(X509* cert, X509* issuer, int nid, const char* value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  check(ext != nullptr, value);
  check(X509_add_ext(cert, ext, -1) == 1, "X509_add_ext");
  X509_EXTENSION_free(ext);
}

struct CertSpec {
  std::string common_name;
  std::string alt_names;  // subjectAltName, e.g. "IP:127.0.0.1"; empty: none
  bool ca = false;
  bool client = false;  // extendedKeyUsage clientAuth instead of serverAuth
  long not_before_s = -3600;
  long not_after_s = 86400;
};

// A certificate for key, signed by issuer (issuer_key), or self-signed when
// issuer is null.
Cert make_cert(const CertSpec& spec, EVP_PKEY* key, X509* issuer, EVP_PKEY* issuer_key) {
  static long serial = 1;
  Cert cert(X509_new());
  check(cert != nullptr, "X509_new");
  X509* x = cert.get();
  check(X509_set_version(x, 2) == 1, "X509_set_version");
  ASN1_INTEGER_set(X509_get_serialNumber(x), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x), spec.not_before_s);
  X509_gmtime_adj(X509_getm_notAfter(x), spec.not_after_s);
  check(X509_set_pubkey(x, key) == 1, "X509_set_pubkey");
  X509_NAME* name = X509_get_subject_name(x);
  X509_NAME_add_entry_by_txt(name, "O", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>("conveyor test"), -1, -1, 0);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(spec.common_name.c_str()), -1,
                             -1, 0);
  X509* signer = issuer != nullptr ? issuer : x;
  check(X509_set_issuer_name(x, X509_get_subject_name(signer)) == 1, "X509_set_issuer_name");
  add_ext(x, signer, NID_subject_key_identifier, "hash");
  if (issuer != nullptr) add_ext(x, signer, NID_authority_key_identifier, "keyid:always");
  if (spec.ca) {
    add_ext(x, signer, NID_basic_constraints, "critical,CA:TRUE");
    add_ext(x, signer, NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add_ext(x, signer, NID_basic_constraints, "critical,CA:FALSE");
    add_ext(x, signer, NID_key_usage, "critical,digitalSignature,keyEncipherment");
    add_ext(x, signer, NID_ext_key_usage, spec.client ? "clientAuth" : "serverAuth");
  }
  if (!spec.alt_names.empty()) add_ext(x, signer, NID_subject_alt_name, spec.alt_names.c_str());
  check(X509_sign(x, issuer_key != nullptr ? issuer_key : key, EVP_sha256()) > 0, "X509_sign");
  return cert;
}

void write_pem(const std::filesystem::path& path, X509* cert) {
  FILE* f = std::fopen(path.c_str(), "w");
  check(f != nullptr, "fopen");
  const bool ok = PEM_write_X509(f, cert) == 1;
  std::fclose(f);
  check(ok, "PEM_write_X509");
}

void write_pem(const std::filesystem::path& path, EVP_PKEY* key) {
  FILE* f = std::fopen(path.c_str(), "w");
  check(f != nullptr, "fopen");
  const bool ok = PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  std::fclose(f);
  check(ok, "PEM_write_PrivateKey");
}

// A private CA and the certificates the tests serve or present, as PEM files
// in a fresh directory (removed at the end).
class Certs {
 public:
  Certs() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "conveyor-tls-XXXXXX").string();
    check(mkdtemp(tmpl.data()) != nullptr, "mkdtemp");
    dir_ = tmpl;
    Key ca_key = new_key();
    Cert ca = make_cert({.common_name = "conveyor test CA", .alt_names = "", .ca = true},
                        ca_key.get(), nullptr, nullptr);
    write_pem(path("ca.pem"), ca.get());
    // ca_dir: the CA under its subject hash, as c_rehash names it.
    std::filesystem::create_directory(path("ca_dir"));
    write_pem(path("ca_dir") / fmt::format("{:08x}.0", X509_subject_name_hash(ca.get())), ca.get());

    auto leaf = [&](const std::string& name, const CertSpec& spec) {
      Key key = new_key();
      Cert cert = make_cert(spec, key.get(), ca.get(), ca_key.get());
      write_pem(path(name + ".pem"), cert.get());
      write_pem(path(name + ".key"), key.get());
    };
    leaf("server", {.common_name = "127.0.0.1", .alt_names = "IP:127.0.0.1"});
    leaf("wrong_name", {.common_name = "example.com", .alt_names = "DNS:example.com"});
    leaf("expired", {.common_name = "127.0.0.1",
                     .alt_names = "IP:127.0.0.1",
                     .not_before_s = -2 * 86400,
                     .not_after_s = -86400});
    leaf("client",
         {.common_name = "conveyor client", .alt_names = "", .ca = false, .client = true});

    Key self_key = new_key();
    Cert self = make_cert({.common_name = "127.0.0.1", .alt_names = "IP:127.0.0.1"}, self_key.get(),
                          nullptr, nullptr);
    write_pem(path("self.pem"), self.get());
    write_pem(path("self.key"), self_key.get());
  }
  ~Certs() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  std::filesystem::path path(const std::string& name) const { return dir_ / name; }

 private:
  std::filesystem::path dir_;
};

// An HTTPS server on 127.0.0.1 presenting cert/key, requiring a client
// certificate signed by client_ca when that is given. POST /hook records the
// body and answers 200; /to?url= answers 301 to that URL.
class TlsServer {
 public:
  TlsServer(const Certs& certs, const std::string& name, const char* client_ca = nullptr)
      : server_(certs.path(name + ".pem").c_str(), certs.path(name + ".key").c_str(),
                client_ca != nullptr ? certs.path(client_ca).c_str() : nullptr) {
    EXPECT_TRUE(server_.is_valid());
    server_.Post("/hook", [this](const httplib::Request& req, httplib::Response& res) {
      std::lock_guard lock(mu_);
      bodies_.push_back(req.body);
      res.status = 200;
      res.set_content("ok", "text/plain");
    });
    server_.Post("/to", [](const httplib::Request& req, httplib::Response& res) {
      res.status = 301;
      res.set_header("Location", req.get_param_value("url"));
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    EXPECT_TRUE(eventually([&] { return server_.is_running(); }));
  }
  ~TlsServer() {
    server_.stop();
    thread_.join();
  }
  std::string url(const std::string& path) const {
    return fmt::format("https://127.0.0.1:{}{}", port_, path);
  }
  std::vector<std::string> bodies() {
    std::lock_guard lock(mu_);
    return bodies_;
  }

 private:
  httplib::SSLServer server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::string> bodies_;
};

class TlsDelivery : public ::testing::Test {
 protected:
  Request hook(const TlsServer& server) const {
    Request r;
    r.url = server.url("/hook");
    r.body = "{\"job\":1}";
    r.headers = {{"Content-Type", "application/json"}};
    r.timeout = std::chrono::seconds(20);
    r.tls.section = "[queues.email.http]";
    return r;
  }
  Certs certs_;
  Delivery delivery_{private_allowed()};
};

TEST_F(TlsDelivery, CaFileMakesAPrivateCaTrusted) {
  TlsServer server(certs_, "server");
  Request r = hook(server);
  r.tls.ca_file = certs_.path("ca.pem");
  Outcome o = deliver(delivery_, r);
  EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << o.error;
  EXPECT_EQ(server.bodies(), std::vector<std::string>{r.body});
}

TEST_F(TlsDelivery, CaDirMakesAPrivateCaTrusted) {
  TlsServer server(certs_, "server");
  Request r = hook(server);
  r.tls.ca_file = certs_.path("self.pem");  // trusts something else: the directory must do it
  r.tls.ca_dir = certs_.path("ca_dir");
  Outcome o = deliver(delivery_, r);
  EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << o.error;
}

TEST_F(TlsDelivery, UnknownCaIsPermanentAndSaysWhatToSet) {
  TlsServer server(certs_, "server");
  Outcome o = deliver(delivery_, hook(server));
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_EQ(o.status, 0);
  EXPECT_EQ(o.error,
            "certificate of 127.0.0.1 not trusted (unable to get local issuer certificate): set "
            "[queues.email.http] ca_file (or ca_dir) to the CA that signed it");
  EXPECT_TRUE(server.bodies().empty());
}

TEST_F(TlsDelivery, SelfSignedIsPermanentAndSaysWhatToSet) {
  TlsServer server(certs_, "self");
  Request r = hook(server);
  r.tls.ca_file = certs_.path("ca.pem");
  Outcome o = deliver(delivery_, r);
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_EQ(o.error, fmt::format("certificate of 127.0.0.1 not trusted (self-signed certificate): "
                                 "set [queues.email.http] ca_file (or ca_dir) to the CA that "
                                 "signed it (ca_file is {})",
                                 r.tls.ca_file));
}

TEST_F(TlsDelivery, WrongNameIsPermanent) {
  TlsServer server(certs_, "wrong_name");
  Request r = hook(server);
  r.tls.ca_file = certs_.path("ca.pem");
  Outcome o = deliver(delivery_, r);
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_EQ(o.error.rfind("certificate of 127.0.0.1 does not name it (", 0), 0u) << o.error;
  EXPECT_TRUE(server.bodies().empty());
}

TEST_F(TlsDelivery, ExpiredIsPermanent) {
  TlsServer server(certs_, "expired");
  Request r = hook(server);
  r.tls.ca_file = certs_.path("ca.pem");
  Outcome o = deliver(delivery_, r);
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_EQ(o.error,
            "certificate of 127.0.0.1 is not valid now (certificate has expired): the server "
            "must renew it (or this machine's clock is wrong)");
}

TEST_F(TlsDelivery, UnreadableCaFileIsPermanent) {
  TlsServer server(certs_, "server");
  Request r = hook(server);
  r.tls.ca_file = certs_.path("missing.pem");
  Outcome o = deliver(delivery_, r);
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_NE(o.error.find("set [queues.email.http] ca_file to a readable PEM bundle"),
            std::string::npos)
      << o.error;
}

TEST_F(TlsDelivery, ClientCertificateAnswersAServerThatRequiresOne) {
  TlsServer server(certs_, "server", "ca.pem");
  Request r = hook(server);
  r.tls.ca_file = certs_.path("ca.pem");
  r.tls.client_cert = certs_.path("client.pem");
  r.tls.client_key = certs_.path("client.key");
  Outcome o = deliver(delivery_, r);
  EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << o.error;
  EXPECT_EQ(server.bodies(), std::vector<std::string>{r.body});
}

TEST_F(TlsDelivery, WithoutAClientCertificateTheServerRefuses) {
  TlsServer server(certs_, "server", "ca.pem");
  Request r = hook(server);
  r.tls.ca_file = certs_.path("ca.pem");
  Outcome o = deliver(delivery_, r);
  EXPECT_NE(o.kind, OutcomeKind::kSucceeded);
  EXPECT_EQ(o.status, 0);
  // TLS 1.3 (what OpenSSL 3 negotiates here): the server's alert arrives
  // after the client's handshake, on the first read, and names the problem.
  // The server closes at once, so sending the request may fail first
  // (broken pipe): then nothing says why, and it stays a retry.
  if (o.kind == OutcomeKind::kPermanent) {
    EXPECT_EQ(o.error.rfind("127.0.0.1 requires a client certificate (", 0), 0u) << o.error;
    EXPECT_NE(o.error.find("): set [queues.email.http] client_cert and client_key"),
              std::string::npos)
        << o.error;
  } else {
    EXPECT_EQ(o.kind, OutcomeKind::kRetry);
    EXPECT_FALSE(o.error.empty());
  }
  EXPECT_TRUE(server.bodies().empty());
}

TEST_F(TlsDelivery, AClientKeyThatIsNotAKeyIsPermanent) {
  TlsServer server(certs_, "server", "ca.pem");
  Request r = hook(server);
  r.tls.ca_file = certs_.path("ca.pem");
  r.tls.client_cert = certs_.path("client.pem");
  r.tls.client_key = certs_.path("client.pem");  // a certificate, not a key
  Outcome o = deliver(delivery_, r);
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_NE(o.error.find("set [queues.email.http] client_cert and client_key"), std::string::npos)
      << o.error;
}

TEST_F(TlsDelivery, NoRedirectFromHttpsToHttp) {
  TlsServer server(certs_, "server");
  RawHttpServer plain({});
  const std::string to = fmt::format("http://127.0.0.1:{}/hook", plain.port());
  Request r = hook(server);
  r.url = server.url("/to?url=" + to);
  r.tls.ca_file = certs_.path("ca.pem");
  r.follow_redirects = true;
  Outcome o = deliver(delivery_, r);
  EXPECT_EQ(o.kind, OutcomeKind::kPermanent);
  EXPECT_EQ(o.status, 301);
  EXPECT_EQ(o.error,
            fmt::format("the downstream answered 301 to {} with a redirect to {}: not followed "
                        "from https to http, which would send the request unencrypted; point the "
                        "url at the final https location",
                        r.url, to));
  EXPECT_EQ(plain.connections_accepted(), 0u);
}

TEST_F(TlsDelivery, RedirectsWithinHttpsAreFollowed) {
  TlsServer server(certs_, "server");
  Request r = hook(server);
  r.url = server.url("/to?url=" + server.url("/hook"));
  r.tls.ca_file = certs_.path("ca.pem");
  r.follow_redirects = true;
  Outcome o = deliver(delivery_, r);
  EXPECT_EQ(o.kind, OutcomeKind::kSucceeded) << o.error;
  EXPECT_EQ(server.bodies(), std::vector<std::string>{r.body});
}

}  // namespace
}  // namespace conveyor::http_delivery
