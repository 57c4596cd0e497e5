#pragma once
// What one training attempt is built from, before any actor runs: where it
// resumes from, the mesh (shapes, devices, the policy, the allreduce
// groups) and each stage's setup. trainer.cpp spawns and runs it.
#include <caf/fwd.hpp>

#include <chrono>
#include <array>
#include <memory>
#include <string>
#include <vector>

#include "actors/stage/stage_actor.hpp"
#include "actors/attempt/run_options.hpp"
#include "runtime/files/checkpoint.hpp"
#include "runtime/dist/collectives/collectives.hpp"
#include "runtime/config/config.hpp"
#include "runtime/data/data.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/partition.hpp"
#include "runtime/schedule/placement.hpp"
#include "runtime/schedule/policy.hpp"

namespace actorpipe {

/// Where an attempt starts: a checkpoint in memory (a restart), the newest
/// loadable one on disk (--resume), or none (ckpt.step < 0).
struct resume_point {
  checkpoint ckpt;
  bool from_disk = false;
  std::string dir;  ///< --resume's directory

  /// What a file from disk holds is bad input (exit 2) when it does not fit
  /// this model; a copy in memory always does.
  config_error unfit(const std::string& why) const {
    return config_error((ckpt.path.empty() ? dir : ckpt.path) + ": " + why);
  }
};

/// `from` when given; else with opts.resume_dir the newest checkpoint there
/// that loads (a torn or corrupted newer one is named and skipped).
resume_point find_resume(const train_options& opts, const checkpoint* from);

/// The checkpoint's weights into freshly built layers, by global name.
/// Throws rp.unfit() for a checkpoint of another model.
void load_resumed(const resume_point& rp, std::vector<layer>& ls);

/// What every stage of an attempt shares: shapes, devices, the policy.
struct attempt_plan {
  std::shared_ptr<const dataset> data;
  int stages = 1;
  int dp = 1;
  int chunks = 1;
  int microbatches = 1;
  int threads = 1;
  partition_t parts;  ///< one range per virtual stage
  std::vector<std::vector<std::string>> replica_devices;  ///< [replica][rank]
  std::shared_ptr<const policy> pol;  ///< policy_for()
  placement plc;                      ///< pol's layout

  /// The layers (first, last) of stage `stage`'s chunk `chunk`.
  const auto& layers_of(int stage, int chunk) const { return parts[static_cast<size_t>(plc.virtual_stage(stage, chunk))]; }
};

/// The data, shapes and devices (pol and plc are left to policy_for).
attempt_plan plan_attempt(const config& cfg, const train_options& opts);

/// opts.fixed_order as a fixed policy, else the config's schedule.
std::shared_ptr<const policy> policy_for(const config& cfg, const train_options& opts);

using group_grid = std::vector<std::vector<std::shared_ptr<allreduce_group>>>;  ///< [rank][replica]

struct replica_groups {
  group_grid groups;    ///< empty rows when dp = 1
  /// A tie split over two stages: per replica, the embedding's stage's
  /// member [0] and the head's [1] (empty otherwise).
  std::vector<std::array<std::shared_ptr<allreduce_group>, 2>> ties;
  std::string backend;  ///< "gloo" | "nccl"; empty when dp = 1
};

/// The stages that hold the tied embedding and lm_head ({-1, -1}: no tie).
std::pair<int, int> tied_stages(const config& cfg, const attempt_plan& p);

/// One allreduce group per stage rank, over that rank's replicas; and the
/// tie's groups.
replica_groups make_replica_groups(const config& cfg, const train_options& opts, const attempt_plan& p);

/// What the stage actor of replica d, rank r is spawned with, less its
/// layers (give_layers), allreduce group, abandon flag and trace origin.
stage_setup stage_setup_for(const config& cfg, const train_options& opts, const attempt_plan& p, int d, int r);

/// Rank st.rank's chunks take their layers out of `layers`, onto the
/// stage's device; with a checkpoint, the optimizer state of those
/// parameters.
void give_layers(stage_setup& st, const attempt_plan& p, std::vector<layer>& layers, const resume_point& rp,
                 const config& cfg);

/// The driver of an attempt over `stages` (replica d, stage r at d S + r).
caf::actor spawn_attempt_driver(caf::actor_system& sys, const config& cfg, const train_options& opts,
                                const attempt_plan& p, const std::vector<caf::actor>& stages, int64_t resumed_step,
                                std::shared_ptr<checkpoint> last_good, std::chrono::steady_clock::time_point origin);

/// An actor's error as a run failure: ours by code and fields; another
/// category's (a stage's own error carries one readable string) as
/// `failed`, with its string or CAF's rendering.
run_failure failure_of(const caf::actor_system& sys, const caf::error& err);

}  // namespace actorpipe
