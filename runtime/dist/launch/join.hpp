#pragma once
// Processes that join a running job (`actorpipe launch --join HOST:PORT`):
// what rank 0's supervisor publishes so that they can, and what a joining
// process does until the supervisor has given it a place. Everything goes
// through the job's store, under <store prefix>/actorpipe/join/:
//
//   digest       rank 0's config digest (set: the run takes joiners)
//   world        the run's first WORLD_SIZE
//   tickets      a counter: each joiner takes the next number t, and is
//                RANK world + t - 1 from then on
//   placed/<R>   rank 0's answer to RANK R: the generation it joins, or
//                "no <why>" (the run ended first)
//   alive/<R>    a count a worker sets, one more each time, while it
//                waits and while a generation forms: rank 0 takes a joiner
//                whose count stands still for too long as lost
//                (actors/process/forming.cpp)
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dist/transport/kv_store.hpp"

namespace actorpipe {

/// Rank 0: the run takes joiners from now on.
void open_for_joiners(const kv_store& store, const std::string& store_prefix, const std::string& config_digest,
                      int world_size, bool apart = false);

/// Rank 0: how many processes have asked to join so far.
int joiners_so_far(const kv_store& store, const std::string& store_prefix);

/// The RANK of the joiner with ticket `t` (1, 2, ...).
int joiner_rank(int world_size, int ticket);

/// Rank 0: tells joiner RANK `rank` the generation it joins, or turns it
/// away with `why` (generation 0).
void place_joiner(const kv_store& store, const std::string& store_prefix, int rank, uint32_t generation,
                  const std::string& why = {});

/// Rank 0 at the run's end, before it counts the tickets: `ended` says
/// why, so that a process that takes a ticket later is told at once.
void close_to_joiners(const kv_store& store, const std::string& store_prefix, const std::string& why);

/// Rank 0 at the run's end: tells each joiner RANK in `ranks` (not taken
/// in) why, and waits up to `within` until each has read it (a joiner told
/// so sets told/<rank>): the store must outlive the answer, or a joiner
/// that polls late sees only the store gone.
void turn_away_joiners(const kv_store& store, const std::string& store_prefix, const std::vector<int>& ranks,
                       const std::string& why, std::chrono::milliseconds within);

/// The counter `alive/<rank>` (see the top), and one beat of it.
std::string alive_key(const std::string& store_prefix, int rank);
void beat(const kv_store& store, const std::string& store_prefix, int rank);

/// A process started again for a later generation beats `alive/<rank>`
/// from its first moment, every `every`, before its data, checkpoint and
/// actor system load (seconds, some of them): rank 0 takes one whose count
/// stands still for supervision.heartbeat_timeout_s for lost, as it does
/// any silent peer, and one stopped before this beat is such a one. A
/// store not yet reached is tried again each round. Destroying it stops
/// the beats (waiting at most for a connect in progress, 1 s).
class early_beats {
public:
  early_beats(std::string host, uint16_t port, std::string store_prefix, int rank, std::chrono::milliseconds every);
  ~early_beats();
  early_beats(const early_beats&) = delete;
  early_beats& operator=(const early_beats&) = delete;

private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/// `exited/<rank>`: "<generation> <how>", set by the launcher that started
/// process `rank` again for that generation when it ends (a process that
/// dies before its first beat is seen at once, not after a timeout).
std::string exited_key(const std::string& store_prefix, int rank);
/// The launcher's word, best effort: the store at host:port (this node's)
/// is asked for 3 s at most (c10d counts its connect timeout in whole
/// seconds), and a set waits for no answer. A child process tells it: a
/// store that closes meanwhile ends c10d's client with an uncaught throw.
void tell_exited(const std::string& host, uint16_t port, const std::string& store_prefix, int rank,
                 uint32_t generation, const std::string& how);
/// The `how` of exited/<rank> when it names `generation`; "" otherwise.
std::string exited_in(const kv_store& store, const std::string& store_prefix, int rank, uint32_t generation);

/// What a joining process got: its RANK, and the generation it joins.
struct join_ticket {
  int rank = -1;
  uint32_t generation = 0;
  /// The run's coordinator runs apart (rank_env::apart): `rank` is the
  /// process's place inside the run, one above the RANK a user sees.
  bool apart = false;
};

/// Rank 0 of a run that takes no joiners: a process that asks is told
/// `why` at once.
void refuse_joiners(const kv_store& store, const std::string& store_prefix, const std::string& why);

/// A joining process: waits (at most `opening`) until rank 0 has opened
/// for joiners or refused them (a coordinator just started, a standby's
/// after a takeover, opens once its first generation formed), checks its
/// config digest against rank 0's (throws rendezvous_mismatch_error, exit
/// 2, when they differ, and config_error when the run takes no joiners),
/// takes a ticket, and waits for rank 0's answer, calling `waiting` with
/// each change. Throws rendezvous_error when rank 0 turns it away or the
/// store goes.
join_ticket join_running(const kv_store& store, const std::string& store_prefix, const std::string& config_digest,
                         const std::string& at, const std::function<void(const std::string&)>& waiting,
                         std::chrono::milliseconds opening = std::chrono::seconds(60));

/// A joiner whose generation `called_off` rank 0 called off for another
/// process's loss: waits (beating) until rank 0 places it again, and
/// returns the generation it joins then. Throws as join_running does.
uint32_t wait_placed_again(const kv_store& store, const std::string& store_prefix, const join_ticket& t,
                           uint32_t called_off, const std::string& at);

}  // namespace actorpipe
