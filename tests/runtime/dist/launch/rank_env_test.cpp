// runtime/dist/launch/rank_env: the rank, world and master a launcher's variables
// describe (torchrun, Slurm, OpenMPI, none) and every error as the exact
// line a user sees. Where the stage actors go is rank_placement_test.cpp.
#include "runtime/dist/launch/rank_env.hpp"

#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace actorpipe {
namespace {

using env_map = std::map<std::string, std::string>;

/// The line read_rank_env(env) throws; fails the test when it returns.
std::string error_of(const env_map& env) {
  try {
    read_rank_env(env);
  } catch (const rank_env_error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
    return what;
  }
  ADD_FAILURE() << "no rank_env_error";
  return "";
}

const env_map torchrun_env = {{"RANK", "5"},
                              {"WORLD_SIZE", "8"},
                              {"LOCAL_RANK", "1"},
                              {"LOCAL_WORLD_SIZE", "4"},
                              {"MASTER_ADDR", "node3"},
                              {"MASTER_PORT", "12345"}};

env_map with(env_map env, const env_map& changes) {
  for (const auto& [k, v] : changes) env[k] = v;
  return env;
}

env_map without(env_map env, const std::string& name) {
  env.erase(name);
  return env;
}

// ---- single process -------------------------------------------------------

TEST(RankEnv, NothingSetIsOneProcess) {
  const rank_env e = read_rank_env(env_map{});
  EXPECT_EQ(e.launcher, rank_launcher::none);
  EXPECT_STREQ(launcher_name(e.launcher), "none");
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 1);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_EQ(e.master_addr, "");
  EXPECT_EQ(e.master_port, 0);
  EXPECT_EQ(e.restart_count, 0);
  EXPECT_FALSE(e.use_agent_store);
  EXPECT_EQ(e.store_prefix, "/worker/attempt_0");
  EXPECT_FALSE(e.multi_process());
  EXPECT_FALSE(e.hosts_store());
}

TEST(RankEnv, WorldOfOneNeedsNoMasterUnderAnyLauncher) {
  for (const env_map& env : {env_map{{"WORLD_SIZE", "1"}}, env_map{{"WORLD_SIZE", "1"}, {"RANK", "0"}},
                             env_map{{"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}},
                             env_map{{"OMPI_COMM_WORLD_SIZE", "1"}, {"OMPI_COMM_WORLD_RANK", "0"}}}) {
    const rank_env e = read_rank_env(env);
    EXPECT_EQ(e.launcher, rank_launcher::none);
    EXPECT_EQ(e.world_size, 1);
    EXPECT_EQ(e.rank, 0);
    EXPECT_EQ(e.master_addr, "");
    EXPECT_EQ(e.master_port, 0);
  }
  EXPECT_EQ(error_of({{"WORLD_SIZE", "1"}, {"RANK", "1"}}), "RANK 1 is out of range for WORLD_SIZE 1");
}

// ---- torchrun / env --------------------------------------------------------

TEST(RankEnv, TorchrunVariables) {
  const rank_env e = read_rank_env(torchrun_env);
  EXPECT_EQ(e.launcher, rank_launcher::torchrun);
  EXPECT_STREQ(launcher_name(e.launcher), "torchrun/env");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "node3");
  EXPECT_EQ(e.master_port, 12345);
  EXPECT_TRUE(e.multi_process());
  EXPECT_FALSE(e.hosts_store());
  EXPECT_EQ(e.store_prefix, "/worker/attempt_0");
}

TEST(RankEnv, TorchrunDefaultsPortAndLocalPair) {
  const env_map env = {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "10.1.2.3"}};
  const rank_env e = read_rank_env(env);
  EXPECT_EQ(e.master_port, 29500);
  EXPECT_EQ(e.master_port, default_master_port);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 1);
  EXPECT_TRUE(e.hosts_store());  // rank 0, no agent store
}

TEST(RankEnv, TorchelasticRestartAndAgentStore) {
  const rank_env e = read_rank_env(with(
      torchrun_env, {{"RANK", "0"}, {"TORCHELASTIC_RESTART_COUNT", "3"}, {"TORCHELASTIC_USE_AGENT_STORE", "True"}}));
  EXPECT_EQ(e.restart_count, 3);
  EXPECT_TRUE(e.use_agent_store);
  EXPECT_EQ(e.store_prefix, "/worker/attempt_3");
  EXPECT_FALSE(e.hosts_store());  // the agent hosts it; rank 0 is a client
  for (const char* yes : {"True", "true", "1"})
    EXPECT_TRUE(read_rank_env(with(torchrun_env, {{"TORCHELASTIC_USE_AGENT_STORE", yes}})).use_agent_store) << yes;
  for (const char* no : {"False", "false", "0", ""})
    EXPECT_FALSE(read_rank_env(with(torchrun_env, {{"TORCHELASTIC_USE_AGENT_STORE", no}})).use_agent_store) << no;
  EXPECT_EQ(read_rank_env(env_map{{"TORCHELASTIC_RESTART_COUNT", "12"}}).store_prefix, "/worker/attempt_12");
}

