// Rank 0, once its driver returned from a generation: heal the run (a
// process gone, the others holding boundaries) or end it on every rank
// (actors/process/process_context.hpp).
#include <algorithm>

#include "actors/supervisor/heal_decision.hpp"
#include "actors/attempt/restart_ledger.hpp"
#include "messages/atoms.hpp"
#include "runtime/dist/launch/join.hpp"
#include "runtime/model/partition.hpp"
#include "runtime/model/model.hpp"
#include "runtime/files/checkpoint.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe::rank_detail {

std::optional<heal_plan> decide_heal(process_context& cx, uint32_t g, run_failure& f, const std::vector<int>& dead,
                                     const heal_plan& now, const held_steps& held,
                                     const std::function<bool(bool from_dead)>& copies_arriving,
                                     const supervision_log& log) {
  if (!dead.empty()) {
    std::string ranks;
    for (int q : dead) ranks += (ranks.empty() ? "" : ", ") + shown_rank(cx, q);
    f.text += " (the process of rank " + ranks + " is gone)";
  }
  if (!cx.boundary) return std::nullopt;
  heal_plan hp;
  hp.generation = g + 1;
  hp.resume_after = log.steps.empty() ? now.resume_after : log.steps.back().step;
  hp.replaced = dead;
  hp.fired_through = std::max(now.fired_through, f.step);
  hp.parts = cx.plan.parts;  // a process started again runs the partition of now
  // dp > 1: every boundary is the live state (runtime/dist/placement/boundary_memory.hpp),
  // and a step whose applies went out is applied by every live stage: the
  // heal rolls forward to it, once every live slot holds it.
  const bool live = live_boundaries(cx.plan.dp);
  if (live) hp.resume_after = std::max(hp.resume_after, cx.decided.load());
  // Boundaries are kept after every copy_every-th step only (at dp = 1):
  // the newest of those is the best there is. A lost stage heals from a
  // replica's memory or, at dp = 1, from its keeper's; every stage rolls
  // back to the newest boundary that all of them hold (the keeper's copy of
  // the last one may still be on its way). When there is none, everything
  // goes back to the newest checkpoint.
  const copy_rule copies{live ? 1 : cx.cfg.supervision.copy_every, g > 0 ? now.resume_after : cx.rp0.ckpt.step};
  const int64_t hoped = copies.newest_lasting(hp.resume_after);
  if (dead.empty() && !live && !cx.taking_over) {
    hp.resume_after = hoped;
  } else {
    auto common = newest_common_boundary(cx.places, hp, hp.resume_after, held, copies);
    // A keeper's copy of that step may be moments from arriving: ask again
    // while some process is still receiving a copy (at most a quarter of a
    // second), then roll back to the copy before it (a copy that its dying
    // sender had not sent in full never arrives). Once some boundary is
    // common, a dead sender's copy is waited for 30 ms only: what it sent
    // in full is in by then (a stopped sender's rest would hold the wait
    // to its end). None on the way twice in a row, 10 ms apart: none is
    // coming.
    // Live (dp > 1): a stage is moments from applying the decided step
    // (or in the middle of it, holding nothing): ask again for up to 2 s;
    // an older common step could still be overwritten, so short of the
    // decided one, everything goes back to disk.
    int idle = 0;
    const auto asked = clock_type::now();
    for (const auto until = asked + milliseconds(live ? 2000 : 250);
         (!common || *common < hoped) && (live || idle < 2) && clock_type::now() < until;) {
      if (!live) idle = copies_arriving(!common || clock_type::now() < asked + milliseconds(30)) ? 0 : idle + 1;
      std::this_thread::sleep_for(milliseconds(10));
      common = newest_common_boundary(cx.places, hp, hp.resume_after, held, copies);
    }
    if (live && common && *common < hoped) common.reset();
    if (common)
      hp.resume_after = *common;
    else
      hp.from_disk = true;
  }
  // A called-off re-partition rewrote some process's memory: disk.
  if (cx.spoiled) hp.from_disk = true;
  if (hp.from_disk) {
    const auto& cc = cx.cfg.checkpoint;
    int64_t newest = -1;
    if (cc.every > 0) try {
        newest = load_latest_checkpoint(cc.dir).step;
      } catch (const std::exception&) {
      }
    // No checkpoint written yet: the run's own start (the config's seed,
    // or --resume's file) is the newest copy.
    hp.resume_after = std::max(newest, cx.rp0.ckpt.step);
  }
  if (f.code == run_errc::regroup) return hp;  // planned, not a restart: not counted
  auto decision = cx.ledger.decide(f, cx.cfg, hp.resume_after);
  if (!decision.retry) {
    f = decision.failure;
    // Every death counts: the earlier ones were healed.
    if (f.code == run_errc::restart_limit)
      for (const auto& n : log.notices) f.text += "; before it, " + n;
    return std::nullopt;
  }
  return hp;
}

