// A generation that forms while one of its processes is lost
// (actors/rank_context.hpp).
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

#include "actors/rank_context.hpp"
#include "messages/atoms.hpp"
#include "runtime/dist/join.hpp"

namespace actorpipe::rank_detail {

context_before before_forming(const rank_context& cx) {
  return {cx.env, cx.where, cx.members, cx.places, cx.plan.parts, cx.moved_from, cx.fresh, cx.joined};
}

void put_back(rank_context& cx, const context_before& before) {
  cx.env = before.env;
  cx.where = before.where;
  cx.members = before.members;
  cx.places = before.places;
  cx.plan.parts = before.parts;
  cx.moved_from = before.moved_from;
  cx.fresh = before.fresh;
}

std::string called_off_key(const rank_env& env, uint32_t g) { return heal_key(env, g) + "/called_off"; }
std::string formed_key(const rank_env& env, uint32_t g) { return heal_key(env, g) + "/formed"; }
std::string gate_key(const rank_env& env, uint32_t g) { return heal_key(env, g) + "/gate"; }

bool called_off(const rank_runtime& rt, const rank_context& cx, uint32_t g) {
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

struct forming_watch::shared {
  std::mutex mutex;
  std::condition_variable changed;
  bool done = false, formed = false;
  std::optional<forming_loss> loss;
  caf::actor me;  // the watch's thread's actor: a stop_atom ends its wait at once
};

forming_watch::forming_watch(caf::actor_system& sys, kv_store_ptr client, const rank_env& env, uint32_t g,
                             std::vector<std::pair<int, caf::actor>> old, std::vector<int> joiners,
                             std::vector<std::pair<int, int>> restarted, std::function<std::string(int)> name_of,
                             milliseconds beat_limit)
    : s_(std::make_shared<shared>()) {
  const std::string off = called_off_key(env, g), gate = gate_key(env, g), prefix = env.store_prefix;
  const std::string during = " while generation " + std::to_string(g) + " formed";
  thread_ = std::thread([&sys, s = s_, client = std::move(client), old = std::move(old), joiners = std::move(joiners),
                         restarted = std::move(restarted), name_of = std::move(name_of), beat_limit, off, gate,
                         prefix, during, env, g] {
    caf::scoped_actor me{sys};
    {
      std::lock_guard<std::mutex> lock(s->mutex);
      s->me = caf::actor_cast<caf::actor>(me);
    }
    std::map<caf::actor_addr, int> watched;
    for (const auto& [q, dir] : old) {
      me->monitor(dir);
      watched[dir.address()] = q;
    }
    // By RANK: a joiner beats from before this generation; a process
    // started again beats from its first moment (early_beats): silent for
    // the limit from now, it is lost, as any peer (one stopped before its
    // first beat too).
    struct beats {
      int64_t count = -1;
      clock_type::time_point since = clock_type::now();
      int q = -1;          // a process started again: its rank (-1: a joiner)
      bool read = true;    // the count read once
      bool beating = true; // seen beating
    };
    std::map<int, beats> seen;
    for (int r : joiners) seen[r] = beats{};
    for (const auto& [q, r] : restarted) seen[r] = beats{-1, clock_type::now(), q, false, true};
    forming_loss loss;
    std::string why;
    const auto add_why = [&why](const std::string& w) { why += (why.empty() ? "" : "; ") + w; };
    const auto on_down = [&](const std::string& how) {
      return [&, how](caf::down_msg& dm) {
        const auto at = watched.find(dm.source);
        if (at == watched.end()) return;
        loss.old.push_back(at->second);
        add_why(name_of(at->second) + "'s process " +
                (how.empty() ? "went down or stopped answering (" + sys.render(dm.reason) + ")" : how));
      };
    };
    try {
      for (;;) {
        {
          std::lock_guard<std::mutex> lock(s->mutex);
          if (s->done || s->formed) return;
        }
        me->receive(on_down(""), [](stop_atom) {}, caf::after(milliseconds(50)) >> [] {});
        for (auto& [r, b] : seen) {
          if (b.count == -2) continue;  // counted lost already
          // One started again whose launcher saw it end (before its first
          // beat, too): lost at once.
          if (const std::string how = b.q >= 0 ? exited_in(*client, prefix, r, g) : ""; !how.empty()) {
            b.count = -2;
            loss.old.push_back(b.q);
            add_why("rank " + env.shown_text(r) + " (started again) " + how);
            continue;
          }
          const std::string key = alive_key(prefix, r);
          const int64_t n = client->has(key) ? std::stoll(client->get(key)) : -1;
          if (!b.read) {
            b.read = true;
            b.count = n;
          } else if (n != b.count) {
            b.count = n;
            b.since = clock_type::now();
            b.beating = true;
          } else if (b.beating && clock_type::now() - b.since > beat_limit) {
            b.count = -2;
            (b.q >= 0 ? loss.old : loss.joiners).push_back(b.q >= 0 ? b.q : r);
            add_why("rank " + env.shown_text(r) + (b.q >= 0 ? " (started again)" : " (joined)") +
                    " gave no sign of life for " + describe_timeout(beat_limit));
          }
        }
        if (why.empty()) continue;
        // The other processes of a lost host go down with it: 20 ms more.
        me->receive(on_down("went down too"), caf::after(milliseconds(20)) >> [] {});
        std::lock_guard<std::mutex> lock(s->mutex);
        if (s->done || s->formed) return;
        loss.why = why + during;
        loss.passed = client->add(gate, gate_closed) - gate_closed;
        client->set(off, loss.why);
        s->loss = loss;
        s->changed.notify_all();
        return;
      }
    } catch (const std::exception&) {
      // The store is gone with rank 0's own process: nothing to call off.
    }
  });
}

forming_watch::~forming_watch() {
  caf::actor me;
  {
    std::lock_guard<std::mutex> lock(s_->mutex);
    s_->done = true;
    me = s_->me;
  }
  // Not a poll's 50 ms: the next generation waits on this join.
  if (me) caf::anon_send(me, stop_atom::value);
  if (thread_.joinable()) thread_.join();
}

void forming_watch::commit() {
  std::lock_guard<std::mutex> lock(s_->mutex);
  if (s_->loss) throw forming_aborted("called off: " + s_->loss->why);
  s_->formed = true;
}

std::optional<forming_loss> forming_watch::lost(milliseconds grace) {
  std::unique_lock<std::mutex> lock(s_->mutex);
  s_->changed.wait_for(lock, grace, [this] { return s_->loss.has_value(); });
  return s_->loss;
}

}  // namespace actorpipe::rank_detail