// ---- Slurm -----------------------------------------------------------------

const env_map slurm_env = {{"SLURM_NTASKS", "8"},
                           {"SLURM_PROCID", "6"},
                           {"SLURM_LOCALID", "2"},
                           {"SLURM_TASKS_PER_NODE", "4(x2)"},
                           {"SLURM_JOB_NODELIST", "node[01-02]"},
                           {"SLURM_NODEID", "1"},
                           {"SLURM_STEP_ID", "0"}};

TEST(RankEnv, SlurmVariables) {
  const rank_env e = read_rank_env(slurm_env);
  EXPECT_EQ(e.launcher, rank_launcher::slurm);
  EXPECT_STREQ(launcher_name(e.launcher), "slurm");
  EXPECT_EQ(e.rank, 6);
  EXPECT_EQ(e.world_size, 8);
  EXPECT_EQ(e.local_rank, 2);
  EXPECT_EQ(e.local_world_size, 4);
  EXPECT_EQ(e.master_addr, "node01");
  EXPECT_EQ(e.master_port, 29500);
}

TEST(RankEnv, SlurmMasterAddrAndPortWinOverTheNodelist) {
  const rank_env e = read_rank_env(with(slurm_env, {{"MASTER_ADDR", "login7"}, {"MASTER_PORT", "4000"}}));
  EXPECT_EQ(e.master_addr, "login7");
  EXPECT_EQ(e.master_port, 4000);
  const rank_env old = read_rank_env(with(without(slurm_env, "SLURM_JOB_NODELIST"), {{"SLURM_NODELIST", "c[7-9]"}}));
  EXPECT_EQ(old.master_addr, "c7");
}

TEST(RankEnv, SlurmLocalWorldSize) {
  // Uneven nodes: node 2 of "4(x2),3" runs 3 tasks.
  const env_map uneven = with(slurm_env, {{"SLURM_NTASKS", "11"},
                                          {"SLURM_PROCID", "9"},
                                          {"SLURM_LOCALID", "1"},
                                          {"SLURM_TASKS_PER_NODE", "4(x2),3"},
                                          {"SLURM_NODEID", "2"}});
  EXPECT_EQ(read_rank_env(uneven).local_world_size, 3);
  // Even nodes need no SLURM_NODEID.
  EXPECT_EQ(read_rank_env(without(slurm_env, "SLURM_NODEID")).local_world_size, 4);
  // SLURM_NTASKS_PER_NODE wins over SLURM_TASKS_PER_NODE.
  EXPECT_EQ(read_rank_env(with(slurm_env, {{"SLURM_NTASKS_PER_NODE", "3"}})).local_world_size, 3);
  EXPECT_EQ(error_of(without(uneven, "SLURM_NODEID")),
            "SLURM_NODEID is not set (needed when SLURM_TASKS_PER_NODE '4(x2),3' differs between nodes)");
  EXPECT_EQ(error_of(with(uneven, {{"SLURM_NODEID", "3"}})),
            "SLURM_NODEID 3 is out of range for SLURM_TASKS_PER_NODE '4(x2),3' (3 nodes)");
  EXPECT_EQ(error_of(with(slurm_env, {{"SLURM_LOCALID", "4"}})),
            "SLURM_LOCALID 4 is out of range for SLURM_TASKS_PER_NODE 4");
  EXPECT_EQ(error_of(with(slurm_env, {{"SLURM_NTASKS_PER_NODE", "2"}})),
            "SLURM_LOCALID 2 is out of range for SLURM_NTASKS_PER_NODE 2");
  EXPECT_EQ(error_of(without(slurm_env, "SLURM_TASKS_PER_NODE")),
            "SLURM_TASKS_PER_NODE is not set (needed when SLURM_NTASKS is 8)");
  EXPECT_EQ(error_of(without(slurm_env, "SLURM_LOCALID")), "SLURM_LOCALID is not set (needed when SLURM_NTASKS is 8)");
}

// What an sbatch script itself holds (Slurm 22.05, `sbatch -N1 -n3`): the
// job's task count and a PROCID and LOCALID of 0, but no step id. Taken at
// its word it would be rank 0 of 3 and wait for peers that never come.
const env_map batch_script_env = {{"SLURM_NTASKS", "3"},         {"SLURM_NPROCS", "3"},
                                  {"SLURM_PROCID", "0"},         {"SLURM_LOCALID", "0"},
                                  {"SLURM_NODEID", "0"},         {"SLURM_TASKS_PER_NODE", "3"},
                                  {"SLURM_JOB_NODELIST", "vm"}, {"SLURM_JOB_ID", "5"}};

