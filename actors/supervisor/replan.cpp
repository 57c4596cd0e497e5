// Rank 0 after a generation ended at a step boundary or was called off:
// the next plan when processes join (regroup), when the layers move
// (repartition), when the generation that formed was called off
// (call_off); and the run's stop on every process (stop_ranks).
#include <algorithm>
#include <functional>

#include "actors/supervisor/heal_decision.hpp"
#include "actors/attempt/restart_ledger.hpp"
#include "messages/atoms.hpp"
#include "runtime/dist/launch/join.hpp"
#include "runtime/model/partition.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe::rank_detail {

namespace {

// A planned re-placement's end (a grow, a re-partition): the steps past its
// boundary forgotten, its line in the log and said, the plan in the store,
// `tell` (those outside the generation), every rank told.
void announce(process_context& cx, const kv_store_ptr& store, const generation_peers& peers, const heal_plan& next,
              const std::string& line, supervision_log& log, const std::function<void()>& tell) {
  while (!log.steps.empty() && log.steps.back().step > next.resume_after) log.steps.pop_back();
  drop_evals_after(log.evals, next.resume_after);
  log.notices.push_back(line);
  store->set(heal_key(cx.env, next.generation), next.encode());
  tell();
  cx.asked_at = clock_type::now();
  if (cx.opts.on_notice) cx.opts.on_notice(line);
  for (int q = 1; q < cx.env.world_size; ++q)  // this generation's processes
    cx.self->send(peers.dirs[static_cast<size_t>(q)], heal_atom::value, next.generation);
}

}  // namespace

std::optional<heal_plan> regroup(process_context& cx, const kv_store_ptr& store, const generation_peers& peers,
                                 const heal_plan& hp, run_failure& failure, supervision_log& log) {
  const rank_env& env = cx.env;
  auto next = decide_heal(cx, hp.generation, failure, {}, hp, ask_held(cx, peers), [](bool) { return false; }, log);
  if (!next) return std::nullopt;
  const std::vector<int> tickets = live_joiner_tickets(*store, cx, cx.joiners_lost);
  const grown more = grow_placement(cx.places, next->from_disk ? 0 : static_cast<int>(tickets.size()));
  const int W = cx.places.world();
  std::vector<int> homes, ranks;  // every process's RANK; the joiners'
  for (int q = 0; q < W; ++q) homes.push_back(home_rank(cx, q));
  std::string joined, from;
  for (int j = 0; j < more.taken; ++j) {
    ranks.push_back(joiner_rank(cx.world0, tickets.at(static_cast<size_t>(j))));
    next->replaced.push_back(W + j);
    homes.push_back(ranks.back());
    joined += (joined.empty() ? "" : ", ") + cx.opts.ranks.shown_text(ranks.back());
  }
  for (const auto& [slot, q] : more.from)
    from += slot_from(cx.places, slot,
                      "rank " + cx.opts.ranks.shown_text(homes.at(static_cast<size_t>(q))) + "'s memory");
  next->members = homes;
  next->donors = more.donors;
  std::string kept;
  for (int h : homes) kept += (kept.empty() ? "" : " ") + cx.opts.ranks.shown_text(h);
  const std::string line = "re-placed: generation " + std::to_string(next->generation) + " takes in rank " + joined +
                           " (joined): stages by process " + describe_placement(cx.places) + " -> " +
                           describe_placement(more.places) + " (ranks " + kept + "), after step " +
                           std::to_string(next->resume_after) + from;
  cx.places = more.places;
  announce(cx, store, peers, *next, line, log, [&] {
    for (int rank : ranks) place_joiner(*store, env.store_prefix, rank, next->generation);
  });
  if (more.taken > 0) cx.joined = tickets.at(static_cast<size_t>(more.taken - 1));
  return next;
}

