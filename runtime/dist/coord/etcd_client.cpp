#include "runtime/dist/coord/etcd_client.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>
#include <nlohmann/json.hpp>

namespace actorpipe {

namespace {

using clock_type = std::chrono::steady_clock;
using json = nlohmann::json;

const char* kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// One member did not serve a request: why, and whether it answered at all
// (an answer with an error, such as "request timed out", is a cluster
// without a majority, not a member that is down).
struct member_failure {
  std::string why;
  bool answered = false;
  bool refused = false;  // it answered that the request itself is wrong (a lease not found): no other member helps
};

// etcd's answers that a cluster without a majority (or between leaders)
// gives: another member, or a later try, may serve the request.
bool transient(const std::string& message) {
  for (const char* m : {"request timed out", "no leader", "leader changed", "too many requests", "not capable",
                        "unhealthy cluster"})
    if (message.find(m) != std::string::npos) return true;
  return false;
}

int64_t as_int(const json& j, const char* name) {
  if (!j.contains(name)) return 0;
  const json& v = j.at(name);
  return v.is_string() ? std::stoll(v.get<std::string>()) : v.get<int64_t>();
}

// A connected socket to `e` within `deadline`; -1 and `why` otherwise.
int connect_to(const etcd_endpoint& e, clock_type::time_point deadline, std::string& why) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (const int rc = ::getaddrinfo(e.host.c_str(), std::to_string(e.port).c_str(), &hints, &res); rc != 0) {
    why = std::string("does not resolve: ") + ::gai_strerror(rc);
    return -1;
  }
  int fd = -1;
  for (addrinfo* a = res; a && fd < 0; a = a->ai_next) {
    fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
    if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
      int err = ETIMEDOUT;
      if (left > 0 && ::poll(&p, 1, static_cast<int>(left)) == 1) {
        socklen_t len = sizeof err;
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      }
      if (err == 0) break;
      why = std::strerror(err);
    } else {
      why = std::strerror(errno);
    }
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(res);
  return fd;
}

// The body of an HTTP/1.1 response, chunked or not.
std::string body_of(const std::string& response, int& status) {
  const size_t head_end = response.find("\r\n\r\n");
  if (head_end == std::string::npos || response.compare(0, 5, "HTTP/") != 0)
    throw std::runtime_error("not an HTTP response");
  status = std::atoi(response.c_str() + response.find(' ') + 1);
  std::string head = response.substr(0, head_end);
  for (auto& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  std::string body = response.substr(head_end + 4);
  if (head.find("transfer-encoding: chunked") == std::string::npos) return body;
  std::string out;
  for (size_t at = 0;;) {
    const size_t eol = body.find("\r\n", at);
    if (eol == std::string::npos) throw std::runtime_error("a chunked body cut short");
    const size_t n = std::stoul(body.substr(at, eol - at), nullptr, 16);
    if (n == 0) return out;
    if (eol + 2 + n > body.size()) throw std::runtime_error("a chunked body cut short");
    out += body.substr(eol + 2, n);
    at = eol + 2 + n + 2;
  }
}

// POSTs `body` to `path` on `e`: the JSON answer, or nullopt and `failed`.
std::optional<json> post(const etcd_endpoint& e, const std::string& path, const std::string& body,
                         clock_type::time_point deadline, member_failure& failed) {
  int fd = connect_to(e, deadline, failed.why);
  if (fd < 0) return std::nullopt;
  const std::string request = "POST " + path + " HTTP/1.1\r\nHost: " + e.text() +
                              "\r\nContent-Type: application/json\r\nConnection: close\r\nContent-Length: " +
                              std::to_string(body.size()) + "\r\n\r\n" + body;
  std::string response;
  size_t sent = 0;
  bool done = false;
  while (!done) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now()).count();
    if (left <= 0) {
      failed.why = "no answer in time";
      failed.answered = true;  // it accepted the connection: up, but without a majority behind it
      break;
    }
    pollfd p{fd, static_cast<short>(sent < request.size() ? POLLOUT : POLLIN), 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
    if (sent < request.size()) {
      const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) {
        failed.why = std::strerror(errno);
        break;
      }
      if (n > 0) sent += static_cast<size_t>(n);
      continue;
    }
    char buf[16384];
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      response.append(buf, static_cast<size_t>(n));
    } else if (n == 0) {
      done = true;
    } else if (errno != EAGAIN && errno != EINTR) {
      failed.why = std::strerror(errno);
      break;
    }
  }
  ::close(fd);
  if (!done) return std::nullopt;
  try {
    int status = 0;
    json answer = json::parse(body_of(response, status));
    if (answer.is_object() && answer.contains("error")) {
      failed.why = answer.value("message", answer["error"].dump());
      failed.answered = true;
      failed.refused = !transient(failed.why);
      return std::nullopt;
    }
    if (status != 200) {
      failed.why = "HTTP " + std::to_string(status);
      failed.answered = true;
      return std::nullopt;
    }
    return answer;
  } catch (const std::exception& x) {
    failed.why = std::string("an answer that does not parse: ") + x.what();
    failed.answered = true;
    return std::nullopt;
  }
}