TEST(RankEnv, SlurmBatchScriptIsRefusedNamingSrun) {
  const std::string tail =
      ": an sbatch or salloc script itself); start it with srun, as in 'srun actorpipe train CONFIG'";
  EXPECT_EQ(error_of(batch_script_env),
            "SLURM_NTASKS is 3 but this process is not a task that srun started (SLURM_STEP_ID is not set" + tail);
  // Slurm's special steps, by name or by number (batch is 0xfffffffb).
  EXPECT_EQ(error_of(with(batch_script_env, {{"SLURM_STEP_ID", "batch"}})),
            "SLURM_NTASKS is 3 but this process is not a task that srun started (SLURM_STEP_ID 'batch' is not an "
            "srun step" + tail);
  EXPECT_EQ(error_of(with(batch_script_env, {{"SLURM_STEPID", "4294967291"}})),
            "SLURM_NTASKS is 3 but this process is not a task that srun started (SLURM_STEPID '4294967291' is not an "
            "srun step" + tail);
  EXPECT_EQ(error_of(with(batch_script_env, {{"SLURM_STEP_ID", "99999999999"}})),
            "SLURM_NTASKS is 3 but this process is not a task that srun started (SLURM_STEP_ID '99999999999' is not an "
            "srun step" + tail);
  // A task of srun's step: either name, any regular step number.
  for (const char* name : {"SLURM_STEP_ID", "SLURM_STEPID"})
    for (const char* id : {"0", "7", "4294967289"}) {
      const rank_env e = read_rank_env(with(batch_script_env, {{name, id}}));
      EXPECT_EQ(e.launcher, rank_launcher::slurm) << name << " " << id;
      EXPECT_EQ(e.world_size, 3) << name << " " << id;
      EXPECT_EQ(e.master_addr, "vm") << name << " " << id;
    }
  // One task (sbatch -n1) is one process, step or none.
  EXPECT_EQ(read_rank_env(with(batch_script_env, {{"SLURM_NTASKS", "1"}})).world_size, 1);
  // torchrun or mpirun started from the batch script: their variables win.
  EXPECT_EQ(read_rank_env(with(batch_script_env, {{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "vm"}}))
                .launcher,
            rank_launcher::torchrun);
  EXPECT_EQ(read_rank_env(with(batch_script_env, {{"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_COMM_WORLD_RANK", "1"},
                                                  {"MASTER_ADDR", "vm"}}))
                .launcher,
            rank_launcher::openmpi);
}

TEST(RankEnv, SlurmTasksPerNodeExpands) {
  EXPECT_EQ(slurm_tasks_per_node("4(x2),3"), (std::vector<int>{4, 4, 3}));
  EXPECT_EQ(slurm_tasks_per_node("2"), (std::vector<int>{2}));
  EXPECT_EQ(slurm_tasks_per_node("1(x3),2,5(x1)"), (std::vector<int>{1, 1, 1, 2, 5}));
  for (const char* bad : {"", "0", "4,", ",4", "4(2)", "4(x)", "4(x0)", "4(x2", "x", "4 ", "-1", "4(x2000000)"}) {
    try {
      slurm_tasks_per_node(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const rank_env_error& e) {
      EXPECT_EQ(std::string(e.what()),
                "SLURM_TASKS_PER_NODE '" + std::string(bad) + "' is not a list of COUNT or COUNT(xNODES)");
    }
  }
}

TEST(RankEnv, SlurmNodelistFirstHost) {
  EXPECT_EQ(first_slurm_host("node01"), "node01");
  EXPECT_EQ(first_slurm_host("node[01-04,07]"), "node01");
  EXPECT_EQ(first_slurm_host("gpu[1-2],cpu5"), "gpu1");
  EXPECT_EQ(first_slurm_host("a-b[009-011]"), "a-b009");
  EXPECT_EQ(first_slurm_host("node[7,01-02]"), "node7");
  EXPECT_EQ(first_slurm_host("r[1-2]-n[3-4]"), "r1-n3");
  EXPECT_EQ(first_slurm_host("cn001.cluster.example,cn[002-003]"), "cn001.cluster.example");
  EXPECT_EQ(first_slurm_host("x[8-10]"), "x8");  // 10 > 8 as numbers, not as text
  // Through read_rank_env:
  for (const auto& [list, host] : std::map<std::string, std::string>{
           {"node01", "node01"}, {"gpu[1-2],cpu5", "gpu1"}, {"a-b[009-011]", "a-b009"}, {"n[1,3],m2", "n1"}})
    EXPECT_EQ(read_rank_env(with(slurm_env, {{"SLURM_JOB_NODELIST", list}})).master_addr, host) << list;
}

TEST(RankEnv, SlurmNodelistMalformed) {
  const std::map<std::string, std::string> cases = {
      {"", "it is empty"},
      {"node[01", "'[' without ']'"},
      {"node[01-", "a range in '[...]' is not a number or LOW-HIGH"},
      {"node[]", "a range in '[...]' is not a number or LOW-HIGH"},
      {"node[a-b]", "a range in '[...]' is not a number or LOW-HIGH"},
      {"node[1;2]", "a range in '[...]' is not a number or LOW-HIGH"},
      {"node[[1]]", "a range in '[...]' is not a number or LOW-HIGH"},
      {"node]", "']' without '['"},
      {"node[04-01]", "range 04-01 goes down"},
      {"a,,b", "a host name is empty"},
      {"a,", "a host name is empty"},
      {"node 1", "character ' ' is not allowed in a host name"},
  };
  for (const auto& [list, why] : cases)
    EXPECT_EQ(error_of(with(slurm_env, {{"SLURM_JOB_NODELIST", list}})),
              "SLURM_JOB_NODELIST '" + list + "' is malformed: " + why);
  EXPECT_EQ(error_of(with(without(slurm_env, "SLURM_JOB_NODELIST"), {{"SLURM_NODELIST", "x]"}})),
            "SLURM_NODELIST 'x]' is malformed: ']' without '['");
}

// ---- OpenMPI ---------------------------------------------------------------

const env_map openmpi_env = {{"OMPI_COMM_WORLD_SIZE", "4"},       {"OMPI_COMM_WORLD_RANK", "3"},
                             {"OMPI_COMM_WORLD_LOCAL_RANK", "1"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                             {"MASTER_ADDR", "10.0.0.1"},         {"MASTER_PORT", "6000"}};

TEST(RankEnv, OpenMpiVariables) {
  const rank_env e = read_rank_env(openmpi_env);
  EXPECT_EQ(e.launcher, rank_launcher::openmpi);
  EXPECT_STREQ(launcher_name(e.launcher), "openmpi");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.world_size, 4);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_world_size, 2);
  EXPECT_EQ(e.master_addr, "10.0.0.1");
  EXPECT_EQ(e.master_port, 6000);
  EXPECT_EQ(error_of(without(openmpi_env, "MASTER_ADDR")),
            "MASTER_ADDR is not set (needed when OMPI_COMM_WORLD_SIZE is 4)");
  EXPECT_EQ(error_of(with(openmpi_env, {{"OMPI_COMM_WORLD_LOCAL_RANK", "2"}})),
            "OMPI_COMM_WORLD_LOCAL_RANK 2 is out of range for OMPI_COMM_WORLD_LOCAL_SIZE 2");
}