std::optional<heal_plan> repartition(process_context& cx, const kv_store_ptr& store, const generation_peers& peers,
                                     const heal_plan& hp, const partition_t& parts, const std::string& why,
                                     run_failure& failure, supervision_log& log) {
  auto next = decide_heal(cx, hp.generation, failure, {}, hp, ask_held(cx, peers), [](bool) { return false; }, log);
  if (!next) return std::nullopt;
  next->parts = parts;
  // Where each moved range of layers comes from (replica 0's; every
  // replica's alike).
  const int S = cx.plan.stages;
  std::string from;
  for (int n = 0; n < S && !next->from_disk; ++n)
    for (int o = 0; o < S; ++o) {
      const int first = std::max(parts[static_cast<size_t>(n)].first, cx.plan.parts[static_cast<size_t>(o)].first);
      const int last = std::min(parts[static_cast<size_t>(n)].second, cx.plan.parts[static_cast<size_t>(o)].second);
      const int to = cx.places.owner(0, n), by = cx.places.owner(0, o);
      if (first > last || to == by) continue;
      from += "; layers " + describe_partition({{first, last}}) + " to stage " + std::to_string(n) + " from rank " +
              shown_rank(cx, by) + "'s memory";
    }
  const std::string line = "re-placed: generation " + std::to_string(next->generation) +
                           " re-partitions the layers, " + why + ": layers by stage " +
                           describe_partition(cx.plan.parts) + " -> " + describe_partition(parts) + ", after step " +
                           std::to_string(next->resume_after) +
                           (next->from_disk ? "; every stage from the newest checkpoint (no boundary in memory)" : from);
  announce(cx, store, peers, *next, line, log, [] {});
  return next;
}

std::optional<heal_plan> call_off(process_context& cx, const kv_store_ptr& store, const generation_peers& peers,
                                  const heal_plan& was, const heal_plan& aborted, const config& cfg,
                                  const std::vector<int>& dead, const forming_loss& loss, run_failure& failure,
                                  supervision_log& log) {
  // The plan the generation before ran, numbered after the one called off.
  heal_plan base = was;
  base.generation = aborted.generation;
  base.fired_through = aborted.fired_through;
  failure = run_failure{loss.old.empty() ? run_errc::regroup : run_errc::stage_died, aborted.resume_after, -1, -1,
                        "generation " + std::to_string(aborted.generation) + " was called off: " + loss.why};
  if (!loss.old.empty()) return heal(cx, store, peers, base, cfg, dead, failure, log);
  // Only processes that joined were lost: the others go on as they were.
  auto next = decide_heal(cx, aborted.generation, failure, {}, base, ask_held(cx, peers), [](bool) { return false; }, log);
  if (!next) return std::nullopt;
  next->parts = cx.plan.parts;
  next->members.clear();
  std::string kept;
  for (int q = 0; q < cx.places.world(); ++q) {
    next->members.push_back(home_rank(cx, q));
    kept += (kept.empty() ? "" : " ") + shown_rank(cx, q);
  }
  const std::string line = "re-placed: generation " + std::to_string(next->generation) + " goes on as before, " +
                           failure.text + ": stages by process " + describe_placement(cx.places) + " (ranks " + kept +
                           "), after step " + std::to_string(next->resume_after) +
                           (next->from_disk ? "; every stage from the newest checkpoint" : "; from memory");
  announce(cx, store, peers, *next, line, log, [] {});
  return next;
}

void stop_ranks(process_context& cx, const kv_store_ptr& store, const generation_links& links,
                const generation_peers& peers, const std::vector<int>& dead, int code) {
  const rank_env& env = cx.env;
  // Confirmed through the store, so that no stop is lost in a socket when
  // this process ends; a rank that is gone never confirms (bounded).
  for (int q = 1; q < env.world_size; ++q)
    cx.self->send(peers.dirs[static_cast<size_t>(q)], stop_atom::value, int32_t{code});
  store->wait_count(links.prefix + "/actorpipe/stopped", env.world_size - 1 - static_cast<int>(dead.size()),
                    milliseconds(5000));
}

}  // namespace actorpipe::rank_detail
