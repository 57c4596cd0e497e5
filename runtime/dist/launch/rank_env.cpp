#include "runtime/dist/launch/rank_env.hpp"

#include <cstdint>
#include <cstdlib>

#include "runtime/dist/placement/rank_placement.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe {

namespace {

constexpr int64_t max_count = 1 << 30;  // larger ranks, sizes or counts are typos

[[noreturn]] void fail(const std::string& line) { throw rank_env_error(line); }

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

/// `value` of `name` as a count in 0 .. max_count.
int parse_count(const std::string& name, const std::string& value) {
  if (!all_digits(value)) fail(name + " " + quoted_input(value) + " is not a non-negative integer");
  int64_t v = 0;
  for (char c : value) {
    v = v * 10 + (c - '0');
    if (v > max_count) fail(name + " " + quoted_input(value) + " is too large");
  }
  return static_cast<int>(v);
}

int parse_positive(const std::string& name, const std::string& value) {
  const int v = parse_count(name, value);
  if (v == 0) fail(name + " " + quoted_input(value) + " is not a positive integer");
  return v;
}

void check_below(const std::string& name, int v, const std::string& limit_name, int limit) {
  if (v >= limit)
    fail(name + " " + std::to_string(v) + " is out of range for " + limit_name + " " + std::to_string(limit));
}

std::string needed_when(const std::string& size_name, int world) {
  return " (needed when " + size_name + " is " + std::to_string(world) + ")";
}

int parse_port(const std::string& value) {
  const std::string why = "MASTER_PORT " + quoted_input(value) + " is not a port number (1..65535)";
  if (!all_digits(value) || value.size() > 5) fail(why);
  const int v = std::atoi(value.c_str());
  if (v < 1 || v > 65535) fail(why);
  return v;
}

void check_host(const std::string& name, const std::string& value) {
  if (value.empty()) fail(name + " is empty");
  for (char c : value)
    if (c <= ' ' || c > '~') fail(name + " " + quoted_input(value) + " is not a host name or address");
}

/// The names one launcher uses for rank, size, local rank and local size.
struct launcher_vars {
  rank_launcher kind;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;  // nullptr: Slurm's per-node counts
};

constexpr launcher_vars torchrun_vars{rank_launcher::torchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
constexpr launcher_vars openmpi_vars{rank_launcher::openmpi, "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                                     "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
constexpr launcher_vars slurm_vars{rank_launcher::slurm, "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr};

/// LOCAL_RANK / LOCAL_WORLD_SIZE (or OpenMPI's): both unset means every
/// process is alone on its node (0 of 1); one without the other is an error.
/// Returns the local size's variable.
std::string read_local_pair(const env_lookup& env, const launcher_vars& vars, rank_env& out) {
  const auto lr = env(vars.local_rank), ls = env(vars.local_size);
  if (!lr && !ls) return vars.local_size;
  if (!ls) fail(std::string(vars.local_size) + " is not set (needed when " + vars.local_rank + " is set)");
  if (!lr) fail(std::string(vars.local_rank) + " is not set (needed when " + vars.local_size + " is set)");
  out.local_world_size = parse_positive(vars.local_size, *ls);
  out.local_rank = parse_count(vars.local_rank, *lr);
  check_below(vars.local_rank, out.local_rank, vars.local_size, out.local_world_size);
  return vars.local_size;
}

/// This node's task count: SLURM_NTASKS_PER_NODE, or this node's entry
/// (SLURM_NODEID) of SLURM_TASKS_PER_NODE. Returns the variable it used.
std::string read_slurm_local_size(const env_lookup& env, int world, rank_env& out) {
  if (auto per = env("SLURM_NTASKS_PER_NODE")) {
    out.local_world_size = parse_positive("SLURM_NTASKS_PER_NODE", *per);
    return "SLURM_NTASKS_PER_NODE";
  }
  const auto tpn = env("SLURM_TASKS_PER_NODE");
  if (!tpn) fail("SLURM_TASKS_PER_NODE is not set" + needed_when("SLURM_NTASKS", world));
  const auto counts = slurm_tasks_per_node(*tpn);
  if (auto node = env("SLURM_NODEID")) {
    const int id = parse_count("SLURM_NODEID", *node);
    if (id >= static_cast<int>(counts.size()))
      fail("SLURM_NODEID " + std::to_string(id) + " is out of range for SLURM_TASKS_PER_NODE " + quoted_input(*tpn) +
           " (" + std::to_string(counts.size()) + " nodes)");
    out.local_world_size = counts[id];
  } else {
    for (int c : counts)
      if (c != counts.front())
        fail("SLURM_NODEID is not set (needed when SLURM_TASKS_PER_NODE " + quoted_input(*tpn) +
             " differs between nodes)");
    out.local_world_size = counts.front();
  }
  return "SLURM_TASKS_PER_NODE";
}

/// Returns the local size's variable.
std::string read_slurm_local(const env_lookup& env, int world, rank_env& out) {
  const std::string size_name = read_slurm_local_size(env, world, out);
  const auto id = env("SLURM_LOCALID");
  if (!id) fail("SLURM_LOCALID is not set" + needed_when("SLURM_NTASKS", world));
  out.local_rank = parse_count("SLURM_LOCALID", *id);
  check_below("SLURM_LOCALID", out.local_rank, size_name, out.local_world_size);
  return size_name;
}

void read_master(const env_lookup& env, const launcher_vars& vars, rank_env& out) {
  const std::string when = env("ACTORPIPE_COORDINATOR") && out.world_size == 1
                               ? std::string(" (needed when ACTORPIPE_COORDINATOR is set: a coordinator runs apart)")
                               : needed_when(vars.size, out.world_size);
  if (auto addr = env("MASTER_ADDR")) {
    check_host("MASTER_ADDR", *addr);
    out.master_addr = *addr;
  } else if (vars.kind != rank_launcher::slurm) {
    fail("MASTER_ADDR is not set" + when);
  } else if (auto list = env("SLURM_JOB_NODELIST")) {
    out.master_addr = first_slurm_host(*list, "SLURM_JOB_NODELIST");
  } else if (auto old = env("SLURM_NODELIST")) {
    out.master_addr = first_slurm_host(*old, "SLURM_NODELIST");
  } else {
    fail("MASTER_ADDR is not set, nor SLURM_JOB_NODELIST" + when);
  }
  const auto port = env("MASTER_PORT");
  out.master_port = port ? parse_port(*port) : default_master_port;
}

void read_torchelastic(const env_lookup& env, rank_env& out) {
  if (auto count = env("TORCHELASTIC_RESTART_COUNT"))
    out.restart_count = parse_count("TORCHELASTIC_RESTART_COUNT", *count);
  if (auto agent = env("TORCHELASTIC_USE_AGENT_STORE")) {
    const std::string& v = *agent;
    if (v == "True" || v == "true" || v == "1")
      out.use_agent_store = true;
    else if (v == "False" || v == "false" || v == "0" || v.empty())
      out.use_agent_store = false;
    else
      fail("TORCHELASTIC_USE_AGENT_STORE " + quoted_input(v) + " is not True or False");
  }
  out.store_prefix = "/worker/attempt_" + std::to_string(out.restart_count);
}

/// Slurm's step ids above this are its special steps (interactive, batch,
/// extern, pending: 0xfffffffa and up), never one srun started.
constexpr int64_t last_srun_step = 0xfffffff9LL;

/// Under Slurm with more than one task, this process must be a task of an
/// srun step: an sbatch or salloc script itself has SLURM_NTASKS and (in a
/// batch script) SLURM_PROCID 0, but no step id.
void check_srun_step(const env_lookup& env, int world) {
  const char* name = "SLURM_STEP_ID";
  auto step = env(name);
  if (!step) {
    name = "SLURM_STEPID";
    step = env(name);
  }
  if (step && all_digits(*step) && step->size() <= 10 && std::stoll(*step) <= last_srun_step) return;
  const std::string why = step ? std::string(name) + " " + quoted_input(*step) + " is not an srun step"
                               : std::string("SLURM_STEP_ID is not set");
  fail("SLURM_NTASKS is " + std::to_string(world) + " but this process is not a task that srun started (" + why +
       ": an sbatch or salloc script itself); start it with srun, as in 'srun actorpipe train CONFIG'");
}

const launcher_vars* detect(const env_lookup& env) {
  if (env("WORLD_SIZE")) return &torchrun_vars;
  if (env("OMPI_COMM_WORLD_SIZE")) return &openmpi_vars;
  if (env("SLURM_NTASKS")) return &slurm_vars;
  return nullptr;
}

}  // namespace

const char* launcher_name(rank_launcher launcher) {
  switch (launcher) {
    case rank_launcher::torchrun:
      return "torchrun/env";
    case rank_launcher::slurm:
      return "slurm";
    case rank_launcher::openmpi:
      return "openmpi";
    case rank_launcher::none:
      break;
  }
  return "none";
}

const char* local_rank_variable(rank_launcher launcher) {
  switch (launcher) {
    case rank_launcher::openmpi:
      return openmpi_vars.local_rank;
    case rank_launcher::slurm:
      return slurm_vars.local_rank;
    case rank_launcher::torchrun:
    case rank_launcher::none:
      break;
  }
  return torchrun_vars.local_rank;
}

const char* world_size_variable(rank_launcher launcher) {
  switch (launcher) {
    case rank_launcher::openmpi:
      return openmpi_vars.size;
    case rank_launcher::slurm:
      return slurm_vars.size;
    case rank_launcher::torchrun:
    case rank_launcher::none:
      break;
  }
  return torchrun_vars.size;
}

void check_world_divides(const rank_env& env, int dp, int pp) {
  if (!env.multi_process()) return;
  if (dp >= 1 && pp >= 1 && (static_cast<long long>(dp) * pp) % env.workers() != 0)
    throw rank_env_error(std::string(world_size_variable(env.launcher)) + " " + std::to_string(env.workers()) +
                             " does not divide parallel.dp " + std::to_string(dp) + " x pipeline stages " +
                             std::to_string(pp),
                         env.rank != 0 && (env.local_rank != 0 || env.shown(env.rank) == 0));
  check_rank_placement(dp, pp, env.workers());
}

load_env load_env_for(const rank_env& ranks, int cuda_devices) {
  load_env out;
  out.cuda_devices = cuda_devices;
  if (!ranks.multi_process()) return out;
  out.local_rank = ranks.local_rank;
  out.rank = ranks.rank;
  out.local_rank_variable = local_rank_variable(ranks.launcher);
  return out;
}

rank_env read_rank_env(const env_lookup& env) {
  rank_env out;
  read_torchelastic(env, out);
  const launcher_vars* vars = detect(env);
  if (!vars) return out;
  const int world = parse_positive(vars->size, *env(vars->size));
  if (vars->kind == rank_launcher::slurm && world > 1) check_srun_step(env, world);
  const auto rank = env(vars->rank);
  if (!rank && world > 1) fail(std::string(vars->rank) + " is not set" + needed_when(vars->size, world));
  const int r = rank ? parse_count(vars->rank, *rank) : 0;
  check_below(vars->rank, r, vars->size, world);
  const auto role = env("ACTORPIPE_COORDINATOR");
  if (role && *role != "self" && *role != "apart")
    fail("ACTORPIPE_COORDINATOR " + quoted_input(*role) + " is not 'self' or 'apart'");
  if (world == 1 && !role) return out;  // one process: nothing else matters
  out.launcher = vars->kind;
  out.world_size = world;
  out.rank = r;
  const std::string local_size =
      vars->kind == rank_launcher::slurm ? read_slurm_local(env, world, out) : read_local_pair(env, *vars, out);
  if (out.local_world_size > world)
    fail(local_size + " " + std::to_string(out.local_world_size) + " is larger than " + vars->size + " " +
         std::to_string(world));
  read_master(env, *vars, out);
  if (role) {
    // The coordinator apart is rank 0 inside the run, each worker RANK + 1.
    out.apart = true;
    out.world_size = world + 1;
    out.rank = *role == "self" ? 0 : r + 1;
  }
  return out;
}

rank_env read_rank_env(const std::map<std::string, std::string>& env) {
  return read_rank_env([&env](const std::string& name) -> std::optional<std::string> {
    auto it = env.find(name);
    if (it == env.end()) return std::nullopt;
    return it->second;
  });
}

rank_env read_rank_env() {
  return read_rank_env([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    if (!v) return std::nullopt;
    return std::string(v);
  });
}

}  // namespace actorpipe
