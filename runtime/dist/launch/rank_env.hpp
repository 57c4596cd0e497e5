#pragma once
// Where this process sits in a multi-process run: its rank, the world size
// and the rendezvous address, read from the variables a launcher sets.
//
// Launchers, first match wins:
//   torchrun/env  WORLD_SIZE is set (torchrun, `actorpipe launch`, or by hand):
//                 RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//                 MASTER_ADDR, MASTER_PORT.
//   openmpi       OMPI_COMM_WORLD_SIZE is set (mpirun): OMPI_COMM_WORLD_RANK,
//                 OMPI_COMM_WORLD_LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_SIZE,
//                 MASTER_ADDR, MASTER_PORT. Before Slurm, because mpirun run
//                 inside an sbatch script inherits the batch step's SLURM_*
//                 variables, which describe that one step and not the ranks.
//   slurm         SLURM_NTASKS is set (srun): SLURM_PROCID, SLURM_LOCALID,
//                 SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE (+
//                 SLURM_NODEID), MASTER_ADDR or else the first host of
//                 SLURM_JOB_NODELIST (SLURM_NODELIST), MASTER_PORT. With
//                 SLURM_NTASKS > 1 the process must be a task of an srun
//                 step: SLURM_STEP_ID (or SLURM_STEPID) a step number. An
//                 sbatch or salloc script itself has none (Slurm 22.05),
//                 yet SLURM_NTASKS, SLURM_PROCID 0 and SLURM_LOCALID 0, and
//                 would take itself for rank 0 and wait for peers that
//                 never come: it is refused, naming srun.
//   none          none of these, or a world size of 1: one process, rank 0.
//
// ACTORPIPE_COORDINATOR (set by `actorpipe launch --coordinator process`):
// "self" in the coordinator, "apart" in each worker; see rank_env::apart.
//
// MASTER_PORT defaults to 29500 (torchrun's default) under every launcher.
// LOCAL_RANK and LOCAL_WORLD_SIZE (OpenMPI's likewise) both unset read as
// 0 of 1; one without the other is an error. Under any launcher,
// TORCHELASTIC_RESTART_COUNT (default 0) and TORCHELASTIC_USE_AGENT_STORE
// (True/true/1, or False/false/0/empty; anything else is an error) are read.
// A variable set to the empty string counts as set (and is then malformed).
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/config/config.hpp"

namespace actorpipe {


/// Which launcher's variables described the run.
enum class rank_launcher { none, torchrun, slurm, openmpi };

/// "none", "torchrun/env", "slurm" or "openmpi".
const char* launcher_name(rank_launcher launcher);

/// The variable that gives the local rank under `launcher`: "LOCAL_RANK"
/// (torchrun, and none), "OMPI_COMM_WORLD_LOCAL_RANK" or "SLURM_LOCALID".
const char* local_rank_variable(rank_launcher launcher);

/// The variable that gives the world size under `launcher`: "WORLD_SIZE"
/// (torchrun, and none), "OMPI_COMM_WORLD_SIZE" or "SLURM_NTASKS".
const char* world_size_variable(rank_launcher launcher);

/// The port MASTER_PORT defaults to (torchrun's default).
constexpr int default_master_port = 29500;

/// This process's place in the run.
struct rank_env {
  rank_launcher launcher = rank_launcher::none;  ///< none iff world_size == 1
  int rank = 0;                                  ///< 0 .. world_size-1
  int world_size = 1;
  int local_rank = 0;        ///< rank among the processes on this node
  int local_world_size = 1;  ///< processes on this node
  std::string master_addr;   ///< rendezvous host; empty when world_size == 1
  int master_port = 0;       ///< rendezvous port; 0 when world_size == 1
  int restart_count = 0;     ///< TORCHELASTIC_RESTART_COUNT (default 0)
  /// TORCHELASTIC_USE_AGENT_STORE: torchrun's agent already hosts the store
  /// at MASTER_ADDR:MASTER_PORT, so every rank (rank 0 too) joins it as a
  /// client; otherwise rank 0 hosts it.
  bool use_agent_store = false;
  /// Key prefix inside the store, as torchrun's workers use it:
  /// "/worker/attempt_<restart_count>", so a restarted attempt never reads
  /// the keys of the one before.
  std::string store_prefix = "/worker/attempt_0";
  /// `actorpipe launch --coordinator process`: the supervisor and the store
  /// run in a process of their own that holds no stage (ACTORPIPE_COORDINATOR
  /// "self" there, "apart" in the workers). Inside the run that process is
  /// rank 0 and a worker's rank is its RANK + 1; world_size counts it too.
  /// shown() turns an inside rank back into the RANK a user knows.
  bool apart = false;

