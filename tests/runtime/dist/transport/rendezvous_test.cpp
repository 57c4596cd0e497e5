// runtime/dist/transport/rendezvous: ranks as real processes. The test binary
// re-executes itself (/proc/self/exe): a static initializer sees
// ACTORPIPE_RDV_CHILD, runs one rank's rendezvous, prints what came of it
// and exits before GoogleTest starts. The parent only spawns, reads the
// children's output (bounded) and asserts on it; no fixed ports, no timing.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/dist/transport/rendezvous.hpp"
#include "runtime/dist/transport/net_address.hpp"
#include "tests/child_process.hpp"

using namespace actorpipe;
using actorpipe::test_support::child_process;
using actorpipe::test_support::env_or;
using actorpipe::test_support::say;

namespace {

// ---- the children's side ----------------------------------------------------

// Exit codes as the apps would give them: 2 for a config_error, 1 for any
// other error; 0 with the endpoints printed on success.
int run_child() {
  rendezvous_options o;
  o.rank = std::stoi(env_or("ACTORPIPE_RDV_RANK", "0"));
  o.world_size = std::stoi(env_or("ACTORPIPE_RDV_WORLD", "3"));
  o.hosts_store = o.rank == 0;
  o.master_port = static_cast<uint16_t>(std::stoi(env_or("ACTORPIPE_RDV_PORT", "0")));
  o.timeout = std::chrono::milliseconds(std::stoi(env_or("ACTORPIPE_RDV_TIMEOUT_MS", "20000")));
  o.store_prefix = "/worker/attempt_0";
  o.endpoint = "host" + std::to_string(o.rank) + ":" + std::to_string(4000 + o.rank);
  o.config_digest = env_or("ACTORPIPE_RDV_DIGEST", "cd34cd34cd34cd34cd34");
  o.on_store_listening = [](uint16_t port) { say("PORT " + std::to_string(port) + " PORT_END"); };
  try {
    auto r = rendezvous(o);
    std::string line = "ENDPOINTS";
    for (const auto& e : r.endpoints) line += " " + e;
    say(line);
    return 0;
  } catch (const rendezvous_mismatch_error& e) {
    say(std::string("MISMATCH: ") + e.what());
  } catch (const config_error& e) {
    say(std::string("OTHER CONFIG ERROR: ") + e.what());
  } catch (const rendezvous_error& e) {
    say(std::string("RDV ERROR: ") + e.what());
    return 1;
  } catch (const std::exception& e) {
    say(std::string("OTHER ERROR: ") + e.what());
    return 1;
  }
  return 2;
}

// Runs before GoogleTest's main in a child, and exits there.
const bool child_ran = [] {
  if (!std::getenv("ACTORPIPE_RDV_CHILD")) return false;
  int code = run_child();
  std::fflush(nullptr);
  std::_Exit(code);
}();

// ---- the parent's side ------------------------------------------------------

using clock_type = child_process::clock;

struct rank_spec {
  int world_size = 3;
  std::string digest = "cd34cd34cd34cd34cd34";
};

std::unique_ptr<child_process> start_rank(int rank, int port, const rank_spec& spec, int timeout_ms) {
  return std::make_unique<child_process>(std::map<std::string, std::string>{
      {"ACTORPIPE_RDV_CHILD", "1"},
      {"ACTORPIPE_RDV_RANK", std::to_string(rank)},
      {"ACTORPIPE_RDV_WORLD", std::to_string(spec.world_size)},
      {"ACTORPIPE_RDV_PORT", std::to_string(port)},
      {"ACTORPIPE_RDV_TIMEOUT_MS", std::to_string(timeout_ms)},
      {"ACTORPIPE_RDV_DIGEST", spec.digest}});
}

struct outcome {
  int code = -1;
  std::string out;
};

// Starts rank 0 (hosting the store on an ephemeral port), then the ranks in
// `others` (rank -> its spec) with the port it reported; returns each rank's
// exit code and output, in the order rank 0, then `others`.
std::vector<outcome> run_ranks(const rank_spec& spec0, const std::map<int, rank_spec>& others, int timeout_ms) {
  std::vector<std::unique_ptr<child_process>> ranks;
  ranks.push_back(start_rank(0, 0, spec0, timeout_ms));
  if (!ranks[0]->read_until("PORT_END", clock_type::now() + std::chrono::seconds(60)))
    throw std::runtime_error("rank 0 reported no port; its output:\n" + ranks[0]->output());
  int port = actorpipe::test_support::parse_port(ranks[0]->output());
  if (port <= 0) throw std::runtime_error("bad port line:\n" + ranks[0]->output());
  for (const auto& [rank, spec] : others) ranks.push_back(start_rank(rank, port, spec, timeout_ms));
  auto deadline = clock_type::now() + std::chrono::seconds(120);
  std::vector<outcome> out;
  for (auto& r : ranks) {
    outcome o;
    o.code = r->finish(deadline);
    o.out = r->output();
    out.push_back(o);
  }
  return out;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }


}  // namespace

