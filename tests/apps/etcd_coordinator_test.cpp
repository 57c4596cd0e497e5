// `launch --coordinator etcd://...` against a real 3-member etcd cluster,
// one member in each of 3 network namespaces (or on loopback where none
// can be made; tests/runtime/dist/coord/etcd_cluster.hpp): the coordinator
// runs apart, takes the run's name under a lease, and keeps its record
// (generation, members, placement, the last decided step) there. One
// member killed mid-run goes unnoticed and the run ends bitwise; the
// leader killed as the run ends still gets the run's end; a second
// live run of the same name, an address where nothing listens and a
// cluster without a majority are refused in one line with exit 2; a
// coordinator cut off from etcd mid-run stops by itself (exit 5); and a
// coordinator killed or stopped mid-step is taken over by the launcher's
// standby from the workers' memory, bitwise (Takeover).
// Real processes on ports the kernel gave out; every process is killed in
// every failure path.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/dist/coord/etcd_client.hpp"
#include "runtime/dist/coord/run_record.hpp"
#include "runtime/dist/transport/net_address.hpp"
#include "tests/apps/background_launch.hpp"
#include "tests/apps/child_process.hpp"
#include "tests/apps/deep_mlp.hpp"
#include "tests/runtime/dist/coord/etcd_cluster.hpp"
#include "tests/runtime/dist/coord/spread_cluster.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using testing_util::describe;
using testing_util::etcd_cluster;
using clock_type = std::chrono::steady_clock;

#define REQUIRE_ETCD()                                    \
  if (::access(testing_util::etcd_binary(), X_OK) != 0) \
  GTEST_SKIP() << "etcd-server is not installed (scripts/setup.sh installs it): test skipped"

fs::path test_dir() { return testing_util::dir_per_test("actorpipe_etcd_coordinator_test"); }

testing_util::child_result actorpipe(const std::vector<std::string>& args, double timeout_s = 120) {
  testing_util::child_limits limits;
  limits.timeout_s = timeout_s;
  return testing_util::run_child(ACTORPIPE_BIN, args, limits);
}

// pp 3, `steps` steps of at least 4 ms an op (about 50 ms a step), healing
// on (heartbeat 2 s: the coordinator's lease is 2 s too).
std::string config(const std::string& name, int steps = 40, const std::string& supervision = "") {
  return testing_util::write(test_dir() / (name + ".yaml"),
                             testing_util::deep_mlp_model_and_data() + "train:\n  steps: " + std::to_string(steps) +
                                 "\n  batch_size: 48\n  optimizer: {type: adam, lr: 0.01}\n"
                                 "  clip_grad_norm: 1.0\n  seed: 7\n"
                                 "pipeline:\n  stages: 3\n  schedule: 1f1b\n  microbatches: 4\n  devices: auto\n"
                                 "  intra_op_threads: 1\n  pace_ms: 4\n"
                                 "supervision: {max_restarts: 2, heartbeat_timeout_s: 2" + supervision + "}\n");
}

TEST(EtcdRecord, ARunKeepsItsRecordThereAndEndsBitwiseThoughAMemberIsKilled) {
  REQUIRE_ETCD();
  testing_util::spread_cluster spread(test_dir() / "cluster", "10.234");
  etcd_cluster& cluster = *spread;
  ASSERT_TRUE(cluster.ok()) << cluster.why();
  const std::string cfg = config("recorded");
  const std::string clean = (test_dir() / "clean.pt").string(), saved = (test_dir() / "saved.pt").string();
  auto a = actorpipe({"train", cfg, "--quiet", "--save", clean});
  ASSERT_EQ(a.code, 0) << describe(a);
  testing_util::background_launch run(
      ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
      {"--nprocs", "3", "--coordinator", cluster.url(), "--run-id", "recorded", cfg, "--save", saved});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step    10/")) << run.output();
  etcd_client c(cluster.endpoints());
  const auto holder = c.get(run_key("recorded", "coordinator"));
  ASSERT_TRUE(holder.has_value()) << run.output();
  EXPECT_NE(holder->find(" pid " + std::to_string(run.coordinator())), std::string::npos) << *holder;
  cluster.kill(0);  // the member the coordinator asks first
  ASSERT_EQ(run.wait(120), 0) << run.output();
  const std::string out = run.output();
  EXPECT_EQ(out.find("lost its lease"), std::string::npos) << "the run noticed the member's loss\n" << out;
  EXPECT_EQ(out.find("error"), std::string::npos) << "the run noticed the member's loss\n" << out;
  EXPECT_TRUE(testing_util::read_or_empty(clean) == testing_util::read_or_empty(saved)) << out;
  // The record outlives the run, finished; the name is free again.
  const auto text = c.get(run_key("recorded", "record"));
  ASSERT_TRUE(text.has_value());
  const auto record = nlohmann::json::parse(*text);
  std::printf("record: %s\n", text->c_str());
  EXPECT_EQ(record.at("decided").get<int64_t>(), 39) << *text;
  EXPECT_TRUE(record.at("finished").get<bool>()) << *text;
  EXPECT_EQ(record.value("exit_code", -1), 0) << *text;
  EXPECT_EQ(record.at("generation").get<int>(), 0) << *text;
  EXPECT_EQ(record.at("placement").get<std::string>(), "- | 0 | 1 | 2") << *text;
  EXPECT_EQ(record.at("members").get<std::string>(), "c 0 1 2") << *text;
  EXPECT_EQ(c.get(run_key("recorded", "coordinator")), std::nullopt);
}