  /// The RANK a user knows for inside rank `r` (the coordinator: -1).
  int shown(int r) const { return apart ? r - 1 : r; }
  /// shown(r) as text: "c" for the coordinator apart.
  std::string shown_text(int r) const { return apart && r == 0 ? std::string("c") : std::to_string(shown(r)); }
  /// The worker processes (the world less a coordinator apart).
  int workers() const { return world_size - (apart ? 1 : 0); }

  /// More than one process: a store and remote links are needed.
  bool multi_process() const { return world_size > 1; }
  /// Whether this rank hosts the rendezvous store (rank 0 without an agent).
  bool hosts_store() const { return multi_process() && rank == 0 && !use_agent_store; }
};

/// What load_config checks the config against: `cuda_devices`, and in a
/// multi-process run this process's rank and local rank, so that `auto`
/// puts its stages on cuda:LOCAL_RANK. One process: the local rank stays
/// unset and `auto` keeps its round-robin.
load_env load_env_for(const rank_env& ranks, int cuda_devices);

/// One environment variable's value, or nullopt when it is not set.
using env_lookup = std::function<std::optional<std::string>(const std::string&)>;

/// The rank environment `env` describes (see the top of this file). Throws
/// rank_env_error on a malformed number, a rank or local rank out of range,
/// a missing RANK / MASTER_ADDR (or Slurm equivalent) when the world has
/// more than one process, a port outside 1..65535, a malformed
/// SLURM_JOB_NODELIST, or Slurm's SLURM_NTASKS > 1 outside an srun step.
rank_env read_rank_env(const env_lookup& env);

/// Throws rank_env_error unless the world size of a multi-process run
/// divides dp x pp, naming the variable it came from:
///   "SLURM_NTASKS 4 does not divide parallel.dp 1 x pipeline stages 3".
/// Every rank throws it; it is quiet() on every rank but rank 0 and the
/// first process (LOCAL_RANK 0) of each node without rank 0, so that each
/// node's launcher shows the line once. Also checks dp and pp as check_rank_placement
/// does (runtime/dist/placement/rank_placement.hpp). One process: nothing to check.
void check_world_divides(const rank_env& env, int dp, int pp);

/// read_rank_env over a fixed set of variables (tests, `actorpipe launch`).
rank_env read_rank_env(const std::map<std::string, std::string>& env);

/// read_rank_env over this process's environment (getenv).
rank_env read_rank_env();

/// The first host of a Slurm compressed host list: "node[01-04,07]" ->
/// "node01", "gpu[1-2],cpu5" -> "gpu1", "a-b[009-011]" -> "a-b009" (zero
/// padding kept), "r[1-2]-n[3-4]" -> "r1-n3". The whole list is checked.
/// Throws rank_env_error naming `variable` when it is malformed.
std::string first_slurm_host(const std::string& nodelist, const std::string& variable = "SLURM_JOB_NODELIST");

/// Slurm's per-node task counts, expanded: "4(x2),3" -> {4, 4, 3}. Throws
/// rank_env_error naming `variable` when malformed or when it would expand
/// past 1,000,000 nodes.
std::vector<int> slurm_tasks_per_node(const std::string& value, const std::string& variable = "SLURM_TASKS_PER_NODE");

}  // namespace actorpipe