TEST(Rendezvous, DescribesTimeoutsAsTheMessagesNameThem) {
  EXPECT_EQ(describe_timeout(std::chrono::milliseconds(2000)), "2 s");
  EXPECT_EQ(describe_timeout(std::chrono::milliseconds(1500)), "1.5 s");
  EXPECT_EQ(describe_timeout(std::chrono::milliseconds(250)), "250 ms");
}

TEST(Rendezvous, RefusesBadOptionsAndAWorldOfOneNeedsNoStore) {
  rendezvous_options o;
  o.world_size = 3;
  o.rank = 3;
  EXPECT_THROW(rendezvous(o), rendezvous_error);
  o.rank = 1;
  o.master_port = 0;  // does not host: needs the port
  EXPECT_THROW(rendezvous(o), rendezvous_error);
  o.hosts_store = true;  // only rank 0 hosts
  EXPECT_THROW(rendezvous(o), rendezvous_error);
  rendezvous_options one;
  one.endpoint = "solo:1";
  EXPECT_EQ(rendezvous(one).endpoints, std::vector<std::string>{"solo:1"});
}

TEST(Rendezvous, ThreeRanksEachGetEveryEndpointInRankOrder) {
  auto r = run_ranks({}, {{1, {}}, {2, {}}}, 20000);
  ASSERT_EQ(r.size(), 3u);
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i].code, 0) << "rank " << i << ":\n" << r[i].out;
    EXPECT_TRUE(has(r[i].out, "ENDPOINTS host0:4000 host1:4001 host2:4002\n")) << r[i].out;
  }
}

TEST(Rendezvous, ADigestMismatchOnRank2FailsEveryRankWithTheSameLine) {
  rank_spec odd;
  odd.digest = "ab12ab12ab12ab12ab12";
  auto r = run_ranks({}, {{1, {}}, {2, odd}}, 20000);
  ASSERT_EQ(r.size(), 3u);
  const std::string line =
      "MISMATCH: rank 2's config differs from rank 0's (digest 'ab12ab12ab12ab12...' (20 bytes) against "
      "'cd34cd34cd34cd34...' (20 bytes)): every rank must run the same config\n";
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i].code, 2) << "rank " << i << ":\n" << r[i].out;
    EXPECT_TRUE(has(r[i].out, line)) << r[i].out;
  }
}

TEST(Rendezvous, AWorldSizeMismatchNamesBothValues) {
  rank_spec four;
  four.world_size = 4;
  auto r = run_ranks({}, {{1, {}}, {2, four}}, 20000);
  ASSERT_EQ(r.size(), 3u);
  const std::string line =
      "MISMATCH: rank 2 sees WORLD_SIZE 4 but rank 0 sees 3: every rank must see the same world size\n";
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i].code, 2) << "rank " << i << ":\n" << r[i].out;
    EXPECT_TRUE(has(r[i].out, line)) << r[i].out;
  }
}

