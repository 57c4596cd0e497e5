#pragma once
// Rank 0 after a generation ended: who is gone, heal or give up
// (heal_decision.cpp); the next plan after a join, a rebalance or a
// generation called off, and the run's stop (replan.cpp).
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "actors/process/join_generation.hpp"
#include "actors/supervisor/forming_watch.hpp"
#include "runtime/dist/placement/recut.hpp"

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

/// "re-placed: generation G goes on over N processes without rank R
/// (why no replacement)": the start of a shrink's line, `after` the
/// placement it goes on with.
std::string going_on_without(const process_context& cx, const heal_plan& next, const std::vector<int>& dead,
                             const rank_placement& after);

// -- a re-cut (recut_decision.cpp) ---------------------------------------

/// supervision.shrink: recut, going on without `dead` (ranks of cx.places)
/// after the heal `next` decided: the layers cut again over the processes
/// left. nullopt: none asked for, or none made (`why_not` then says why,
/// and the run doubles up instead): the stage count cannot change, or some
/// process lacks the memory for its new stage.
std::optional<recut> recut_if_asked(process_context& cx, const generation_peers& peers, const heal_plan& next,
                                    const std::vector<int>& dead, const config& cfg, std::string& why_not);

/// The re-cut's line: as a shrink's, with the old and new stage count and
/// partition, and where each new stage's layers come from.
std::string recut_line(const process_context& cx, const heal_plan& next, const recut& cut,
                       const std::vector<int>& dead);

/// The re-cut into the plan: its partition, and its pieces with their
/// holders as ranks of the next generation.
void take_recut(heal_plan& next, const recut& cut);

/// A lower bound of the memory layers [first, last] take once a process
/// runs them: their weights, gradients and the optimizer's state.
int64_t layers_state_bytes(const config& cfg, int first, int last);

/// By old rank: the bytes more a survivor needs in a re-placement, and
/// which stages they are for ("stage 2", "stage 1 of replica 1").
using room_needs = std::map<int, std::pair<int64_t, std::string>>;

/// Whether every survivor has the memory `need` asks of it (asked of each:
/// runtime/util/host_memory); "" or why not, over `left` processes.
std::string short_of_room(process_context& cx, const generation_peers& peers, const room_needs& need, int left);

/// After which steps each live process holds a slot, asked through its
/// directory (rank 0's own too; nothing from a rank that does not answer).
held_steps ask_held(process_context& cx, const generation_peers& peers);

}  // namespace actorpipe::rank_detail
