// A generation that forms while one of its processes is lost
// (actors/process/process_context.hpp).
//
// Every rank of a forming generation waits in the store: the rendezvous,
// the Gloo groups' addresses, the barriers. A member killed or stopped
// there used to hold the others until the connect timeout, and the run
// ended. Now rank 0 watches the members while they form (forming_watch).
// On a loss it closes the generation's gate and sets its called-off key,
// which every rank's store is armed with (kv_store::arm). Each rank's
// waits then end with forming_aborted. The ranks put their context back
// as it was before the generation and take rank 0's next plan: a heal
// over the survivors of the generation before, or, when only a process
// that joined was lost, that generation again.
//
// The gate keeps the memory right. A rank passes it (adds 1) just before
// its stages take their state, which a re-partition rewrites in its
// boundary memory. Rank 0 closes it by adding gate_closed. A rank that
// finds it closed stops before it touches anything; the sum rank 0 gets
// back says how many passed, and when a re-partition had begun, the next
// plan starts from disk. The generation forms only by rank 0's word
// (formed_key), given under the same lock as the call-off: never both.
#include <caf/all.hpp>

#include <condition_variable>
#include <map>
#include <mutex>

#include "actors/process/forming.hpp"
#include "messages/atoms.hpp"
#include "runtime/dist/launch/join.hpp"

namespace actorpipe::rank_detail {

context_before before_forming(const process_context& cx) {
  return {cx.env, cx.where, cx.members, cx.places, cx.plan, cx.moved_from, cx.fresh, cx.joined};
}

void put_back(process_context& cx, const context_before& before) {
  cx.env = before.env;
  cx.where = before.where;
  cx.members = before.members;
  cx.places = before.places;
  cx.plan = before.plan;
  cx.moved_from = before.moved_from;
  cx.fresh = before.fresh;
}

std::string called_off_key(const rank_env& env, uint32_t g) { return heal_key(env, g) + "/called_off"; }
std::string formed_key(const rank_env& env, uint32_t g) { return heal_key(env, g) + "/formed"; }
std::string gate_key(const rank_env& env, uint32_t g) { return heal_key(env, g) + "/gate"; }

bool called_off(const process_runtime& rt, const process_context& cx, uint32_t g) {
  if (g == 0 || !rt.store) return false;
  if (rt.store->tripped()) return true;
  const auto until =
      clock_type::now() + milliseconds(static_cast<int64_t>(cx.cfg.supervision.heartbeat_timeout_s * 1000) + 2000);
  try {
    while (clock_type::now() < until) {
      if (rt.store->has(called_off_key(cx.env, g))) return true;
      if (rt.store->has(formed_key(cx.env, g))) return false;
      std::this_thread::sleep_for(milliseconds(20));
    }
  } catch (const std::exception&) {
  }
  return false;
}

int home_rank(const process_context& cx, int q) {
  return cx.members.empty() ? q : cx.members.at(static_cast<size_t>(q));
}

std::vector<int> live_joiner_tickets(const kv_store& store, const process_context& cx, const std::set<int>& lost) {
  std::vector<int> tickets;
  for (int t = cx.joined + 1, n = joiners_so_far(store, cx.env.store_prefix); t <= n; ++t)
    if (!lost.count(joiner_rank(cx.world0, t))) tickets.push_back(t);
  return tickets;
}

std::string shown_rank(const process_context& cx, int q) {
  return cx.opts.ranks.shown_text(home_rank(cx, q));
}

bool goes_on_without(const process_context& cx) {
  const double wait = cx.cfg.supervision.replace_timeout_s;
  return wait == 0 || (wait > 0 && !launcher_present());
}

}  // namespace actorpipe::rank_detail