TEST(Rendezvous, ARankOutsideRank0sWorldIsNamed) {
  rank_spec four;
  four.world_size = 4;
  auto r = run_ranks({}, {{3, four}}, 3000);  // rank 0 sees 3 ranks; rank 1 and 2 never come
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].code, 2) << r[1].out;
  EXPECT_TRUE(has(r[1].out, "MISMATCH: rank 3 sees WORLD_SIZE 4 but rank 0 sees 3")) << r[1].out;
  // Rank 0 learns of it through the stray key, unless its own wait for
  // ranks 1 and 2 ended first; either way it fails.
  EXPECT_NE(r[0].code, 0) << r[0].out;
  EXPECT_TRUE(has(r[0].out, "MISMATCH: rank 3 sees WORLD_SIZE 4 but rank 0 sees 3") ||
              has(r[0].out, "RDV ERROR: ranks 1, 2 did not arrive within 3 s"))
      << r[0].out;
}

TEST(Rendezvous, Rank0WaitingForARankThatNeverStartsNamesIt) {
  auto r = run_ranks({}, {{1, {}}}, 2000);  // rank 2 never starts
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].code, 1) << r[0].out;
  EXPECT_TRUE(has(r[0].out, "RDV ERROR: rank 2 did not arrive within 2 s\n")) << r[0].out;
  // Rank 1 reads rank 0's verdict (or, were it late, times out itself).
  EXPECT_EQ(r[1].code, 1) << r[1].out;
  EXPECT_TRUE(has(r[1].out, "RDV ERROR: ")) << r[1].out;
}

TEST(Rendezvous, ARankWhoseMasterIsNotThereFailsAtItsTimeout) {
  int port = static_cast<int>(free_port("127.0.0.1"));
  ASSERT_GT(port, 0);
  auto rank1 = start_rank(1, port, {}, 2000);
  int code = rank1->finish(clock_type::now() + std::chrono::seconds(60));
  EXPECT_EQ(code, 1) << rank1->output();
  EXPECT_TRUE(has(rank1->output(), "RDV ERROR: cannot reach the master at 127.0.0.1:" + std::to_string(port) +
                                       " within 2 s (connection refused)\n"))
      << rank1->output();
}

TEST(Rendezvous, TwoProcessesWithTheSameRankAreRefusedNamingTheRank) {
  const rank_spec spec;
  auto rank0 = start_rank(0, 0, spec, 20000);
  ASSERT_TRUE(rank0->read_until("PORT_END", clock_type::now() + std::chrono::seconds(60))) << rank0->output();
  const int port = actorpipe::test_support::parse_port(rank0->output());
  ASSERT_GT(port, 0);
  auto first = start_rank(1, port, spec, 20000);
  auto second = start_rank(1, port, spec, 20000);
  // The later of the two fails at once; rank 2 comes only then, so rank 0's
  // verdict sees both claims.
  const auto until = clock_type::now() + std::chrono::seconds(60);
  bool one_failed = false;
  while (!one_failed && clock_type::now() < until)
    for (auto* c : {first.get(), second.get()})
      if (c->read_until("MISMATCH", clock_type::now() + std::chrono::milliseconds(50))) one_failed = true;
  ASSERT_TRUE(one_failed) << first->output() << second->output();
  auto rank2 = start_rank(2, port, spec, 20000);
  const auto deadline = clock_type::now() + std::chrono::seconds(120);
  const std::string line = "MISMATCH: RANK 1 was claimed by 2 processes";
  for (auto* c : {rank0.get(), first.get(), second.get(), rank2.get()}) {
    EXPECT_EQ(c->finish(deadline), 2) << c->output();
    EXPECT_TRUE(has(c->output(), line)) << c->output();
  }
}
