#pragma once
// A coordinator that takes a run over (takeover.cpp).
#include <chrono>
#include <optional>
#include <string>

#include "actors/process/links.hpp"

namespace actorpipe::rank_detail {

/// What a generation leaves in the run's record in etcd for a standby to
/// take over from (launch --coordinator etcd://): its plan, placement,
/// members, joiners, every rank's directory endpoint, this coordinator's
/// takeover number and the trace's time zero. JSON text.
std::string takeover_state(const process_context& cx, const heal_plan& hp, const std::vector<std::string>& endpoints,
                           uint32_t epoch, clock_type::time_point origin);



/// Rank 0 taking the run over: connects to every rank of the record's
/// generation, tells each the new store (fenced by the epoch), asks what
/// each holds and heals from the newest boundary every slot holds, as
/// after a failure (the ranks that do not answer are gone). The next plan,
/// written to the store, every rank told; nullopt: `failure` says why not.
/// `asked` is when the ranks had answered.
std::optional<heal_plan> take_over(process_context& cx, const kv_store_ptr& store, const takeover_start& t,
                                   run_failure& failure, supervision_log& log,
                                   std::chrono::system_clock::time_point& asked);

}  // namespace actorpipe::rank_detail