// ---- precedence --------------------------------------------------------------

TEST(RankEnv, TorchrunWinsThenOpenMpiThenSlurm) {
  env_map all = torchrun_env;
  for (const auto& kv : slurm_env) all.insert(kv);
  for (const auto& kv : openmpi_env) all.insert(kv);  // MASTER_ADDR/PORT stay torchrun's
  const rank_env t = read_rank_env(all);
  EXPECT_EQ(t.launcher, rank_launcher::torchrun);
  EXPECT_EQ(t.rank, 5);
  EXPECT_EQ(t.world_size, 8);
  const rank_env o = read_rank_env(without(without(without(all, "WORLD_SIZE"), "RANK"), "LOCAL_RANK"));
  EXPECT_EQ(o.launcher, rank_launcher::openmpi);  // mpirun inside an sbatch script
  EXPECT_EQ(o.rank, 3);
  EXPECT_EQ(o.world_size, 4);
  EXPECT_EQ(o.master_addr, "node3");
  env_map slurm_only = slurm_env;
  slurm_only.insert({"RANK", "1"});  // RANK alone (no WORLD_SIZE) is not torchrun's
  EXPECT_EQ(read_rank_env(slurm_only).launcher, rank_launcher::slurm);
  // WORLD_SIZE 1 is torchrun's word: one process, whatever Slurm says.
  const rank_env one = read_rank_env(with(slurm_env, {{"WORLD_SIZE", "1"}}));
  EXPECT_EQ(one.world_size, 1);
  EXPECT_EQ(one.launcher, rank_launcher::none);
}

// ---- what the config is loaded against ------------------------------------

TEST(LoadEnvFor, OneProcessLeavesTheLocalRankUnset) {
  const load_env e = load_env_for(read_rank_env(env_map{}), 2);
  EXPECT_EQ(e.cuda_devices, 2);
  EXPECT_FALSE(e.local_rank.has_value());  // auto keeps its round-robin
  EXPECT_EQ(e.rank, 0);
  // WORLD_SIZE 1 with a LOCAL_RANK is still one process.
  EXPECT_FALSE(load_env_for(read_rank_env(env_map{{"WORLD_SIZE", "1"}, {"LOCAL_RANK", "3"}}), 4).local_rank);
}

