// Rank 0's watch over a generation while it forms (forming_watch.hpp;
// the forming itself, as every rank sees it: actors/process/forming.cpp).
#include "actors/supervisor/forming_watch.hpp"

#include <caf/all.hpp>

#include <condition_variable>
#include <map>
#include <mutex>

#include "messages/atoms.hpp"
#include "runtime/dist/launch/join.hpp"

namespace actorpipe::rank_detail {
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