// The member that leads the cluster now (etcdctl's endpoint status), -1
// when none says so.
int leader_of(const etcd_cluster& cluster) {
  std::string all;
  for (const auto& e : cluster.endpoints()) all += (all.empty() ? "" : ",") + e.text();
  testing_util::child_limits limits;
  limits.timeout_s = 20;
  const auto r = testing_util::run_child("/usr/bin/etcdctl", {"--endpoints", all, "endpoint", "status", "-w", "json"},
                                         limits);
  if (r.code != 0) return -1;
  const auto found = nlohmann::json::parse(r.out, nullptr, false);
  if (!found.is_array()) return -1;
  const auto eps = cluster.endpoints();
  for (const auto& m : found) {
    const auto& st = m.at("Status");
    if (st.at("header").at("member_id") != st.at("leader")) continue;
    for (size_t i = 0; i < eps.size(); ++i)
      if (m.at("Endpoint").get<std::string>() == eps[i].text()) return static_cast<int>(i);
  }
  return -1;
}

// The leader killed as the run ends: etcd elects another (a second or
// so), and the run's last record (finished, its last step) waits for it.
// The coordinator closes its record before its process may leave without
// running destructors, and a last write that fails is tried again while
// etcd keeps the lease, or said on stderr (it was dropped silently: once
// in CI, member 0, the leader, killed after step 10, the record stayed at
// step 8 of 40, unfinished).
TEST(EtcdRecord, TheLeaderKilledAsTheRunEndsStillGetsTheRunsEnd) {
  REQUIRE_ETCD();
  testing_util::spread_cluster spread(test_dir() / "cluster", "10.236");
  etcd_cluster& cluster = *spread;
  ASSERT_TRUE(cluster.ok()) << cluster.why();
  const std::string cfg = config("ending", 30);
  testing_util::background_launch run(ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
                                      {"--nprocs", "3", "--coordinator", cluster.url(), "--run-id", "ending", cfg});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step    27/")) << run.output();
  const int leader = leader_of(cluster);
  ASSERT_GE(leader, 0) << "etcdctl named no leader";
  cluster.kill(leader);
  const auto killed = clock_type::now();
  ASSERT_EQ(run.wait(120), 0) << run.output();
  const double took = std::chrono::duration<double>(clock_type::now() - killed).count();
  const std::string out = run.output();
  EXPECT_EQ(out.find("not written"), std::string::npos) << out;
  etcd_client c(cluster.endpoints());
  const auto text = c.get(run_key("ending", "record"));
  ASSERT_TRUE(text.has_value()) << out;
  std::printf("leader (member %d) killed after step 27 of 30: the run ended %.2f s later; record: %s\n", leader, took,
              text->c_str());
  const auto record = nlohmann::json::parse(*text);
  EXPECT_EQ(record.at("decided").get<int64_t>(), 29) << *text;
  EXPECT_TRUE(record.at("finished").get<bool>()) << *text;
  EXPECT_EQ(record.value("exit_code", -1), 0) << *text;
  EXPECT_EQ(c.get(run_key("ending", "coordinator")), std::nullopt);
}