json key_body(const std::string& key) { return json{{"key", base64_encode(key)}}; }

}  // namespace

std::string base64_encode(const std::string& bytes) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < bytes.size(); i += 3) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) | (static_cast<uint8_t>(bytes[i + 1]) << 8) |
                       static_cast<uint8_t>(bytes[i + 2]);
    for (int s : {18, 12, 6, 0}) out += kAlphabet[(v >> s) & 63];
  }
  if (i + 1 == bytes.size()) {
    const uint32_t v = static_cast<uint8_t>(bytes[i]) << 16;
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += "==";
  } else if (i + 2 == bytes.size()) {
    const uint32_t v = (static_cast<uint8_t>(bytes[i]) << 16) | (static_cast<uint8_t>(bytes[i + 1]) << 8);
    out += kAlphabet[(v >> 18) & 63];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += '=';
  }
  return out;
}

std::string base64_decode(const std::string& text) {
  if (text.size() % 4 != 0) throw std::invalid_argument("base64: length " + std::to_string(text.size()) + " is not a multiple of 4");
  std::string out;
  for (size_t i = 0; i < text.size(); i += 4) {
    uint32_t v = 0;
    int pad = 0;
    for (size_t k = 0; k < 4; ++k) {
      const char c = text[i + k];
      const char* at = c ? std::strchr(kAlphabet, c) : nullptr;
      if (c == '=' && i + 4 == text.size() && k >= 2) {
        ++pad;
        v <<= 6;
        continue;
      }
      if (!at || pad) throw std::invalid_argument("base64: a character that is not base64 at " + std::to_string(i + k));
      v = (v << 6) | static_cast<uint32_t>(at - kAlphabet);
    }
    out += static_cast<char>((v >> 16) & 255);
    if (pad < 2) out += static_cast<char>((v >> 8) & 255);
    if (pad < 1) out += static_cast<char>(v & 255);
  }
  return out;
}

std::vector<etcd_endpoint> parse_etcd_url(const std::string& url) {
  std::string rest = url;
  if (rest.rfind("etcd://", 0) == 0) rest = rest.substr(7);
  if (rest.empty()) throw std::invalid_argument("'" + url + "' names no etcd member (etcd://HOST:PORT[,HOST:PORT...])");
  std::vector<etcd_endpoint> out;
  for (size_t at = 0; at <= rest.size();) {
    const size_t comma = std::min(rest.find(',', at), rest.size());
    const std::string one = rest.substr(at, comma - at);
    const size_t colon = one.rfind(':');
    if (one.empty() || colon == std::string::npos || colon == 0 || colon + 1 == one.size())
      throw std::invalid_argument("'" + one + "' in '" + url + "' is not HOST:PORT");
    const std::string port = one.substr(colon + 1);
    if (port.find_first_not_of("0123456789") != std::string::npos || port.size() > 5 || std::stoul(port) == 0 ||
        std::stoul(port) > 65535)
      throw std::invalid_argument("'" + port + "' in '" + url + "' is not a port 1..65535");
    out.push_back({one.substr(0, colon), static_cast<uint16_t>(std::stoul(port))});
    at = comma + 1;
  }
  return out;
}

etcd_client::etcd_client(std::vector<etcd_endpoint> members, milliseconds timeout)
    : members_(std::move(members)), timeout_(timeout) {
  if (members_.empty()) throw std::invalid_argument("etcd_client: no member");
}

std::string etcd_client::url_from_last() const {
  std::string url = "etcd://";
  for (size_t k = 0; k < members_.size(); ++k)
    url += (k ? "," : "") + members_[(last_ + k) % members_.size()].text();
  return url;
}