TEST(LoadEnvFor, EachLauncherGivesItsRankLocalRankAndVariable) {
  const load_env t = load_env_for(read_rank_env(torchrun_env), 4);
  EXPECT_EQ(t.cuda_devices, 4);
  EXPECT_EQ(t.local_rank, std::optional<int>(1));
  EXPECT_EQ(t.rank, 5);
  EXPECT_EQ(t.local_rank_variable, "LOCAL_RANK");
  const load_env s = load_env_for(read_rank_env(slurm_env), 0);
  EXPECT_EQ(s.local_rank, std::optional<int>(2));
  EXPECT_EQ(s.rank, 6);
  EXPECT_EQ(s.local_rank_variable, "SLURM_LOCALID");
  const load_env o = load_env_for(read_rank_env(openmpi_env), 1);
  EXPECT_EQ(o.local_rank, std::optional<int>(1));
  EXPECT_EQ(o.rank, 3);
  EXPECT_EQ(o.local_rank_variable, "OMPI_COMM_WORLD_LOCAL_RANK");
  EXPECT_STREQ(local_rank_variable(rank_launcher::none), "LOCAL_RANK");
}

// ---- the world size against the config ------------------------------------

/// The line and quiet() check_world_divides throws; fails when it returns.
std::pair<std::string, bool> divide_error(const rank_env& env, int dp, int pp) {
  try {
    check_world_divides(env, dp, pp);
  } catch (const rank_env_error& e) {
    return {e.what(), e.quiet()};
  }
  ADD_FAILURE() << "no rank_env_error";
  return {"", false};
}

TEST(WorldDivides, NamesTheVariableTheWorldSizeCameFrom) {
  EXPECT_STREQ(world_size_variable(rank_launcher::torchrun), "WORLD_SIZE");
  EXPECT_STREQ(world_size_variable(rank_launcher::none), "WORLD_SIZE");
  EXPECT_STREQ(world_size_variable(rank_launcher::slurm), "SLURM_NTASKS");
  EXPECT_STREQ(world_size_variable(rank_launcher::openmpi), "OMPI_COMM_WORLD_SIZE");
  // `srun -n4` on a 3-stage config: the user never set WORLD_SIZE.
  const rank_env slurm4 = read_rank_env(with(slurm_env, {{"SLURM_NTASKS", "4"}, {"SLURM_PROCID", "0"},
                                                        {"SLURM_LOCALID", "0"}, {"SLURM_TASKS_PER_NODE", "4"},
                                                        {"SLURM_NODEID", "0"}}));
  EXPECT_EQ(divide_error(slurm4, 1, 3).first, "SLURM_NTASKS 4 does not divide parallel.dp 1 x pipeline stages 3");
  EXPECT_EQ(divide_error(read_rank_env(openmpi_env), 1, 3).first,
            "OMPI_COMM_WORLD_SIZE 4 does not divide parallel.dp 1 x pipeline stages 3");
  EXPECT_EQ(divide_error(read_rank_env(torchrun_env), 2, 3).first,
            "WORLD_SIZE 8 does not divide parallel.dp 2 x pipeline stages 3");
}

TEST(WorldDivides, RankZeroAloneSaysIt) {
  for (int rank = 0; rank < 8; ++rank) {
    const rank_env e = read_rank_env(with(torchrun_env, {{"RANK", std::to_string(rank)}}));
    const auto [line, quiet] = divide_error(e, 1, 3);
    EXPECT_EQ(line, "WORLD_SIZE 8 does not divide parallel.dp 1 x pipeline stages 3") << rank;
    EXPECT_EQ(quiet, rank != 0) << rank;
  }
}

// A node without rank 0 (`launch --nnodes 2 --node-rank 1`) says it too,
// once: through its first process.
TEST(WorldDivides, TheFirstProcessOfANodeWithoutRankZeroSaysItToo) {
  for (int local = 0; local < 4; ++local) {
    const rank_env e = read_rank_env(with(torchrun_env, {{"RANK", std::to_string(4 + local)},
                                                         {"LOCAL_RANK", std::to_string(local)}}));
    EXPECT_EQ(divide_error(e, 1, 3).second, local != 0) << local;
  }
  const rank_env first_node = read_rank_env(with(torchrun_env, {{"RANK", "0"}, {"LOCAL_RANK", "0"}}));
  EXPECT_FALSE(divide_error(first_node, 1, 3).second);
  const rank_env second = read_rank_env(with(torchrun_env, {{"RANK", "1"}, {"LOCAL_RANK", "1"}}));
  EXPECT_TRUE(divide_error(second, 1, 3).second);
}

TEST(WorldDivides, AWorldThatDividesOrOneProcessPasses) {
  EXPECT_NO_THROW(check_world_divides(read_rank_env(torchrun_env), 2, 4));   // 8 of 8
  EXPECT_NO_THROW(check_world_divides(read_rank_env(torchrun_env), 4, 4));   // 2 stage actors each
  EXPECT_NO_THROW(check_world_divides(read_rank_env(openmpi_env), 1, 8));
  EXPECT_NO_THROW(check_world_divides(read_rank_env(env_map{}), 1, 3));      // one process
  // dp and pp themselves are checked as check_rank_placement does.
  EXPECT_EQ(divide_error(read_rank_env(torchrun_env), 0, 4).first, "parallel.dp 0 is not a positive integer");
  EXPECT_EQ(divide_error(read_rank_env(torchrun_env), 2, 0).first, "pipeline.stages 0 is not a positive integer");
}

