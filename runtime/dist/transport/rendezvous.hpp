#pragma once
// The rendezvous of a multi-process run: every rank calls rendezvous() once
// at start. Through the c10d TCPStore at master_addr:master_port (hosted by
// rank 0 unless a launcher's agent store exists), every rank publishes its
// endpoint (where its CAF middleman listens; opaque here), its world size and
// its config digest (a hash of the resolved config, computed by the caller),
// and gets back every rank's endpoint. Rank 0 checks the world sizes and the
// digests and publishes a verdict that every other rank waits on, so all
// ranks fail with the same one line instead of some of them hanging.
//
// A rank whose WORLD_SIZE differs from rank 0's finds out itself from rank
// 0's record and fails at once with the line rank 0 gives. Rank 0 sees its
// record too when its rank is inside rank 0's world; a rank outside it
// (RANK 3 when rank 0 has WORLD_SIZE 3) posts its record under "stray",
// which fails rank 0 unless rank 0 gave its verdict already (the others then
// go on without it, and the stray rank alone fails). Two processes with the
// same RANK (not 0, whose second copy cannot host the store): the later one
// finds the rank's claim counter taken and fails with a
// rendezvous_mismatch_error; rank 0, when the second claim came before its
// verdict, refuses every rank with the same line.
//
// Keys, all under
//   <store_prefix>/actorpipe/rendezvous/v1/gen_<generation>/
// are: claims_<r> (how many processes claimed RANK r), rank_<r> (that
// rank's record), stray (the record of a rank outside rank 0's world), verdict (rank 0's) and confirmed (a counter each rank
// bumps once it has read everything). store_prefix already separates the
// attempts of a restarted run ("/worker/attempt_<n>", see rank_env.hpp);
// "v1" is this protocol's version, so a rank of another build never parses a
// record it does not understand; generation separates rendezvous rounds in
// one attempt on a store that outlives them (torchrun's agent store): bump it
// for each new round, so a round never reads the keys of an older one.
//
// Rank 0 returns (or throws) once every rank that arrived confirmed it read
// the verdict, or at the timeout. The store it hosts lives as long as the
// result's `store` handle (only for the call when the caller drops it).
//
// c10d headers stay out of this file (they need USE_C10D_GLOO, which only
// actorpipe_core's own sources get).
#include <chrono>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "runtime/config/config.hpp"
#include "runtime/dist/transport/kv_store.hpp"

namespace actorpipe {

/// The ranks do not run the same thing: a config digest or a world size that
/// differs from rank 0's. what() is one line naming the ranks and both
/// values, the same on every rank. A config_error, so the apps exit with 2.
class rendezvous_mismatch_error : public config_error {
public:
  using config_error::config_error;
};

/// The rendezvous could not happen: the master unreachable within the
/// timeout, ranks that did not arrive, the store lost, bad options. what()
/// is one line. A runtime error, so the apps exit with 1.
class rendezvous_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A process that joined and was not taken in (the run ended first, or had
/// no stage for it): the run's answer, read from its store, not the
/// store's loss, though the store may be gone by the time it is reported.
class not_taken_in : public rendezvous_error {
public:
  using rendezvous_error::rendezvous_error;
};

/// How this rank joins the rendezvous.
struct rendezvous_options {
  std::string master_addr = "127.0.0.1";  ///< host of the store
  uint16_t master_port = 0;               ///< its port; 0 when this rank hosts it = any free port
  int rank = 0;                           ///< this rank, 0 .. world_size - 1
  int world_size = 1;                     ///< as this rank sees it (WORLD_SIZE)
  bool hosts_store = false;               ///< rank 0 without an agent store (rank_env::hosts_store())
  std::string store_prefix = "/worker/attempt_0";  ///< rank_env::store_prefix
  uint32_t generation = 0;                ///< rendezvous round within the attempt (see the top)
  /// Bounds every wait: reaching the master, rank 0 waiting for the others,
  /// the others waiting for rank 0's verdict (counted from when they reached
  /// the store, plus one second, so they read a verdict rank 0 gave at its
  /// own timeout).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  std::string endpoint;       ///< this rank's endpoint ("host:port"), opaque
  std::string config_digest;  ///< hash of the resolved config, opaque
  /// Called on the rank that hosts the store once it listens, with the
  /// actual port, before it waits for the others (so a launcher can hand an
  /// ephemeral port on). Ignored on other ranks.
  std::function<void(uint16_t)> on_store_listening;
  /// A later round on a store this process has open already (a healed
  /// run's next generation): used as it is, nothing is opened or hosted.
  kv_store_ptr store;
};

/// What every rank learns.
struct rendezvous_result {
  std::vector<std::string> endpoints;  ///< every rank's endpoint; index = rank
  uint16_t store_port = 0;             ///< the port of the store that was used
  /// The store itself (null in a world of one rank): keep it to go on using
  /// it; on the rank that hosts it, the server lives as long as this does.
  kv_store_ptr store;
};

/// Joins the rendezvous (see the top of this file). Blocks until rank 0's
/// verdict. Throws rendezvous_mismatch_error when a rank's config digest or
/// world size differs from rank 0's, and rendezvous_error when the master
/// cannot be reached within the timeout ("cannot reach the master at
/// 127.0.0.1:41234 within 2 s (connection refused)"), when ranks did not
/// arrive ("ranks 2, 3 did not arrive within 2 s"), when the store is lost,
/// or for bad options. A world of one rank returns its own endpoint without
/// any store.
rendezvous_result rendezvous(const rendezvous_options& options);

/// A connection of its own to the store at host:port (another process
/// hosts it), for a process that joins a running job or a thread that must
/// not share another's connection. Throws rendezvous_error when nothing
/// answers within `timeout`.
kv_store_ptr open_client_store(const std::string& host, uint16_t port, std::chrono::milliseconds timeout);

/// A store this process hosts on `port` (0: any free one; kv_store::port
/// says which), for a coordinator that takes a run over (a fresh store for
/// its generations). Throws rendezvous_error when it cannot listen.
kv_store_ptr host_store(uint16_t port, std::chrono::milliseconds timeout);

/// One TCP connect to host:port bounded by `limit`: "" when it connected,
/// else why not ("connection refused", "no answer", ...).
std::string try_connect(const std::string& host, uint16_t port, std::chrono::milliseconds limit);

/// "2 s", "1.5 s", "250 ms": a timeout as the messages name it.
std::string describe_timeout(std::chrono::milliseconds timeout);

}  // namespace actorpipe
