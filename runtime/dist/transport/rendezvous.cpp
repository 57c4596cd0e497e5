// rendezvous over a c10d TCPStore: records, rank 0's verdict, confirmations
// (see rendezvous.hpp for the keys).
#include "runtime/dist/transport/rendezvous.hpp"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "runtime/dist/transport/kv_store_impl.hpp"
#include "runtime/dist/transport/poll_backoff.hpp"
#include "runtime/dist/transport/tcp_store.hpp"

#include <cerrno>
#include <cstring>
#include <thread>

#include "runtime/util/text.hpp"

namespace actorpipe {

namespace {

using clock_type = std::chrono::steady_clock;
using store_ptr = c10::intrusive_ptr<c10d::TCPStore>;

// c10::Error's what() carries a C++ backtrace; the reason alone reads better.
std::string reason(const std::exception& e) {
  if (auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

std::chrono::milliseconds left_until(clock_type::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - clock_type::now());
}

// One record: "<world_size>:<digest bytes>:<digest><endpoint>".
std::string encode_record(int world_size, const std::string& digest, const std::string& endpoint) {
  return std::to_string(world_size) + ":" + std::to_string(digest.size()) + ":" + digest + endpoint;
}

struct record {
  int world_size = 0;
  std::string digest, endpoint;
};

record decode_record(const std::string& s, const std::string& what) {
  record r;
  size_t a = s.find(':');
  size_t b = a == std::string::npos ? a : s.find(':', a + 1);
  try {
    if (b == std::string::npos) throw std::invalid_argument("no fields");
    r.world_size = std::stoi(s.substr(0, a));
    size_t n = std::stoul(s.substr(a + 1, b - a - 1));
    if (n > s.size() - b - 1) throw std::invalid_argument("short");
    r.digest = s.substr(b + 1, n);
    r.endpoint = s.substr(b + 1 + n);
  } catch (const std::exception&) {
    throw rendezvous_error(what + " is malformed: " + quoted_input(s) + " (another build's rendezvous?)");
  }
  return r;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

std::string world_size_mismatch(int rank, int world_size, int world_size0) {
  return "rank " + std::to_string(rank) + " sees WORLD_SIZE " + std::to_string(world_size) + " but rank 0 sees " +
         std::to_string(world_size0) + ": every rank must see the same world size";
}

std::string digest_mismatch(const std::vector<int>& ranks, const std::vector<std::string>& digests,
                            const std::string& digest0) {
  std::string shown;
  for (size_t i = 0; i < digests.size(); ++i) shown += (i ? ", " : "") + quoted_input(digests[i], "'", 16);
  std::string head = ranks.size() == 1 ? rank_list(ranks) + "'s config differs"
                                       : rank_list(ranks) + " have configs that differ";
  return head + " from rank 0's (digest" + (ranks.size() == 1 ? " " : "s ") + shown + " against " +
         quoted_input(digest0, "'", 16) + "): every rank must run the same config";
}

// ---- reaching the master ----------------------------------------------------

// Connects to (or, on the rank that hosts it, starts) the store.
store_ptr open_store(const rendezvous_options& o, clock_type::time_point deadline) {
  const std::string at = o.master_addr + ":" + std::to_string(o.master_port);
  c10d::TCPStoreOptions so;
  so.port = o.master_port;
  so.isServer = o.hosts_store;
  so.numWorkers = static_cast<size_t>(o.world_size);
  so.waitWorkers = false;  // the records below are the wait
  so.timeout = o.timeout;
  if (!o.hosts_store) {
    // Probe first: c10d retries for the whole timeout but does not say why
    // nothing answered.
    std::string why;
    while (!(why = try_connect(o.master_addr, o.master_port, std::min(left_until(deadline),
                                                                          std::chrono::milliseconds(1000))))
                .empty()) {
      // A later generation's process (a replacement) was asked for by
      // rank 0, whose store listened then: refused now, it is gone.
      if (o.generation > 0 && why == "connection refused")
        throw rendezvous_error("rank 0's store at " + at + " refused generation " + std::to_string(o.generation) +
                               "'s process (" + why + ")");
      if (left_until(deadline).count() <= 0)
        throw rendezvous_error("cannot reach the master at " + at + " within " + describe_timeout(o.timeout) + " (" +
                               why + ")");
      std::this_thread::sleep_for(std::min(left_until(deadline), std::chrono::milliseconds(50)));
    }
    so.timeout = std::max(left_until(deadline), std::chrono::milliseconds(200));
  }
  try {
    return make_tcp_store(o.master_addr, so);
  } catch (const std::exception& e) {
    throw rendezvous_error(std::string(o.hosts_store ? "cannot start the store at " : "cannot reach the master at ") +
                           at + ": " + reason(e));
  }
}

// ---- the store's keys -----------------------------------------------------------

class board {
public:
  board(c10::intrusive_ptr<c10d::Store> s, uint16_t port, const rendezvous_options& o)
    : store_(std::move(s)), port_(port), rank_(o.rank),
      base_(o.store_prefix + "/actorpipe/rendezvous/v1/gen_" + std::to_string(o.generation) + "/") {}

  bool has(const std::string& key) { return call([&] { return store_->check({base_ + key}); }); }
  std::string get(const std::string& key) {
    return call([&] {
      auto v = store_->get(base_ + key);
      return std::string(v.begin(), v.end());
    });
  }
  void set(const std::string& key, const std::string& value) {
    call([&] {
      store_->set(base_ + key, std::vector<uint8_t>(value.begin(), value.end()));
      return 0;
    });
  }
  int64_t add(const std::string& key, int64_t n) { return call([&] { return store_->add(base_ + key, n); }); }

  /// Waits (polling) until `key` exists; false at the deadline.
  bool wait_for(const std::string& key, clock_type::time_point deadline) {
    poll_backoff wait(std::chrono::milliseconds(10));
    while (!has(key)) {
      if (left_until(deadline).count() <= 0) return false;
      wait.pause();
    }
    return true;
  }

  uint16_t port() const { return port_; }
  kv_store_ptr shared() const {
    return std::make_shared<kv_store>(std::make_shared<kv_store::impl>(store_, port_));
  }

private:
  template <class F>
  auto call(F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const std::exception& e) {
      throw rendezvous_error("rank " + std::to_string(rank_) + " lost the rendezvous store: " + reason(e));
    }
  }

  c10::intrusive_ptr<c10d::Store> store_;
  uint16_t port_ = 0;
  int rank_;
  std::string base_;
};

std::string rank_key(int r) { return "rank_" + std::to_string(r); }

// Throws what a verdict says (nothing for "ok").
void apply_verdict(const std::string& verdict) {
  if (verdict == "ok") return;
  size_t nl = verdict.find('\n');
  std::string kind = verdict.substr(0, nl), line = nl == std::string::npos ? "" : verdict.substr(nl + 1);
  if (kind == "mismatch") throw rendezvous_mismatch_error(line);
  if (kind == "error") throw rendezvous_error(line);
  throw rendezvous_error("rank 0's verdict is malformed: " + quoted_input(verdict));
}

std::vector<std::string> read_endpoints(board& b, int world_size) {
  std::vector<std::string> out;
  for (int r = 0; r < world_size; ++r)
    out.push_back(decode_record(b.get(rank_key(r)), "rank " + std::to_string(r) + "'s record").endpoint);
  return out;
}

std::string claim_key(int rank) { return "claims_" + std::to_string(rank); }

std::string duplicate_rank(int rank, int64_t claims) {
  return "RANK " + std::to_string(rank) + " was claimed by " + std::to_string(claims) +
         " processes: every process needs its own RANK (0 .. WORLD_SIZE - 1)";
}

// Rank 0: collects the records, checks them, publishes the verdict, waits for
// the confirmations.
rendezvous_result run_rank0(board& b, const rendezvous_options& o, clock_type::time_point deadline) {
  b.set(rank_key(0), encode_record(o.world_size, o.config_digest, o.endpoint));
  std::vector<bool> arrived(static_cast<size_t>(o.world_size), false);
  arrived[0] = true;
  std::string verdict;
  poll_backoff arriving(std::chrono::milliseconds(10));
  for (;;) {
    std::vector<int> missing;
    for (int r = 1; r < o.world_size; ++r)
      if (!arrived[static_cast<size_t>(r)] && !(arrived[static_cast<size_t>(r)] = b.has(rank_key(r))))
        missing.push_back(r);
    if (b.has("stray")) {
      std::string s = b.get("stray");
      size_t cut = s.find('\n');
      record stray = decode_record(s.substr(cut == std::string::npos ? s.size() : cut + 1), "a stray record");
      verdict = "mismatch\n" + world_size_mismatch(std::atoi(s.c_str()), stray.world_size, o.world_size);
      break;
    }
    if (missing.empty()) break;
    if (left_until(deadline).count() <= 0) {
      verdict = "error\n" + rank_list(missing) + " did not arrive within " + describe_timeout(o.timeout);
      break;
    }
    arriving.pause();
  }
  rendezvous_result result;
  result.store_port = b.port();
  result.store = b.shared();
  if (verdict.empty()) {
    std::vector<int> differ;
    std::vector<std::string> digests;
    for (int r = 1; r < o.world_size && verdict.empty(); ++r) {
      record rec = decode_record(b.get(rank_key(r)), "rank " + std::to_string(r) + "'s record");
      if (rec.world_size != o.world_size) verdict = "mismatch\n" + world_size_mismatch(r, rec.world_size, o.world_size);
      if (rec.digest != o.config_digest) {
        differ.push_back(r);
        digests.push_back(rec.digest);
      }
    }
    if (verdict.empty() && !differ.empty()) verdict = "mismatch\n" + digest_mismatch(differ, digests, o.config_digest);
    for (int r = 1; r < o.world_size && verdict.empty(); ++r)
      if (const int64_t claims = b.add(claim_key(r), 0); claims > 1) verdict = "mismatch\n" + duplicate_rank(r, claims);
    if (verdict.empty()) {
      verdict = "ok";
      result.endpoints = read_endpoints(b, o.world_size);
    }
  }
  b.set("verdict", verdict);
  // Every rank that arrived confirms once it is done with the store, which
  // lives only as long as this call on the rank that hosts it.
  int64_t expected = 0;
  for (size_t r = 1; r < arrived.size(); ++r) expected += arrived[r] ? 1 : 0;
  auto confirm_deadline = clock_type::now() + o.timeout;
  int64_t confirmed = 0;
  poll_backoff confirming(std::chrono::milliseconds(10));
  while ((confirmed = b.add("confirmed", 0)) < expected && left_until(confirm_deadline).count() > 0)
    confirming.pause();
  apply_verdict(verdict);
  if (confirmed < expected)
    throw rendezvous_error("only " + std::to_string(confirmed) + " of " + std::to_string(expected) +
                           " other ranks confirmed the rendezvous within " + describe_timeout(o.timeout));
  return result;
}

// Ranks 1..: publish, check the world size against rank 0's, wait for the
// verdict, read the endpoints, confirm.
rendezvous_result run_other(board& b, const rendezvous_options& o) {
  // A second process with this RANK finds the claim taken and fails alone,
  // leaving the first one's record in place; rank 0 sees the count.
  const int64_t claims = b.add(claim_key(o.rank), 1);
  if (claims > 1) throw rendezvous_mismatch_error(duplicate_rank(o.rank, claims));
  const std::string mine = encode_record(o.world_size, o.config_digest, o.endpoint);
  b.set(rank_key(o.rank), mine);
  // Counted from reaching the store, plus a second: rank 0 gives its verdict
  // at most its timeout after it started the store, which was before.
  auto deadline = clock_type::now() + o.timeout + std::chrono::seconds(1);
  const std::string waited = " within " + describe_timeout(o.timeout + std::chrono::seconds(1)) + " (rank " +
                             std::to_string(o.rank) + " waited)";
  if (!b.wait_for(rank_key(0), deadline)) throw rendezvous_error("rank 0 published nothing" + waited);
  record rank0 = decode_record(b.get(rank_key(0)), "rank 0's record");
  if (rank0.world_size != o.world_size) {
    if (o.rank >= rank0.world_size) b.set("stray", std::to_string(o.rank) + "\n" + mine);
    b.add("confirmed", 1);
    throw rendezvous_mismatch_error(world_size_mismatch(o.rank, o.world_size, rank0.world_size));
  }
  if (!b.wait_for("verdict", deadline)) throw rendezvous_error("rank 0 gave no verdict" + waited);
  std::string verdict = b.get("verdict");
  rendezvous_result result;
  result.store_port = b.port();
  result.store = b.shared();
  if (verdict == "ok") result.endpoints = read_endpoints(b, o.world_size);
  b.add("confirmed", 1);
  apply_verdict(verdict);
  return result;
}

}  // namespace

std::string try_connect(const std::string& host, uint16_t port, std::chrono::milliseconds limit) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0) return std::string("cannot resolve the host: ") + ::gai_strerror(rc);
  std::string why = "no address";
  for (addrinfo* a = found; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      why = std::strerror(errno);
      continue;
    }
    int err = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 ? 0 : errno;
    if (err == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int r = ::poll(&p, 1, static_cast<int>(std::max<int64_t>(1, limit.count())));
      socklen_t len = sizeof err;
      if (r == 1) ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      else err = ETIMEDOUT;
    }
    ::close(fd);
    if (err == 0) {
      ::freeaddrinfo(found);
      return "";
    }
    why = err == ECONNREFUSED ? "connection refused" : err == ETIMEDOUT ? "no answer" : std::strerror(err);
  }
  ::freeaddrinfo(found);
  return why;
}