// ---- a coordinator apart (actorpipe launch --coordinator process) ----------

// What the launcher gives 3 workers and the coordinator: WORLD_SIZE 3 in
// all four, ACTORPIPE_COORDINATOR "self" in the coordinator (RANK 0) and
// "apart" in each worker (RANK 0 .. 2).
const env_map apart_env = {{"RANK", "0"},       {"WORLD_SIZE", "3"},  {"LOCAL_RANK", "0"},
                           {"LOCAL_WORLD_SIZE", "3"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29400"},
                           {"ACTORPIPE_COORDINATOR", "apart"}};

TEST(RankEnvApart, TheCoordinatorIsRankZeroOfWorldSizePlusOne) {
  const rank_env e = read_rank_env(with(apart_env, {{"ACTORPIPE_COORDINATOR", "self"}}));
  EXPECT_TRUE(e.apart);
  EXPECT_EQ(e.launcher, rank_launcher::torchrun);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 4);  // 3 workers + the coordinator
  EXPECT_EQ(e.workers(), 3);
  EXPECT_EQ(e.local_rank, 0);
  EXPECT_EQ(e.local_world_size, 3);
  EXPECT_EQ(e.master_addr, "127.0.0.1");
  EXPECT_EQ(e.master_port, 29400);
  EXPECT_TRUE(e.multi_process());
  EXPECT_TRUE(e.hosts_store());  // the store lives in the coordinator
  EXPECT_EQ(e.shown(0), -1);     // no RANK of its own
  EXPECT_EQ(e.shown_text(0), "c");
}

TEST(RankEnvApart, AWorkersRankIsItsRankPlusOne) {
  for (int r = 0; r < 3; ++r) {
    const std::string rank = std::to_string(r);
    const rank_env e = read_rank_env(with(apart_env, {{"RANK", rank}, {"LOCAL_RANK", rank}}));
    EXPECT_TRUE(e.apart) << r;
    EXPECT_EQ(e.rank, r + 1) << r;
    EXPECT_EQ(e.world_size, 4) << r;
    EXPECT_EQ(e.workers(), 3) << r;
    EXPECT_EQ(e.local_rank, r) << r;  // the local slot is not shifted
    EXPECT_EQ(e.shown(e.rank), r) << r;
    EXPECT_EQ(e.shown_text(e.rank), rank) << r;
    EXPECT_FALSE(e.hosts_store()) << r;  // worker RANK 0 is rank 1: a client
  }
}

TEST(RankEnvApart, WithoutTheVariableNothingIsShifted) {
  const rank_env e = read_rank_env(without(apart_env, "ACTORPIPE_COORDINATOR"));
  EXPECT_FALSE(e.apart);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.world_size, 3);
  EXPECT_EQ(e.workers(), 3);
  EXPECT_EQ(e.shown(2), 2);
  EXPECT_EQ(e.shown_text(0), "0");
  EXPECT_TRUE(e.hosts_store());
}

TEST(RankEnvApart, OneWorkerApartIsStillTwoProcesses) {
  // WORLD_SIZE 1 alone is one process; with a coordinator apart it is two:
  // the coordinator (rank 0) and the one worker (rank 1).
  const env_map one = {{"RANK", "0"}, {"WORLD_SIZE", "1"}, {"MASTER_ADDR", "127.0.0.1"},
                       {"ACTORPIPE_COORDINATOR", "apart"}};
  const rank_env w = read_rank_env(one);
  EXPECT_TRUE(w.apart);
  EXPECT_EQ(w.launcher, rank_launcher::torchrun);
  EXPECT_EQ(w.rank, 1);
  EXPECT_EQ(w.world_size, 2);
  EXPECT_EQ(w.workers(), 1);
  EXPECT_TRUE(w.multi_process());
  EXPECT_EQ(w.master_addr, "127.0.0.1");
  EXPECT_EQ(w.master_port, 29500);
  const rank_env c = read_rank_env(with(one, {{"ACTORPIPE_COORDINATOR", "self"}}));
  EXPECT_EQ(c.rank, 0);
  EXPECT_EQ(c.world_size, 2);
  EXPECT_TRUE(c.hosts_store());
  // Two processes need a master, even though WORLD_SIZE is 1.
  EXPECT_EQ(error_of(without(one, "MASTER_ADDR")),
            "MASTER_ADDR is not set (needed when ACTORPIPE_COORDINATOR is set: a coordinator runs apart)");
}

