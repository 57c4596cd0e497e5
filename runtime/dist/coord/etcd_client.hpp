#pragma once
// A client of etcd 3.4's v3 JSON gateway (plain HTTP/1.1 POSTs to
// /v3/kv/..., /v3/lease/...; keys and values base64, 64-bit numbers as
// strings), enough for a run's durable record: put, get, create-if-absent
// with a lease, delete, and leases granted, kept alive and revoked.
//
// A request goes to the member that answered last, then to the others in
// order until one answers. A member that refuses the connection or does
// not answer within the request timeout is skipped; every member refusing
// is an etcd_error naming each address and why; a member that answers
// "request timed out" or "no leader" means the cluster has no majority,
// and so does every member accepting connections but none answering in
// time. No torch, no CAF: sockets and nlohmann::json.
#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace actorpipe {

/// An etcd request that failed; what() is one line naming the members
/// asked and why each did not serve it.
struct etcd_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct etcd_endpoint {
  std::string host;
  uint16_t port = 0;
  std::string text() const { return host + ":" + std::to_string(port); }
};

/// "etcd://HOST:PORT[,HOST:PORT...]" (or without the scheme) -> endpoints.
/// Throws std::invalid_argument naming what does not parse.
std::vector<etcd_endpoint> parse_etcd_url(const std::string& url);

/// Standard base64 with padding, and back (std::invalid_argument on
/// anything else).
std::string base64_encode(const std::string& bytes);
std::string base64_decode(const std::string& text);

class etcd_client {
public:
  using milliseconds = std::chrono::milliseconds;

  /// Throws std::invalid_argument when `members` is empty.
  explicit etcd_client(std::vector<etcd_endpoint> members, milliseconds timeout = milliseconds(3000));

  /// Sets `key` (with `lease` when not 0). Returns the store's revision after it.
  int64_t put(const std::string& key, const std::string& value, int64_t lease = 0);
  /// The value of `key`, nullopt when it is not set.
  std::optional<std::string> get(const std::string& key);
  /// The same, and the lease the key is held under (0: none) in `lease`.
  std::optional<std::string> get(const std::string& key, int64_t& lease);
  /// The key as the member asked holds it, without a round through the
  /// leader (a serializable read: cheap, maybe a moment stale): for
  /// polling; confirm an absence with get().
  std::optional<std::string> get_local(const std::string& key);
  /// Sets `key` only when it is not set (a transaction on its create
  /// revision). True when this call created it; false when it was there,
  /// and then `*holder` (when given) is its value.
  bool create(const std::string& key, const std::string& value, int64_t lease = 0, std::string* holder = nullptr);
  /// Deletes `key`; whether it was there.
  bool erase(const std::string& key);

  /// A lease of `ttl_s` seconds: its id.
  int64_t grant(int64_t ttl_s);
  /// Renews `lease` once: its remaining TTL in seconds, 0 when it has
  /// expired (or never was).
  int64_t keep_alive(int64_t lease);
  /// Ends `lease` now: every key set with it goes.
  void revoke(int64_t lease);

  /// The members, as given.
  const std::vector<etcd_endpoint>& members() const { return members_; }
  /// The members from the one that answered last on, as an etcd:// URL
  /// (another client made from it asks that one first).
  std::string url_from_last() const;

private:
  std::string call(const std::string& path, const std::string& body);

  std::vector<etcd_endpoint> members_;
  milliseconds timeout_;
  size_t last_ = 0;  // the member that answered last
};

}  // namespace actorpipe