std::string etcd_client::call(const std::string& path, const std::string& body) {
  const auto deadline = clock_type::now() + timeout_;
  std::string whys;
  bool answered = false;
  // Members that answered "no leader" (an election after the leader was
  // lost takes a second or so) are asked again, every 50 ms, until the
  // timeout: a cluster that keeps its majority serves the request.
  for (bool again = true; again;) {
    whys.clear();
    answered = false;
    for (size_t k = 0; k < members_.size(); ++k) {
      const size_t i = (last_ + k) % members_.size();
      member_failure failed;
      // A member that accepted but did not answer used up the time: the
      // others get a share of their own.
      const auto until = std::max(deadline, clock_type::now() + timeout_ / static_cast<int64_t>(members_.size()));
      if (auto got = post(members_[i], path, body, k == 0 ? deadline : until, failed)) {
        last_ = i;
        return got->dump();
      }
      if (failed.refused) throw etcd_error("etcd at " + members_[i].text() + " refused " + path + ": " + failed.why);
      answered = answered || failed.answered;
      whys += (whys.empty() ? "" : "; ") + members_[i].text() + ": " + failed.why;
    }
    again = answered && clock_type::now() + std::chrono::milliseconds(50) < deadline;
    if (again) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::string all;
  for (const auto& m : members_) all += (all.empty() ? "" : ", ") + m.text();
  if (answered) throw etcd_error("etcd at " + all + " did not serve " + path + " (no majority of its members?): " + whys);
  throw etcd_error("no etcd member answered at " + all + " (" + whys + ")");
}

int64_t etcd_client::put(const std::string& key, const std::string& value, int64_t lease) {
  json body = key_body(key);
  body["value"] = base64_encode(value);
  if (lease) body["lease"] = std::to_string(lease);
  const json answer = json::parse(call("/v3/kv/put", body.dump()));
  return answer.contains("header") ? as_int(answer["header"], "revision") : 0;
}

std::optional<std::string> etcd_client::get(const std::string& key) {
  int64_t lease = 0;
  return get(key, lease);
}

std::optional<std::string> etcd_client::get_local(const std::string& key) {
  json body = key_body(key);
  body["serializable"] = true;
  const json answer = json::parse(call("/v3/kv/range", body.dump()));
  if (!answer.contains("kvs") || answer["kvs"].empty()) return std::nullopt;
  const json& kv = answer["kvs"][0];
  return kv.contains("value") ? base64_decode(kv["value"].get<std::string>()) : std::string();
}

std::optional<std::string> etcd_client::get(const std::string& key, int64_t& lease) {
  lease = 0;
  const json answer = json::parse(call("/v3/kv/range", key_body(key).dump()));
  if (!answer.contains("kvs") || answer["kvs"].empty()) return std::nullopt;
  const json& kv = answer["kvs"][0];
  lease = as_int(kv, "lease");
  return kv.contains("value") ? base64_decode(kv["value"].get<std::string>()) : std::string();
}

bool etcd_client::create(const std::string& key, const std::string& value, int64_t lease, std::string* holder) {
  json put = key_body(key);
  put["value"] = base64_encode(value);
  if (lease) put["lease"] = std::to_string(lease);
  const json body = {
      {"compare", json::array({{{"key", base64_encode(key)}, {"target", "CREATE"}, {"result", "EQUAL"},
                                {"create_revision", "0"}}})},
      {"success", json::array({{{"request_put", put}}})},
      {"failure", json::array({{{"request_range", key_body(key)}}})}};
  const json answer = json::parse(call("/v3/kv/txn", body.dump()));
  if (answer.value("succeeded", false)) return true;
  if (holder) {
    holder->clear();
    for (const auto& r : answer.value("responses", json::array()))
      if (r.contains("response_range") && r["response_range"].contains("kvs") && !r["response_range"]["kvs"].empty())
        *holder = base64_decode(r["response_range"]["kvs"][0].value("value", std::string()));
  }
  return false;
}

bool etcd_client::erase(const std::string& key) {
  const json answer = json::parse(call("/v3/kv/deleterange", key_body(key).dump()));
  return as_int(answer, "deleted") > 0;
}

int64_t etcd_client::grant(int64_t ttl_s) {
  const json answer = json::parse(call("/v3/lease/grant", json{{"TTL", std::to_string(ttl_s)}}.dump()));
  return as_int(answer, "ID");
}

int64_t etcd_client::keep_alive(int64_t lease) {
  const json answer = json::parse(call("/v3/lease/keepalive", json{{"ID", std::to_string(lease)}}.dump()));
  return answer.contains("result") ? as_int(answer["result"], "TTL") : 0;
}

void etcd_client::revoke(int64_t lease) {
  call("/v3/lease/revoke", json{{"ID", std::to_string(lease)}}.dump());
}

}  // namespace actorpipe