TEST(EtcdRecord, ARunNameHeldNothingListeningAndNoMajorityAreOneLineWithExit2) {
  REQUIRE_ETCD();
  const std::string cfg = config("refused");
  // Nothing listens there.
  const std::string nowhere = "127.0.0.1:" + std::to_string(free_port("127.0.0.1"));
  auto r = actorpipe({"launch", "--nprocs", "3", "--coordinator", "etcd://" + nowhere, cfg});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_EQ(r.err, "actorpipe: --coordinator: no etcd member answered at " + nowhere + " (" + nowhere +
                       ": Connection refused)\n")
      << describe(r);
  testing_util::spread_cluster spread(test_dir() / "cluster", "10.234");
  etcd_cluster& cluster = *spread;
  ASSERT_TRUE(cluster.ok()) << cluster.why();
  // A live coordinator holds the name (a lease kept alive by this test).
  etcd_client c(cluster.endpoints());
  const int64_t lease = c.grant(30);
  ASSERT_TRUE(c.create(run_key("refused", "coordinator"), "10.0.0.9:29500 pid 77", lease));
  r = actorpipe({"launch", "--nprocs", "3", "--coordinator", cluster.url(), cfg});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_EQ(r.err, "actorpipe: run 'refused' is held by a live coordinator (10.0.0.9:29500 pid 77) in etcd at " +
                       cluster.url().substr(7) + ": give this run another --run-id, or wait until that one ends\n")
      << describe(r);
  // Node 1 of 3 starts no coordinator: refused where the holder is not
  // its master; where it is, that is its own run's (node 0 took the name
  // first), and its workers go on to that master (none there: exit 1 once
  // they cannot reach it within connect_timeout_s).
  const std::vector<std::string> node1 = {"launch", "--nnodes", "3", "--node-rank", "1", "--nprocs", "1",
                                          "--coordinator", cluster.url(), "--master-addr", "10.0.0.9"};
  auto with = [&](std::vector<std::string> args, const std::vector<std::string>& more) {
    args.insert(args.end(), more.begin(), more.end());
    return args;
  };
  r = actorpipe(with(node1, {"--master-port", "29501", cfg}));
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_NE(r.err.find("is held by a live coordinator (10.0.0.9:29500 pid 77)"), std::string::npos) << describe(r);
  const std::string near = config("refused_node1", 40, ", connect_timeout_s: 1");
  r = actorpipe(with(node1, {"--master-port", "29500", near}));
  EXPECT_EQ(r.code, 1) << describe(r);
  EXPECT_EQ(r.err.find("is held by a live coordinator"), std::string::npos) << describe(r);
  EXPECT_NE(r.err.find("10.0.0.9:29500"), std::string::npos) << describe(r);
  c.revoke(lease);
  // Two of three members gone: no majority.
  cluster.kill(1);
  cluster.kill(2);
  const auto t0 = clock_type::now();
  r = actorpipe({"launch", "--nprocs", "3", "--coordinator", cluster.url(), cfg});
  EXPECT_EQ(r.code, 2) << describe(r);
  EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << describe(r);
  EXPECT_NE(r.err.find("(no majority of its members?)"), std::string::npos) << describe(r);
  EXPECT_LT(std::chrono::duration<double>(clock_type::now() - t0).count(), 15.0) << describe(r);
  EXPECT_EQ(r.out, "");
}

TEST(EtcdRecord, ACoordinatorCutOffFromEtcdStopsByItself) {
  REQUIRE_ETCD();
  testing_util::spread_cluster spread(test_dir() / "cluster", "10.234");
  etcd_cluster& cluster = *spread;
  ASSERT_TRUE(cluster.ok()) << cluster.why();
  const std::string cfg = config("cut", 400);  // about 20 s: it ends only if it goes on alone
  testing_util::background_launch run(ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
                                      {"--nprocs", "3", "--coordinator", cluster.url(), cfg});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step    10/")) << run.output();
  cluster.kill(1);
  cluster.kill(2);
  const auto cut = clock_type::now();
  EXPECT_EQ(run.wait(60), 5) << run.output();
  const double took = std::chrono::duration<double>(clock_type::now() - cut).count();
  const std::string out = run.output();
  std::printf("the cut-off coordinator stopped and the run ended %.2f s after etcd lost its majority\n", took);
  EXPECT_NE(out.find("actorpipe: error: the coordinator lost its lease in etcd at "), std::string::npos) << out;
  EXPECT_NE(out.find("): it stops commanding; every worker stops by itself (exit 5)"), std::string::npos) << out;
  EXPECT_EQ(out.find("step   400/400"), std::string::npos) << "the run went on without its lease\n" << out;
  // The lease (2 s), the client's timeout (3 s), and stopping the workers.
  EXPECT_LT(took, 2 + 3 + 5.0) << out;
}