std::string slot_from(const rank_placement& places, int slot, const std::string& source) {
  const int S = places.pp();
  return "; stage " + std::to_string(slot % S) + (places.dp() > 1 ? " of replica " + std::to_string(slot / S) : "") +
         " from " + source;
}

namespace {

// A request to process q's directory (rank 0's own for q = 0), answered
// within the connect timeout or 5 s, whichever is shorter.
template <class... Ts>
auto ask_directory(process_context& cx, const generation_peers& peers, int q, Ts&&... xs) {
  return cx.self->request(q == 0 ? cx.dir : peers.dirs[static_cast<size_t>(q)], std::min(cx.timeout, milliseconds(5000)),
                          std::forward<Ts>(xs)...);
}

}  // namespace

held_steps ask_held(process_context& cx, const generation_peers& peers) {
  return [&cx, &peers](int q, int slot) {
    std::vector<int64_t> steps;
    if (q != 0 && !peers.dirs[static_cast<size_t>(q)]) return steps;  // a rank a takeover did not reach
    ask_directory(cx, peers, q, held_atom::value, int32_t{slot})
        .receive([&](std::vector<int64_t>& v) { steps = std::move(v); }, [](caf::error&) {});
    return steps;
  };
}

namespace {

// Where a lost slot's state comes from, and the re-placement's line:
// generation, why, the old and the new placement, the state's sources.
std::string replacement_line(const process_context& cx, const heal_plan& next, const shrunk& fewer,
                             const std::vector<int>& dead) {
  std::string kept, from;
  for (int q : fewer.kept) kept += (kept.empty() ? "" : " ") + shown_rank(cx, q);
  for (const auto& [slot, q] : fewer.from)
    from += slot_from(cx.places, slot, q >= 0 ? "rank " + shown_rank(cx, q) + "'s memory" : "disk");
  return going_on_without(cx, next, dead, fewer.places) + ": stages by process " + describe_placement(cx.places) +
         " -> " + describe_placement(fewer.places) + " (ranks " + kept + "), after step " +
         std::to_string(next.resume_after) + from;
}

// A lower bound of the memory slot `slot` takes once a process runs it:
// its weights, their gradients and the optimizer's state.
int64_t state_bytes(const process_context& cx, const config& cfg, int slot) {
  int64_t n = 0;
  for (int c = 0; c < cx.plan.chunks; ++c) {
    const auto& range = cx.plan.layers_of(slot % cx.plan.stages, c);
    n += layers_state_bytes(cfg, range.first, range.second);
  }
  return n;
}

}  // namespace

std::string going_on_without(const process_context& cx, const heal_plan& next, const std::vector<int>& dead,
                             const rank_placement& after) {
  std::string gone;
  for (int q : dead) gone += (gone.empty() ? "" : ", ") + shown_rank(cx, q);
  const double wait = cx.cfg.supervision.replace_timeout_s;
  const int workers = after.world() - (cx.opts.ranks.apart ? 1 : 0);  // a coordinator apart holds no stage
  return "re-placed: generation " + std::to_string(next.generation) + " goes on over " + std::to_string(workers) +
         (workers == 1 ? " process" : " processes") + " without rank " + gone + " (" +
         (wait == 0 ? std::string("supervision.replace_timeout_s 0: no replacement")
                    : std::string("nothing can start a replacement")) +
         ")";
}