std::string describe_timeout(std::chrono::milliseconds timeout) {
  auto ms = timeout.count();
  if (ms < 1000) return std::to_string(ms) + " ms";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + " s";
  std::string s = fmt("%.3f", static_cast<double>(ms) / 1000.0);
  while (s.back() == '0') s.pop_back();
  return s + " s";
}

kv_store_ptr open_client_store(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  rendezvous_options o;
  o.master_addr = host;
  o.master_port = port;
  o.timeout = timeout;
  auto s = open_store(o, clock_type::now() + timeout);
  return std::make_shared<kv_store>(std::make_shared<kv_store::impl>(s, port));
}

kv_store_ptr host_store(uint16_t port, std::chrono::milliseconds timeout) {
  rendezvous_options o;
  o.master_addr = "0.0.0.0";
  o.master_port = port;
  o.timeout = timeout;
  o.hosts_store = true;
  auto s = open_store(o, clock_type::now() + timeout);
  return std::make_shared<kv_store>(std::make_shared<kv_store::impl>(s, s->getPort()));
}

rendezvous_result rendezvous(const rendezvous_options& o) {
  std::string where = "rendezvous of rank " + std::to_string(o.rank) + "/" + std::to_string(o.world_size);
  if (o.world_size < 1 || o.rank < 0 || o.rank >= o.world_size)
    throw rendezvous_error(where + ": rank must be in 0 .. world_size - 1, world_size >= 1");
  if (o.timeout.count() <= 0) throw rendezvous_error(where + ": timeout must be positive");
  if (o.hosts_store && o.rank != 0) throw rendezvous_error(where + ": only rank 0 may host the store");
  if (o.world_size == 1) return rendezvous_result{{o.endpoint}, 0, nullptr};
  if (!o.hosts_store && o.master_port == 0)
    throw rendezvous_error(where + ": a rank that does not host the store needs the master's port (0 given)");
  auto deadline = clock_type::now() + o.timeout;
  auto opened = o.store ? store_ptr() : open_store(o, deadline);
  board b = o.store ? board(o.store->get().store, o.store->port(), o) : board(opened, opened->getPort(), o);
  if (o.hosts_store && o.on_store_listening) o.on_store_listening(b.port());
  return o.rank == 0 ? run_rank0(b, o, deadline) : run_other(b, o);
}

}  // namespace actorpipe