TEST(RankEnvApart, AnyOtherValueIsAnErrorNamingTheVariable) {
  EXPECT_EQ(error_of(with(apart_env, {{"ACTORPIPE_COORDINATOR", "process"}})),
            "ACTORPIPE_COORDINATOR 'process' is not 'self' or 'apart'");
  EXPECT_EQ(error_of(with(apart_env, {{"ACTORPIPE_COORDINATOR", ""}})),
            "ACTORPIPE_COORDINATOR '' is not 'self' or 'apart'");
  EXPECT_EQ(error_of(with(apart_env, {{"ACTORPIPE_COORDINATOR", "Self"}})),
            "ACTORPIPE_COORDINATOR 'Self' is not 'self' or 'apart'");
  // Checked at WORLD_SIZE 1 too, where nothing else is read.
  EXPECT_EQ(error_of({{"WORLD_SIZE", "1"}, {"ACTORPIPE_COORDINATOR", "yes"}}),
            "ACTORPIPE_COORDINATOR 'yes' is not 'self' or 'apart'");
}

TEST(WorldDivides, WithACoordinatorApartTheWorkersMustDivide) {
  // WORLD_SIZE 3 apart: world 4 inside the run, 3 workers hold the stages.
  const rank_env coordinator = read_rank_env(with(apart_env, {{"ACTORPIPE_COORDINATOR", "self"}}));
  const rank_env worker0 = read_rank_env(apart_env);  // inside rank 1
  for (const rank_env& e : {coordinator, worker0}) {
    EXPECT_NO_THROW(check_world_divides(e, 1, 3));  // one stage per worker
    EXPECT_NO_THROW(check_world_divides(e, 2, 3));  // 6 actors, 2 each
    EXPECT_NO_THROW(check_world_divides(e, 1, 6));
  }
  // pp 4 would divide the world of 4 but not the 3 workers: refused, naming
  // the WORLD_SIZE the user gave.
  const auto [line, quiet] = divide_error(coordinator, 1, 4);
  EXPECT_EQ(line, "WORLD_SIZE 3 does not divide parallel.dp 1 x pipeline stages 4");
  EXPECT_FALSE(quiet);  // the coordinator (rank 0) says it
  const auto [wline, wquiet] = divide_error(worker0, 1, 4);
  EXPECT_EQ(wline, "WORLD_SIZE 3 does not divide parallel.dp 1 x pipeline stages 4");
  EXPECT_TRUE(wquiet);  // worker RANK 0 is rank 1 inside: quiet
  EXPECT_EQ(divide_error(coordinator, 2, 2).first, "WORLD_SIZE 3 does not divide parallel.dp 2 x pipeline stages 2");
  // More workers than stage actors: 3 workers, 2 actors.
  EXPECT_EQ(divide_error(coordinator, 1, 2).first, "WORLD_SIZE 3 does not divide parallel.dp 1 x pipeline stages 2");
}

// ---- errors ----------------------------------------------------------------

