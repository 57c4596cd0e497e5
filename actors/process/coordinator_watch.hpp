#pragma once
// A rank other than 0 that loses its coordinator (rank 0's process: the
// supervisor and the store). Without a standby it stops (exit 5, the
// checkpoints on disk whole); under `launch --coordinator etcd://` it
// waits for the standby that takes the run over (actors/process/worker_agent.cpp).
// What both need: the loss's error, the watch on rank 0's store while the
// agent blocks, and the loss told from any other error.
#include <atomic>
#include <memory>
#include <string>

#include "actors/process/process_context.hpp"
#include "messages/errors.hpp"

namespace actorpipe::rank_detail {

/// The coordinator's loss at `at` (run_errc::coordinator_lost, exit 5),
/// naming `where` and how to go on from the checkpoints in `dir`.
run_error coordinator_lost(const std::string& where, const std::string& dir, const std::string& at,
                           const std::string& why, bool apart);
run_error coordinator_lost(const process_context& cx, const std::string& at, const std::string& why);

/// While the agent blocks in join_generation (a heal, a re-placement, the
/// first set-up) or reads the next plan, no message reaches it: a rank 0
/// that dies or stops then would leave this rank waiting on it in the
/// rendezvous, the channel or the store until a timeout (or, in a store
/// read that had begun, for good). A thread watches rank 0's store
/// meanwhile (the store is in rank 0's process): once it has answered, two
/// probes in a row that it refuses, or a store that still accepts a
/// connection but answers nothing for supervision.heartbeat_timeout_s (a
/// stopped process's kernel still accepts), are the coordinator's loss.
/// Then, without a standby, this process ends with it (exit 5; nothing of
/// the run is left to save here, the checkpoints on disk are whole). With
/// one (`standby`), it cuts this process's connections to the store, so
/// that every wait on it ends with an error at once, and the agent waits
/// for the coordinator that takes over.
/// (Not around the last store write of a run that ends well: its probe's
/// connection would see rank 0 end.)
class coordinator_watch {
public:
  coordinator_watch(const process_context& cx, bool standby);
  ~coordinator_watch() { done_->store(true); }
  /// With a standby: whether it took the coordinator for lost (and cut the
  /// connections). A stopped coordinator's kernel still accepts a connect:
  /// a probe afterwards would not tell.
  bool judged_lost() const { return lost_->load(); }
  coordinator_watch(const coordinator_watch&) = delete;
  coordinator_watch& operator=(const coordinator_watch&) = delete;

private:
  std::shared_ptr<std::atomic<bool>> done_ = std::make_shared<std::atomic<bool>>(false);
  std::shared_ptr<std::atomic<bool>> lost_ = std::make_shared<std::atomic<bool>>(false);
};

/// `e` as the coordinator's loss (run_errc::coordinator_lost, exit 5) when
/// it is not a verdict of the run's own (run_error, peer_stopped, a config
/// error) and rank 0's store, which is in rank 0's process, no longer
/// answers at env's master address; else `e`. Only for a rank other than
/// 0 that has reached the store (rt.store) or was started for a later
/// generation (a replacement, asked for while the store listened):
/// before, a refused store is a master not there yet.
std::exception_ptr as_coordinator_loss(const process_runtime& rt, const rank_env& env, const std::string& where,
                                       const std::string& checkpoint_dir, std::exception_ptr e);

/// From now on, an exception that ends this process on a thread of its
/// own (LibTorch's store client throws std::system_error on a thread of its
/// own when the store's process dies: std::terminate) is taken for the
/// coordinator's loss when rank 0's store no longer answers: the line and
/// exit 5 instead of an abort. Any other goes on to the default handler.
void exit_5_on_a_lost_store(const rank_env& env, const std::string& where, const std::string& checkpoint_dir);

}  // namespace actorpipe::rank_detail
