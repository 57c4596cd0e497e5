#pragma once
// A generation that forms while one of its processes is lost: its keys
// in the store, the context put back, and who the members are
// (forming.cpp).
#include <set>
#include <string>
#include <vector>

#include "actors/process/links.hpp"

namespace actorpipe::rank_detail {

/// What join_generation changes in a rank's context: put back when the
/// generation it began is called off (the process then serves the
/// generation before it, as far as rank 0's next plan is concerned).
struct context_before {
  rank_env env;
  std::string where;
  std::vector<int> members;
  rank_placement places;
  attempt_plan plan;  // its partition, and its stage count (a re-cut changes both)
  std::vector<std::pair<int, int>> moved_from;
  bool fresh;
  int joined;  // rank 0: the joiners taken in before (put_back leaves cx.joined be)
};
context_before before_forming(const process_context& cx);
void put_back(process_context& cx, const context_before& before);

/// Generation g's keys in the store: rank 0's reason for calling it off,
/// rank 0's word that it formed (one or the other, never both), and the
/// gate every rank passes before its stages touch its boundary memory
/// (rank 0 closes it by adding gate_closed: the sum tells who passed).
std::string called_off_key(const rank_env& env, uint32_t g);
std::string formed_key(const rank_env& env, uint32_t g);
std::string gate_key(const rank_env& env, uint32_t g);
constexpr int64_t gate_closed = int64_t{1} << 40;

/// The store armed with a generation's called-off key while it forms,
/// disarmed however the forming ends (null store, "" key: nothing).
struct armed {
  armed(const kv_store_ptr& store, const std::string& key) : store(store) {
    if (store) store->arm(key);
  }
  ~armed() {
    if (store) store->arm("");
  }
  armed(const armed&) = delete;
  armed& operator=(const armed&) = delete;
  kv_store_ptr store;
};

/// A rank other than 0 whose forming of generation g threw: whether rank 0
/// called g off (seen by its store at once, or within the heartbeat
/// timeout and 2 s: a peer lost can fail this rank's connect before rank 0
/// sees it).
bool called_off(const process_runtime& rt, const process_context& cx, uint32_t g);

/// The RANK process q of this generation was started with.
int home_rank(const process_context& cx, int q);
/// Rank 0: the tickets of the joiners that asked (in `store`) and wait to
/// be taken in, in order, less those whose RANK is in `lost`.
std::vector<int> live_joiner_tickets(const kv_store& store, const process_context& cx, const std::set<int>& lost);
/// Rank q of this generation as a user knows it: the RANK its process was
/// started with ("c" for a coordinator apart, rank_env::apart).
std::string shown_rank(const process_context& cx, int q);

/// Whether the run goes on without the processes that are gone rather than
/// wait for replacements (supervision.replace_timeout_s: 0, or above 0
/// where no launcher can start one).
bool goes_on_without(const process_context& cx);

}  // namespace actorpipe::rank_detail