// The Takeover tests' scene: the etcd cluster, one member in each of 3
// network namespaces where they can be made, and the run nobody hit.
class Takeover : public ::testing::Test {
protected:
  void SetUp() override {
    REQUIRE_ETCD();
    spread_ = std::make_unique<testing_util::spread_cluster>(test_dir() / "cluster", "10.234");
    ASSERT_TRUE(cluster().ok()) << cluster().why();
  }
  etcd_cluster& cluster() { return **spread_; }
  /// `cfg` trained in one process, nobody hit: its weights at `clean`.
  void train_clean(const std::string& cfg) {
    auto a = actorpipe({"train", cfg, "--quiet", "--save", clean});
    ASSERT_EQ(a.code, 0) << describe(a);
  }
  void take_over_while_forming(const std::string& run_id, int signal);
  void take_over_a_generation_in_doubt(const std::string& run_id, const char* hold,
                                       std::chrono::milliseconds kill_after, int taken, const std::string& answered);

  const std::string clean = (test_dir() / "clean.pt").string(), saved = (test_dir() / "saved.pt").string();

private:
  std::unique_ptr<testing_util::spread_cluster> spread_;
};

// The step numbers of the lines "step    N/M" in `text` from `from` on.
std::vector<int> steps_printed(const std::string& text, size_t from = 0) {
  std::vector<int> out;
  for (size_t at = text.find("\nstep ", from); at != std::string::npos; at = text.find("\nstep ", at + 1))
    out.push_back(std::atoi(text.c_str() + at + 6));
  return out;
}

