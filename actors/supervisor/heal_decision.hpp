#pragma once
// Rank 0 after a generation ended: who is gone, heal or give up
// (heal_decision.cpp); the next plan after a join, a rebalance or a
// generation called off, and the run's stop (replan.cpp).
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "actors/process/join_generation.hpp"
#include "actors/supervisor/forming_watch.hpp"

namespace actorpipe::rank_detail {

/// Rank 0, once generation hp.generation failed: the ranks whose process
/// is gone, sorted, seen on their directories (which cx.self monitors; a
/// connection lost closes every proxy of it at once, so up to 300 ms, and
/// 20 ms more once one is among them whose host, by its endpoint, holds
/// other live ranks and not rank 0).
std::vector<int> gone_ranks(process_context& cx, const std::vector<caf::actor>& dirs,
                            const std::vector<std::string>& endpoints);

/// Rank 0: heals after `failure` (restartable, within supervision's
/// limits, from memory or disk, the dead started again by the launcher):
/// the next plan, written to the store, its notice in `log`, every
/// survivor told. nullopt: give up (`failure` then names the processes
/// gone).
std::optional<heal_plan> heal(process_context& cx, const kv_store_ptr& store, const generation_peers& peers,
                              const heal_plan& hp, const config& cfg, const std::vector<int>& dead,
                              run_failure& failure, supervision_log& log);

/// Rank 0, once generation hp.generation ended at a step boundary for the
/// processes that asked to join (run_errc::regroup): the next plan, with
/// them taken in (grow_placement), written to the store, each joiner and
/// every rank told. nullopt: `failure` says why not.
std::optional<heal_plan> regroup(process_context& cx, const kv_store_ptr& store, const generation_peers& peers,
                                 const heal_plan& hp, run_failure& failure, supervision_log& log);

/// Rank 0, once generation hp.generation ended at a step boundary for a
/// rebalance (pipeline.rebalance, `why`): the next plan, with the layers
/// re-partitioned as `parts` over the same processes, written to the
/// store, every rank told. nullopt: `failure` says why not.
std::optional<heal_plan> repartition(process_context& cx, const kv_store_ptr& store, const generation_peers& peers,
                                     const heal_plan& hp, const std::vector<std::pair<int, int>>& parts,
                                     const std::string& why, run_failure& failure, supervision_log& log);

/// Rank 0, once the watch called generation `aborted` off for `loss`
/// (cx put back as it was before it, `dead` the processes of the
/// generation before that are gone, the lost among them): the next plan
/// over what is left of the generation before, written to the store,
/// every rank of it told. Without a loss of those processes (only a
/// process that joined), they go on as they were; otherwise a heal over
/// the survivors. nullopt: `failure` says why not.
std::optional<heal_plan> call_off(process_context& cx, const kv_store_ptr& store, const generation_peers& peers,
                                  const heal_plan& was, const heal_plan& aborted, const config& cfg,
                                  const std::vector<int>& dead, const forming_loss& loss, run_failure& failure,
                                  supervision_log& log);

/// Rank 0: the run is over, every other rank told `code` and waited for
/// (those not in `dead`; 5 s at most).
void stop_ranks(process_context& cx, const kv_store_ptr& store, const generation_links& links,
                const generation_peers& peers, const std::vector<int>& dead, int code);

/// The heal's timings, once the healed generation is ready to run: "heal:
/// generation G runs from after step S: ... ms to decide, ...".
std::string healed_line(const process_context& cx, const generation_links& links, const heal_plan& hp);

// -- shared by heal_decision.cpp and replan.cpp --------------------------

/// Rank 0, after generation g failed with `f`: decide whether and how to
/// heal (the next plan), or give up (nullopt; `f` says why).
std::optional<heal_plan> decide_heal(process_context& cx, uint32_t g, run_failure& f, const std::vector<int>& dead,
                                     const heal_plan& now, const held_steps& held,
                                     const std::function<bool(bool from_dead)>& copies_arriving,
                                     const supervision_log& log);

/// "; stage S[ of replica R] from rank H's memory": where a moved slot's
/// state came from.
std::string slot_from(const rank_placement& places, int slot, const std::string& source);

/// After which steps each live process holds a slot, asked through its
/// directory (rank 0's own too; nothing from a rank that does not answer).
held_steps ask_held(process_context& cx, const generation_peers& peers);

}  // namespace actorpipe::rank_detail