int64_t layers_state_bytes(const config& cfg, int first, int last) {
  const auto counts = layer_parameter_counts(cfg.model.layers);
  int64_t n = 0;
  for (int l = first; l <= last; ++l) n += counts.at(static_cast<size_t>(l));
  const auto& o = cfg.train.optimizer;
  const int64_t copies = 2 + (adam_family(o.type) ? 2 : o.momentum > 0 ? 1 : 0);
  return n * copies * static_cast<int64_t>(c10::elementSize(parameter_dtype(cfg.model)));
}

std::string short_of_room(process_context& cx, const generation_peers& peers, const room_needs& need, int left) {
  const auto mib = [](int64_t b) { return fmt("%.1f", static_cast<double>(b) / (1 << 20)) + " MiB"; };
  for (const auto& [q, want] : need) {
    if (want.first <= 0) continue;
    int64_t room = -1;
    ask_directory(cx, peers, q, room_atom::value)
        .receive([&](int64_t b) { room = b; }, [](caf::error&) {});
    if (room >= 0 && want.first > room)
      return "going on over " + std::to_string(left) + " processes needs at least " + mib(want.first) +
             " more in rank " + shown_rank(cx, q) + "'s process (" + want.second +
             ": weights, gradients and optimizer state), which can take " + mib(room) +
             " (MemAvailable, or its memory cgroup's limit less its usage): no placement fits, the run stops";
  }
  return "";
}

namespace {

// What every survivor that takes lost stages in `fewer` needs in memory
// for them, by old rank.
room_needs doubled_up_needs(const process_context& cx, const shrunk& fewer, const config& cfg) {
  room_needs need;
  for (const auto& [slot, from] : fewer.from) {
    const int S = cx.plan.stages;
    const int old = fewer.kept.at(static_cast<size_t>(fewer.places.owner(slot / S, slot % S)));
    auto& [bytes, stages] = need[old];
    bytes += state_bytes(cx, cfg, slot);
    stages += (stages.empty() ? "stage " : ", ") + std::to_string(slot % S) +
              (cx.plan.dp > 1 ? " of replica " + std::to_string(slot / S) : "");
  }
  return need;
}

}  // namespace

std::vector<int> gone_ranks(process_context& cx, const std::vector<caf::actor>& dirs,
                            const std::vector<std::string>& endpoints) {
  const rank_env& env = cx.env;
  caf::scoped_actor& self = cx.self;
  std::vector<int> dead;
  const auto host_of = [&](int q) {
    return static_cast<size_t>(q) < endpoints.size() ? split_endpoint(endpoints[static_cast<size_t>(q)]).first
                                                     : std::string();
  };
  // Whether a live process other than rank 0 shares a host with the dead
  // one, and that host is not rank 0's (which lives): it may be lost too.
  const auto host_may_go = [&](int q) {
    const std::string h = host_of(q);
    if (h.empty() || h == host_of(0)) return false;
    for (int r = 1; r < env.world_size; ++r)
      if (host_of(r) == h && std::find(dead.begin(), dead.end(), r) == dead.end()) return true;
    return false;
  };
  // Up to 300 ms; 20 ms more once one is among them where the others of
  // its host may go down with it (none on rank 0's host: a process of
  // this machine died alone). A failure first seen by a survivor (a
  // transfer or an allreduce with the dead) names the survivor's stage,
  // so any process gone ends the wait, not only the failed stage's.
  auto until = clock_type::now() + milliseconds(300);
  for (bool more = true; more;)
    self->receive(
        [&](caf::down_msg& dm) {
          for (int q = 1; q < env.world_size; ++q)
            if (dm.source == dirs[static_cast<size_t>(q)].address()) {
              dead.push_back(q);
              until = std::min(until, clock_type::now() + milliseconds(host_may_go(q) ? 20 : 0));
            }
        },
        caf::after(std::max(milliseconds(1), std::chrono::duration_cast<milliseconds>(until - clock_type::now()))) >>
            [&] { more = false; });
  std::sort(dead.begin(), dead.end());
  return dead;
}