TEST(RankEnvErrors, NumbersAndRanges) {
  EXPECT_EQ(error_of(with(torchrun_env, {{"RANK", "x"}})), "RANK 'x' is not a non-negative integer");
  EXPECT_EQ(error_of(with(torchrun_env, {{"RANK", "-1"}})), "RANK '-1' is not a non-negative integer");
  EXPECT_EQ(error_of(with(torchrun_env, {{"RANK", " 1"}})), "RANK ' 1' is not a non-negative integer");
  EXPECT_EQ(error_of(with(torchrun_env, {{"RANK", ""}})), "RANK '' is not a non-negative integer");
  EXPECT_EQ(error_of(with(torchrun_env, {{"RANK", "99999999999"}})), "RANK '99999999999' is too large");
  EXPECT_EQ(error_of(with(torchrun_env, {{"WORLD_SIZE", "four"}})), "WORLD_SIZE 'four' is not a non-negative integer");
  EXPECT_EQ(error_of(with(torchrun_env, {{"WORLD_SIZE", "0"}})), "WORLD_SIZE '0' is not a positive integer");
  EXPECT_EQ(error_of(with(torchrun_env, {{"RANK", "4"}, {"WORLD_SIZE", "4"}})),
            "RANK 4 is out of range for WORLD_SIZE 4");
  EXPECT_EQ(error_of(with(torchrun_env, {{"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}})),
            "LOCAL_RANK 2 is out of range for LOCAL_WORLD_SIZE 2");
  EXPECT_EQ(error_of(with(torchrun_env, {{"LOCAL_WORLD_SIZE", "0"}})),
            "LOCAL_WORLD_SIZE '0' is not a positive integer");
  EXPECT_EQ(error_of(with(torchrun_env, {{"LOCAL_WORLD_SIZE", "16"}, {"LOCAL_RANK", "0"}})),
            "LOCAL_WORLD_SIZE 16 is larger than WORLD_SIZE 8");
  EXPECT_EQ(error_of(without(torchrun_env, "LOCAL_WORLD_SIZE")),
            "LOCAL_WORLD_SIZE is not set (needed when LOCAL_RANK is set)");
  EXPECT_EQ(error_of(without(torchrun_env, "LOCAL_RANK")),
            "LOCAL_RANK is not set (needed when LOCAL_WORLD_SIZE is set)");
  EXPECT_EQ(error_of(with(slurm_env, {{"SLURM_PROCID", "8"}})), "SLURM_PROCID 8 is out of range for SLURM_NTASKS 8");
  EXPECT_EQ(error_of({{"TORCHELASTIC_RESTART_COUNT", "-2"}}),
            "TORCHELASTIC_RESTART_COUNT '-2' is not a non-negative integer");
  EXPECT_EQ(error_of({{"TORCHELASTIC_USE_AGENT_STORE", "yes"}}),
            "TORCHELASTIC_USE_AGENT_STORE 'yes' is not True or False");
}

TEST(RankEnvErrors, MissingRankOrMaster) {
  EXPECT_EQ(error_of({{"WORLD_SIZE", "2"}, {"RANK", "0"}}), "MASTER_ADDR is not set (needed when WORLD_SIZE is 2)");
  EXPECT_EQ(error_of({{"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}}), "RANK is not set (needed when WORLD_SIZE is 2)");
  EXPECT_EQ(error_of(without(slurm_env, "SLURM_PROCID")), "SLURM_PROCID is not set (needed when SLURM_NTASKS is 8)");
  EXPECT_EQ(error_of(without(openmpi_env, "OMPI_COMM_WORLD_RANK")),
            "OMPI_COMM_WORLD_RANK is not set (needed when OMPI_COMM_WORLD_SIZE is 4)");
  EXPECT_EQ(error_of(without(slurm_env, "SLURM_JOB_NODELIST")),
            "MASTER_ADDR is not set, nor SLURM_JOB_NODELIST (needed when SLURM_NTASKS is 8)");
  EXPECT_EQ(error_of(with(torchrun_env, {{"MASTER_ADDR", ""}})), "MASTER_ADDR is empty");
  EXPECT_EQ(error_of(with(torchrun_env, {{"MASTER_ADDR", "a b"}})), "MASTER_ADDR 'a b' is not a host name or address");
}

TEST(RankEnvErrors, PortOutsideOneTo65535) {
  for (const char* bad : {"0", "65536", "99999999", "http", "-1", "", "80 "})
    EXPECT_EQ(error_of(with(torchrun_env, {{"MASTER_PORT", bad}})),
              "MASTER_PORT '" + std::string(bad) + "' is not a port number (1..65535)");
  EXPECT_EQ(read_rank_env(with(torchrun_env, {{"MASTER_PORT", "1"}})).master_port, 1);
  EXPECT_EQ(read_rank_env(with(torchrun_env, {{"MASTER_PORT", "65535"}})).master_port, 65535);
}

TEST(RankEnvErrors, ValuesAreQuotedPrintableAndCut) {
  // An escape sequence and 100 more bytes: shown as \x1b, cut at 80
  // characters, with the full length after.
  const std::string value = "\x1b" + std::string(100, 'a');
  EXPECT_EQ(error_of(with(torchrun_env, {{"RANK", value}})),
            "RANK '\\x1b" + std::string(76, 'a') + "...' (101 bytes) is not a non-negative integer");
  EXPECT_EQ(error_of(with(torchrun_env, {{"MASTER_ADDR", "h\nRANK 0"}})),
            "MASTER_ADDR 'h\\nRANK 0' is not a host name or address");
}

TEST(RankEnvErrors, AreConfigErrors) {  // so the apps exit with code 2
  try {
    read_rank_env(with(torchrun_env, {{"RANK", "x"}}));
    FAIL() << "no error";
  } catch (const config_error& e) {
    EXPECT_NE(dynamic_cast<const rank_env_error*>(&e), nullptr);
  }
}

TEST(RankEnv, ProcessEnvironmentOverload) {
  // Each test runs in its own process under ctest; restore anyway.
  const char* names[] = {"WORLD_SIZE", "RANK", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
  std::map<std::string, std::optional<std::string>> saved;
  for (const char* n : names) {
    const char* v = std::getenv(n);
    saved[n] = v ? std::optional<std::string>(v) : std::nullopt;
    unsetenv(n);
  }
  setenv("WORLD_SIZE", "3", 1);
  setenv("RANK", "2", 1);
  setenv("MASTER_ADDR", "here", 1);
  const rank_env e = read_rank_env();
  EXPECT_EQ(e.launcher, rank_launcher::torchrun);
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.world_size, 3);
  EXPECT_EQ(e.master_addr, "here");
  for (const auto& [n, v] : saved) {
    if (v)
      setenv(n.c_str(), v->c_str(), 1);
    else
      unsetenv(n.c_str());
  }
}

}  // namespace
}  // namespace actorpipe