// Whether the run's record in etcd names generation `gen` within `limit`.
bool record_names_generation(etcd_client& c, const std::string& run, int gen, std::chrono::milliseconds limit) {
  const auto until = std::chrono::steady_clock::now() + limit;
  do {
    if (const auto text = c.get(run_key(run, "record"))) {
      const auto record = nlohmann::json::parse(*text, nullptr, false);
      if (record.is_object() && record.value("generation", -1) == gen) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  } while (std::chrono::steady_clock::now() < until);
  return false;
}

// The number after `prefix` in the first line of `text` that has it, -1
// when none has.
int number_after(const std::string& text, const std::string& prefix) {
  const size_t at = text.find(prefix);
  return at == std::string::npos ? -1 : std::atoi(text.c_str() + at + prefix.size());
}

// What a takeover must show: the run ended bitwise equal to the clean
// one; the workers waited; the new coordinator's line; after it, the steps
// from the boundary it rolled to up to the end, each once (none lost, none
// applied twice); and the record in etcd: takeover 1 of generation 1,
// finished.
void expect_taken_over(const std::string& out, const std::string& clean, const std::string& saved,
                       etcd_client& c, const std::string& run) {
  EXPECT_TRUE(testing_util::read_or_empty(clean) == testing_util::read_or_empty(saved)) << out;
  EXPECT_NE(out.find("its stages stopped, its boundary memory kept; waiting up to "), std::string::npos) << out;
  const size_t line = out.find("\ntakeover 1: generation 1 runs from after step ");
  ASSERT_NE(line, std::string::npos) << out;
  std::printf("%s\n", out.substr(line + 1, out.find('\n', line + 1) - line - 1).c_str());
  const int after = std::atoi(out.c_str() + line + std::strlen("\ntakeover 1: generation 1 runs from after step "));
  EXPECT_GE(after, 9) << out;  // the workers' memory, not the start
  std::vector<int> want;  // steps count from 0 inside, from 1 on the lines
  for (int s = after + 2; s <= 40; ++s) want.push_back(s);
  EXPECT_EQ(steps_printed(out, line), want) << out;
  EXPECT_NE(out.find("healed from memory"), std::string::npos) << out;
  const auto text = c.get(run_key(run, "record"));
  ASSERT_TRUE(text.has_value());
  const auto record = nlohmann::json::parse(*text);
  EXPECT_EQ(record.at("generation").get<int>(), 1) << *text;
  EXPECT_TRUE(record.at("finished").get<bool>()) << *text;
  EXPECT_EQ(nlohmann::json::parse(record.at("takeover").get<std::string>()).at("epoch").get<int>(), 1) << *text;
  EXPECT_EQ(c.get(run_key(run, "coordinator")), std::nullopt);
}

TEST_F(Takeover, AKillNineOfTheCoordinatorMidStepIsTakenOverByTheStandbyBitwiseAtPp3) {
  const std::string cfg = config("killed");
  ASSERT_NO_FATAL_FAILURE(train_clean(cfg));
  testing_util::background_launch run(
      ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
      {"--nprocs", "3", "--coordinator", cluster().url(), "--run-id", "killed", cfg, "--save", saved});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step    10/")) << run.output();
  const pid_t coordinator = run.coordinator();
  ASSERT_GT(coordinator, 0) << run.output();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // mid-step (about 50 ms a step)
  ::kill(coordinator, SIGKILL);
  ASSERT_EQ(run.wait(120), 0) << run.output();
  const std::string out = run.output();
  EXPECT_NE(out.find("the coordinator (pid " + std::to_string(coordinator) +
                     ") was killed by SIGKILL: the run lost its coordinator; the standby here takes the run over"),
            std::string::npos)
      << out;
  etcd_client c(cluster().endpoints());
  expect_taken_over(out, clean, saved, c, "killed");
}

// The coordinator killed (or stopped) while a generation forms: a heal
// over the workers left after RANK 1's kill -9, every worker held 2.5 s
// before the rendezvous. The workers go back to the generation before,
// which the record names, and the standby takes that over from their
// memory. A stopped coordinator's store answers nothing: each worker's
// watch cuts its connections to it after supervision.heartbeat_timeout_s.
void Takeover::take_over_while_forming(const std::string& run_id, int signal) {
  const std::string cfg = config(run_id, 40, ", replace_timeout_s: 0");
  ASSERT_NO_FATAL_FAILURE(train_clean(cfg));
  testing_util::forming_held hold(2500);
  testing_util::background_launch run(
      ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
      {"--nprocs", "3", "--coordinator", cluster().url(), "--run-id", run_id, cfg, "--save", saved});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step    10/")) << run.output();
  const pid_t coordinator = run.coordinator(), victim = run.worker(1, std::chrono::milliseconds(0));
  ASSERT_GT(coordinator, 0) << run.output();
  ASSERT_GT(victim, 0) << run.output();
  ::kill(victim, SIGKILL);
  const bool replaced = run.wait_for_output("re-placed: generation 1 goes on over 2 processes without rank 1");
  // Rank 0 says the line before it tells the workers: a kill at once may
  // land before they hear of generation 1 at all (they lose it in
  // generation 0, as in the tests above). Half a second of the 2.5 s hold
  // lets them read the plan and enter the held rendezvous.
  if (replaced) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  ::kill(coordinator, signal);
  const int code = replaced ? run.wait(120) : -2;
  ::kill(coordinator, SIGKILL);  // in every path
  ASSERT_TRUE(replaced) << run.output();
  ASSERT_EQ(code, 0) << run.output();
  const std::string out = run.output();
  // The workers lost it as they formed the generation, or (a signal that
  // lands as they still read its plan) a step before: either way they
  // went back to generation 0 and waited.
  EXPECT_TRUE(out.find(", while generation 1 formed); its stages stopped, its boundary memory kept") !=
                  std::string::npos ||
              out.find("(its store gave no plan for generation 1: ") != std::string::npos)
      << out;
  EXPECT_EQ(out.find("error"), std::string::npos) << out;
  etcd_client c(cluster().endpoints());
  expect_taken_over(out, clean, saved, c, run_id);
}

TEST_F(Takeover, ACoordinatorKilledWhileAGenerationFormsIsTakenOverBitwise) {
  take_over_while_forming("forming", SIGKILL);
}

TEST_F(Takeover, ACoordinatorStoppedWhileAGenerationFormsIsTakenOverBitwise) {
  take_over_while_forming("forming-stopped", SIGSTOP);
}

// RANK 1 killed for good at pp 3 on 3 workers (replace_timeout_s 0),
// then the coordinator `kill_after` past rank 0's line that generation 1
// runs, with `hold` (a test hold's variable, 2.5 s) set for every process
// of the run: the run ends with exit 0, each worker takes generation
// `taken`'s place, `answered` workers answer takeover 1, and after its line
// every step runs once, bitwise.
void Takeover::take_over_a_generation_in_doubt(const std::string& run_id, const char* hold,
                                                std::chrono::milliseconds kill_after, int taken,
                                                const std::string& answered) {
  const std::string cfg = config(run_id, 40, ", replace_timeout_s: 0");
  ASSERT_NO_FATAL_FAILURE(train_clean(cfg));
  ::setenv(hold, "2500", 1);
  testing_util::background_launch run(
      ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
      {"--nprocs", "3", "--coordinator", cluster().url(), "--run-id", run_id, cfg, "--save", saved});
  ::unsetenv(hold);
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step    10/")) << run.output();
  const pid_t coordinator = run.coordinator(), victim = run.worker(1, std::chrono::milliseconds(0));
  ASSERT_GT(coordinator, 0) << run.output();
  ASSERT_GT(victim, 0) << run.output();
  ::kill(victim, SIGKILL);
  const bool formed = run.wait_for_output("heal: generation 1 runs from after step");
  // Rank 0 says the line before it writes the record: where the test is
  // of a generation the record names, it waits for the record (well
  // inside the workers' hold), so that a loaded machine's kill does not
  // land between the two.
  etcd_client c(cluster().endpoints());
  const bool recorded = formed && (taken == 0 || record_names_generation(c, run_id, 1, std::chrono::seconds(2)));
  if (formed) std::this_thread::sleep_for(kill_after);
  ::kill(coordinator, SIGKILL);
  ASSERT_TRUE(formed) << run.output();
  ASSERT_TRUE(recorded) << "the record did not name generation 1 within 2 s of its line\n" << run.output();
  ASSERT_EQ(run.wait(120), 0) << run.output();
  const std::string out = run.output();
  const std::string other = taken == 1 ? "0" : "1";
  EXPECT_NE(out.find("rank 0/3: the takeover is of generation " + std::to_string(taken) + ", not " + other +
                     ": it takes that generation's place"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("heal: the coordinator was lost; takeover 1 of generation " + std::to_string(taken) + " (" +
                     answered + " workers answered"),
            std::string::npos)
      << out;
  EXPECT_EQ(out.find("error"), std::string::npos) << out;
  const size_t line = out.find("\ntakeover 1: generation ");
  ASSERT_NE(line, std::string::npos) << out;
  const size_t after_at = out.find("runs from after step ", line);
  ASSERT_NE(after_at, std::string::npos) << out;
  const int after = std::atoi(out.c_str() + after_at + std::strlen("runs from after step "));
  std::vector<int> want;
  for (int s = after + 2; s <= 40; ++s) want.push_back(s);
  EXPECT_EQ(steps_printed(out, line), want) << out;
  EXPECT_TRUE(testing_util::read_or_empty(clean) == testing_util::read_or_empty(saved)) << out;
}

// The coordinator killed after it formed a generation and wrote it in its
// record, before the workers heard its word (each held 2.5 s before it
// reads it, ACTORPIPE_TEST_HOLD_FORMED_MS): they lose the coordinator
// while the generation forms and go back to the generation before, but the
// record names the new one. The takeover names it, and each worker takes
// its place in it again. Before, the workers went into the takeover's
// rendezvous with the world of the generation before and the run stopped.
TEST_F(Takeover, AWorkerThatHadNotHeardItsGenerationFormedTakesItsPlaceInTheTakeover) {
  take_over_a_generation_in_doubt("unheard", "ACTORPIPE_TEST_HOLD_FORMED_MS", std::chrono::milliseconds(0), 1,
                                  "2 of 2");
  EXPECT_NE(testing_util::read_or_empty(test_dir() / "launch.out")
                .find(", while generation 1 formed); its stages stopped, its boundary memory kept"),
            std::string::npos);
}

// The other way round: the coordinator killed after the generation formed
// but before its record named it (it holds 2.5 s there,
// ACTORPIPE_TEST_HOLD_RECORD_MS; killed a second in, once every worker
// read its word). The record names the generation before, which still
// counts the killed RANK 1; the takeover names it, each worker takes its
// place in it again, and the takeover goes on without RANK 1 as the lost
// coordinator had. (Here the takeover's plan names its members, which
// would set each worker's rank and world anyway: without the swap the run
// also ends bitwise, and only the line is missing. The swap matters where
// a plan keeps the same processes, as in the test above.)
TEST_F(Takeover, AGenerationFormedButNotYetInTheRecordIsTakenOverFromTheOneBefore) {
  take_over_a_generation_in_doubt("unrecorded", "ACTORPIPE_TEST_HOLD_RECORD_MS", std::chrono::milliseconds(1000), 0,
                                  "2 of 3");
}

// A coordinator that stops answering (SIGSTOP: as one cut off, it renews
// no lease) loses the run when its lease expires; the launcher, seeing the
// name gone, kills it and the standby takes over.
TEST_F(Takeover, AStoppedCoordinatorLosesItsLeaseAndIsTakenOverBitwiseAtDp2Pp2) {
  const std::string cfg = testing_util::write(
      test_dir() / "stopped.yaml",
      testing_util::deep_mlp_healing_config(2, 2, 2, (test_dir() / "ckpt").string()));
  ASSERT_NO_FATAL_FAILURE(train_clean(cfg));
  fs::remove_all(test_dir() / "ckpt");
  testing_util::background_launch run(
      ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
      {"--nprocs", "4", "--coordinator", cluster().url(), "--run-id", "stopped", cfg, "--save", saved});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step    10/")) << run.output();
  const pid_t coordinator = run.coordinator();
  ASSERT_GT(coordinator, 0) << run.output();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ::kill(coordinator, SIGSTOP);
  const int code = run.wait(120);
  ::kill(coordinator, SIGKILL);  // in every path
  ASSERT_EQ(code, 0) << run.output();
  const std::string out = run.output();
  EXPECT_NE(out.find("the coordinator (pid " + std::to_string(coordinator) +
                     ") lost its lease in etcd (stopped, hung or cut off): killed it"),
            std::string::npos)
      << out;
  etcd_client c(cluster().endpoints());
  expect_taken_over(out, clean, saved, c, "stopped");
}

// Node 0's host lost whole (its launcher, the coordinator and its two
// workers, replica 0, all SIGKILLed) under `launch --nnodes 2`: node 1's
// standby takes the run over a second after the lease expires, and its
// launcher starts node 0's two workers again on node 1 (as node 0's does
// for another node's ranks; supervision.replace_timeout_s unset), their
// stages from replica 1's memory. Node 1's file is bitwise the clean one.
TEST_F(Takeover, ACoordinatorsHostLostWholeIsTakenOverOnNode1WhichStartsItsWorkersAgainBitwise) {
  const std::string cfg = testing_util::write(
      test_dir() / "host.yaml", testing_util::deep_mlp_healing_config(2, 2, 2, (test_dir() / "ckpt").string()));
  ASSERT_NO_FATAL_FAILURE(train_clean(cfg));
  fs::remove_all(test_dir() / "ckpt");
  const std::string port = std::to_string(free_port("127.0.0.1"));
  auto node = [&](int k) {
    return std::vector<std::string>{"--nnodes", "2", "--node-rank", std::to_string(k), "--nprocs", "2",
                                    "--master-addr", "127.0.0.1", "--master-port", port, "--coordinator",
                                    cluster().url(), "--run-id", "host-lost", cfg, "--save", saved};
  };
  testing_util::background_launch node0(ACTORPIPE_BIN, (test_dir() / "node0.out").string(), node(0));
  testing_util::background_launch node1(ACTORPIPE_BIN, (test_dir() / "node1.out").string(), node(1));
  ASSERT_TRUE(node0.started() && node1.started());
  ASSERT_TRUE(node0.wait_for_output("step    10/")) << node0.output() << node1.output();
  // The host goes: its launcher first (it must not react), then every
  // process it started.
  ::kill(node0.pid(), SIGSTOP);
  const std::vector<pid_t> on_node0 = node0.workers();
  EXPECT_EQ(on_node0.size(), 3u) << node0.output();
  for (pid_t p : on_node0) ::kill(p, SIGKILL);
  ::kill(node0.pid(), SIGKILL);
  ASSERT_EQ(node1.wait(120), 0) << node1.output();
  const std::string out = node1.output();
  EXPECT_NE(out.find("lost its lease in etcd (stopped, hung or cut off); the standby here takes the run over"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("started worker rank 0 again on this node, in place of node 0's"), std::string::npos) << out;
  EXPECT_NE(out.find("started worker rank 1 again on this node, in place of node 0's"), std::string::npos) << out;
  etcd_client c(cluster().endpoints());
  expect_taken_over(out, clean, saved, c, "host-lost");
}

// Joining a run that was taken over: pp 3 on 3 workers loses RANK 1 for
// good (replace_timeout_s 0) and goes on over 2; the coordinator is killed
// and taken over; `launch --join etcd://... --run-id` finds the new one in
// the record, and its process takes a stage; the coordinator is killed
// again, and the second takeover takes the joined process over with the
// others. Every step once, bitwise.
TEST_F(Takeover, AProcessJoinsThroughEtcdAfterATakeoverAndIsTakenOverTooBitwise) {
  const int steps = 160;
  const std::string cfg = config("joined", steps, ", replace_timeout_s: 0");
  ASSERT_NO_FATAL_FAILURE(train_clean(cfg));
  testing_util::background_launch run(
      ACTORPIPE_BIN, (test_dir() / "launch.out").string(),
      {"--nprocs", "3", "--coordinator", cluster().url(), "--run-id", "joined", cfg, "--save", saved});
  ASSERT_TRUE(run.started());
  ASSERT_TRUE(run.wait_for_output("step    10/")) << run.output();
  const pid_t victim = run.worker(1, std::chrono::milliseconds(0));
  ASSERT_GT(victim, 0) << run.output();
  ::kill(victim, SIGKILL);
  ASSERT_TRUE(run.wait_for_output("heal: generation 1 runs from after step")) << run.output();
  pid_t coordinator = run.coordinator();
  ASSERT_GT(coordinator, 0) << run.output();
  ::kill(coordinator, SIGKILL);
  // The heal's line comes before its record: the takeover is of
  // generation 1, or of 0 where the kill landed between the two. Either
  // way the numbers go on from the one it ran.
  ASSERT_TRUE(run.wait_for_output("\ntakeover 1: generation ")) << run.output();
  const int taken = number_after(run.output(), "\ntakeover 1: generation ");
  ASSERT_TRUE(taken == 1 || taken == 2) << run.output();
  const std::string joined = std::to_string(taken + 1), retaken = std::to_string(taken + 2);
  testing_util::background_launch joiner(ACTORPIPE_BIN, (test_dir() / "join.out").string(),
                                         {"--join", cluster().url(), "--run-id", "joined", cfg});
  ASSERT_TRUE(joiner.started());
  ASSERT_TRUE(run.wait_for_output("re-placed: generation " + joined + " takes in rank 3 (joined)"))
      << run.output() << joiner.output();
  ASSERT_TRUE(run.wait_for_output("heal: generation " + joined + " runs from after step")) << run.output();
  // The joined process is taken over too once the record names its
  // generation (written just after that line).
  etcd_client c(cluster().endpoints());
  ASSERT_TRUE(record_names_generation(c, "joined", taken + 1, std::chrono::seconds(10))) << run.output();
  // Forked from the launcher, the new coordinator's /proc environ is the
  // launcher's: its pid is the one the launcher's line names.
  const std::string started = "started a coordinator to take the run over (pid ";
  const std::string before = run.output();
  ASSERT_NE(before.find(started), std::string::npos) << before;
  coordinator = std::atoi(before.c_str() + before.find(started) + started.size());
  ASSERT_GT(coordinator, 0) << before;
  ::kill(coordinator, SIGKILL);
  ASSERT_EQ(run.wait(180), 0) << run.output() << joiner.output();
  EXPECT_EQ(joiner.wait(60), 0) << joiner.output();
  const std::string out = run.output();
  const std::string second_line = "\ntakeover 2: generation " + retaken + " runs from after step ";
  const size_t second = out.find(second_line);
  ASSERT_NE(second, std::string::npos) << out;
  std::printf("%s\n", out.substr(second + 1, out.find('\n', second + 1) - second - 1).c_str());
  EXPECT_NE(out.find("takeover 2 of generation " + joined + " (3 of 3 workers answered"), std::string::npos) << out;
  EXPECT_NE(joiner.output().find(": taken over by the coordinator at "), std::string::npos) << joiner.output();
  const int after = std::atoi(out.c_str() + second + second_line.size());
  std::vector<int> want;
  for (int s = after + 2; s <= steps; ++s) want.push_back(s);
  EXPECT_EQ(steps_printed(out, second), want) << out;
  EXPECT_TRUE(testing_util::read_or_empty(clean) == testing_util::read_or_empty(saved)) << out;
}

}  // namespace
}  // namespace actorpipe