namespace {

bool among(const std::vector<int>& ranks, int q) { return std::find(ranks.begin(), ranks.end(), q) != ranks.end(); }

// Whether a surviving process is still receiving a boundary copy; from a
// dead process only when `from_dead` (what it sent in full before it died
// still arrives; a stopped one's rest never does, nor fails, until the
// launcher kills it).
std::function<bool(bool)> copies_arriving_for(process_context& cx, const generation_peers& peers,
                                              const std::vector<int>& dead) {
  return [&cx, &peers, &dead](bool from_dead) {
    for (int q = 0; q < cx.env.world_size; ++q) {
      if (among(dead, q)) continue;
      std::vector<int32_t> from;
      ask_directory(cx, peers, q, arriving_atom::value)
          .receive([&](std::vector<int32_t>& v) { from = std::move(v); }, [](caf::error&) {});
      for (int32_t p : from)
        if (from_dead || !among(dead, p)) return true;
    }
    return false;
  };
}

// How the stages go on without the processes that are gone: cut again
// over the survivors (supervision.shrink: recut), or a survivor doubling
// up; neither where the launcher starts them again.
struct going_on {
  std::optional<recut> cut;
  std::optional<shrunk> fewer;
  std::string uncut;  // why a re-cut asked for was not made
  bool without() const { return cut || fewer; }
};

// Started again by the launcher, or the stages go on without them. A
// process that joined has no launcher of this run to start it again:
// losing one, the stages go on without every process that is gone. False:
// neither can be (`failure` says why).
bool place_without(process_context& cx, const generation_peers& peers, const heal_plan& next, const config& cfg,
                   const std::vector<int>& dead, going_on& on, run_failure& failure) {
  const bool joiner_gone =
      std::any_of(dead.begin(), dead.end(), [&](int q) { return home_rank(cx, q) >= cx.world0; });
  if (dead.empty() || !(goes_on_without(cx) || joiner_gone)) {
    for (int q : dead)
      if (!tell_launcher("respawn " + std::to_string(q) + " " + std::to_string(next.generation))) {
        failure.text += "; rank " + shown_rank(cx, q) + "'s process is gone and nothing can start it again (run "
                        "under `actorpipe launch` to heal it, or set supervision.replace_timeout_s to go on without it)";
        return false;
      }
    return true;
  }
  if (cx.places.owned(0).empty() && dead.size() + 1 >= static_cast<size_t>(cx.places.world())) {
    failure.text += "; no worker is left to go on with (the coordinator apart holds no stage)";
    return false;
  }
  on.cut = recut_if_asked(cx, peers, next, dead, cfg, on.uncut);
  if (on.cut) return true;
  on.fewer = shrink_placement(cx.places, dead, next.from_disk);
  const int left = on.fewer->places.world() - (cx.opts.ranks.apart ? 1 : 0);
  if (const std::string why = short_of_room(cx, peers, doubled_up_needs(cx, *on.fewer, cfg), left); !why.empty()) {
    failure.text += "; " + why;
    return false;
  }
  return true;
}

// Going on without `dead`: the re-placement into `next` and cx.places, the
// launcher told; its line.
std::string re_place(process_context& cx, heal_plan& next, const going_on& on, const std::vector<int>& dead) {
  const std::string line = on.cut ? recut_line(cx, next, *on.cut, dead)
                                  : replacement_line(cx, next, *on.fewer, dead) +
                                        (on.uncut.empty() ? "" : "; not cut again: " + on.uncut);
  for (int q : dead)
    if (home_rank(cx, q) < cx.world0) tell_launcher("dropped " + std::to_string(home_rank(cx, q)));
  next.replaced.clear();
  for (int q : on.cut ? on.cut->kept : on.fewer->kept) next.members.push_back(home_rank(cx, q));
  if (on.cut) {
    take_recut(next, *on.cut);
    cx.places = on.cut->places;
  } else {
    next.sources = on.fewer->sources;
    cx.places = on.fewer->places;
  }
  return line;
}

// "; started rank R again, its stage S of replica D from rank H's memory":
// the processes the launcher starts again, and where their stages start.
std::string started_again(const process_context& cx, const heal_plan& next, const std::vector<int>& dead) {
  std::string how;
  for (int q : dead) {
    how += "; started rank " + shown_rank(cx, q) + " again";
    if (!next.from_disk)
      for (const auto& slot : cx.places.owned(q))
        how += ", its stage " + std::to_string(slot.stage) + " of replica " + std::to_string(slot.replica) +
               " from rank " + shown_rank(cx, donor_of(cx.places, next, slot.replica, slot.stage).rank) + "'s memory";
  }
  return how;
}

}  // namespace

