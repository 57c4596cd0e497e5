#pragma once
// Rank 0's watch over a generation while it forms (forming_watch.cpp).
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "actors/process/forming.hpp"

namespace actorpipe::rank_detail {

/// What rank 0's watch saw lost while a generation formed.
struct forming_loss {
  std::vector<int> old;      ///< processes of the generation before, by their rank there
  std::vector<int> joiners;  ///< processes that joined, by RANK
  std::string why;
  int64_t passed = 0;  ///< processes past the gate when it closed
};

/// Rank 0 while generation g forms: a thread watches its members, those of
/// the generation before on their directories (a process killed is seen at
/// once, one stopped or cut off after supervision.heartbeat_timeout_s),
/// those that joined on their alive/<RANK> counts (standing still for
/// `beat_limit`), and those the launcher started again for it (`restarted`:
/// rank q, its RANK) on the same counts once they have begun to beat (a
/// process that starts takes seconds; one that dies before its first beat
/// is not seen). A restarted one lost counts among `old`. On a loss it
/// closes the gate and calls g off, unless rank 0 committed first.
class forming_watch {
public:
  forming_watch(caf::actor_system& sys, kv_store_ptr client, const rank_env& env, uint32_t g,
                std::vector<std::pair<int, caf::actor>> old, std::vector<int> joiners,
                std::vector<std::pair<int, int>> restarted, std::function<std::string(int)> name_of,
                milliseconds beat_limit);
  ~forming_watch();
  forming_watch(const forming_watch&) = delete;
  forming_watch& operator=(const forming_watch&) = delete;

  /// Rank 0, formed: from now on the watch calls nothing off. Throws
  /// forming_aborted when it already has.
  void commit();
  /// Rank 0, its forming failed: what the watch saw lost, waiting up to
  /// `grace` for it; nullopt: nothing.
  std::optional<forming_loss> lost(milliseconds grace);

private:
  struct shared;
  std::shared_ptr<shared> s_;
  std::thread thread_;
};

}  // namespace actorpipe::rank_detail