std::optional<heal_plan> heal(process_context& cx, const kv_store_ptr& store, const generation_peers& peers,
                              const heal_plan& hp, const config& cfg, const std::vector<int>& dead,
                              run_failure& failure, supervision_log& log) {
  if (!restartable(failure.code)) return std::nullopt;
  auto next = decide_heal(cx, hp.generation, failure, dead, hp, ask_held(cx, peers),
                          copies_arriving_for(cx, peers, dead), log);
  if (!next) return std::nullopt;
  going_on on;
  if (!place_without(cx, peers, *next, cfg, dead, on, failure)) return std::nullopt;
  const run_failure& failed = failure;  // naming the processes that went
  while (!log.steps.empty() && log.steps.back().step > next->resume_after) log.steps.pop_back();
  drop_evals_after(log.evals, next->resume_after);
  const double lost = std::chrono::duration<double>(clock_type::now() - log.boundary_at).count();
  log.recovery_s += lost;
  log.restarts = cx.ledger.count();
  std::string how = !next->from_disk                        ? std::string("from memory")
                    : next->resume_after == cx.rp0.ckpt.step ? std::string("every stage from the run's start")
                                                             : "every stage from the newest checkpoint, in " +
                                                                   cfg.checkpoint.dir;
  const std::string replaced_line = on.without() ? re_place(cx, *next, on, dead) : std::string();
  how += on.without() ? "; " + replaced_line : started_again(cx, *next, dead);
  log.notices.push_back(restart_notice(cx.ledger.count(), failed, next->resume_after, lost) + "; healed " + how);
  store->set(heal_key(cx.env, next->generation), next->encode());
  cx.asked_at = clock_type::now();
  if (cx.opts.on_notice) {
    cx.opts.on_notice("heal: " + failed.text + "; rolling back to after step " + std::to_string(next->resume_after) +
                      (dead.empty() || on.without() ? std::string()
                                                    : ", " + std::to_string(dead.size()) + " process(es) started again"));
    if (on.without()) cx.opts.on_notice(replaced_line);
  }
  for (int q = 1; q < cx.env.world_size; ++q)
    if (!among(dead, q)) cx.self->send(peers.dirs[static_cast<size_t>(q)], heal_atom::value, next->generation);
  return next;
}

std::string healed_line(const process_context& cx, const generation_links& l, const heal_plan& hp) {
  const auto now = clock_type::now();
  return "heal: generation " + std::to_string(hp.generation) + " runs from after step " +
         std::to_string(hp.resume_after) + ": " + fmt("%.0f", ms_between(cx.failed_at, cx.asked_at)) +
         " ms to decide, " + fmt("%.0f", ms_between(cx.asked_at, l.met_at)) + " ms to the rendezvous" +
         (hp.replaced.empty() ? ", " : " (the new process's start), ") +
         fmt("%.0f", ms_between(l.met_at, l.grouped_at)) + " ms for the channel and groups, " +
         fmt("%.0f", ms_between(l.grouped_at, now)) + " ms for the state and the stages";
}

}  // namespace actorpipe::rank_detail
