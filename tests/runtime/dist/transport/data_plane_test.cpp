// runtime/dist/transport/data_plane: two real processes (this binary
// re-executed, as in p2p_group_test) join a data plane through a store and
// exchange op records: over shared rings on one machine, over TCP with
// ACTORPIPE_SHM_DISABLE=1 or when /dev/shm is full (one notice), whole, in
// order, bit for bit, to the slot they name; a record held back lets later
// ones pass; a peer SIGKILLed in the middle of a record is seen as gone and
// nothing half-read is delivered.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <ATen/ATen.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/dist/transport/data_plane.hpp"
#include "runtime/dist/transport/rendezvous.hpp"
#include "runtime/dist/transport/shared_segments.hpp"
#include "tests/child_process.hpp"

using namespace actorpipe;
using actorpipe::test_support::child_process;
using actorpipe::test_support::env_or;
using actorpipe::test_support::say;
namespace fs = std::filesystem;

namespace {

using clock_type = std::chrono::steady_clock;

// ---- the children's side ----------------------------------------------------

// Record i of the exchange, the same on both ranks; slot 1 or 3, and the
// targets on every third.
op_record record_number(int i) {
  op_record r;
  r.kind = i % 2;
  r.to = i % 4 == 3 ? 3 : 1;
  r.from = 0;
  r.epoch = 2;
  r.step = 40 + i;
  r.mb = i;
  r.chunk = i % 2;
  r.round = i * 7;
  at::manual_seed(1000 + i);
  r.tensors.push_back(at::randn({8, 16 + 8 * i}));
  if (i % 3 == 0) r.tensors.push_back(at::randint(0, 10, {8}, at::kLong));
  if (i == 5) r.tensors.push_back(at::Tensor());
  return r;
}
constexpr int records = 12;
constexpr int held_back = 4;  // posted 300 ms late: the records after it pass it

bool same(const op_record& a, const op_record& b) {
  if (a.kind != b.kind || a.to != b.to || a.step != b.step || a.mb != b.mb || a.chunk != b.chunk ||
      a.round != b.round || a.epoch != b.epoch || a.tensors.size() != b.tensors.size())
    return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    if (a.tensors[i].defined() != b.tensors[i].defined()) return false;
    if (!a.tensors[i].defined()) continue;
    if (a.tensors[i].scalar_type() != b.tensors[i].scalar_type() || a.tensors[i].sizes() != b.tensors[i].sizes() ||
        std::memcmp(a.tensors[i].data_ptr(), b.tensors[i].data_ptr(), a.tensors[i].nbytes()) != 0)
      return false;
  }
  return true;
}

struct received {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<op_record> got;
  void add(op_record r) {
    std::lock_guard<std::mutex> l(mu);
    got.push_back(std::move(r));
    cv.notify_all();
  }
  bool wait_for(size_t n, std::chrono::seconds limit) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, limit, [&] { return got.size() >= n; });
  }
};

std::shared_ptr<data_plane> join(int rank, size_t ring_bytes, rendezvous_result& met) {
  rendezvous_options o;
  o.rank = rank;
  o.world_size = 2;
  o.hosts_store = rank == 0;
  o.master_port = static_cast<uint16_t>(std::stoi(env_or("ACTORPIPE_DP_PORT", "0")));
  o.timeout = std::chrono::milliseconds(20000);
  o.endpoint = "host:1";
  o.config_digest = "data-plane-test";
  o.on_store_listening = [](uint16_t port) { say("PORT " + std::to_string(port) + " PORT_END"); };
  met = rendezvous(o);
  data_plane_options p;
  p.rank = rank;
  p.peers = {1 - rank};
  p.store = met.store;
  p.prefix = o.store_prefix;
  p.host = "127.0.0.1";
  p.machine = machine_id();
  p.ring_stem = shm_dir() + "/" + segment_run_id() + ".dptest." + std::to_string(::getpid());
  p.ring_bytes = ring_bytes;
  p.timeout = std::chrono::milliseconds(20000);
  std::string notice;
  auto plane = data_plane::connect(p, &notice);
  if (!notice.empty()) say("NOTICE " + notice);
  say("WAY " + plane->way_to(1 - rank));
  return plane;
}

// Rank 0 posts every record (one held back); rank 1 attaches slot 1 at
// once and slot 3 only once slot 1's are in, checks them, and answers.
void scenario_exchange(int rank) {
  rendezvous_result met;
  auto plane = join(rank, 64 << 10, met);
  if (rank == 0) {
    for (int i = 0; i < records; ++i)
      plane->post(1, record_number(i), i == held_back ? clock_type::now() + std::chrono::milliseconds(300) : clock_type::time_point{});
    received answer;
    plane->attach(0, {[&](op_record r) { answer.add(std::move(r)); }, {}});
    say(answer.wait_for(1, std::chrono::seconds(30)) ? "ANSWERED" : "NO ANSWER");
    return;
  }
  received one, three;
  plane->attach(1, {[&](op_record r) { one.add(std::move(r)); }, {}});
  size_t on_one = 0;
  for (int i = 0; i < records; ++i) on_one += record_number(i).to == 1;
  if (!one.wait_for(on_one, std::chrono::seconds(30))) say("SLOT 1 SHORT");
  plane->attach(3, {[&](op_record r) { three.add(std::move(r)); }, {}});
  if (!three.wait_for(records - on_one, std::chrono::seconds(30))) say("SLOT 3 SHORT");
  int equal = 0;
  std::vector<int> order;
  for (auto* box : {&one, &three})
    for (const auto& r : box->got) {
      equal += same(r, record_number(r.mb));
      if (box == &one) order.push_back(r.mb);
    }
  say("EQUAL " + std::to_string(equal) + "/" + std::to_string(records));
  std::string o = "ORDER";
  for (int mb : order) o += " " + std::to_string(mb);
  say(o);
  op_record back;
  back.to = 0;
  plane->post(0, std::move(back));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
}

// Rank 1 posts a 256 MiB record through a 256 KiB ring and is SIGKILLed by
// the parent while it streams; rank 0 reports what it saw.
void scenario_killed(int rank) {
  rendezvous_result met;
  auto plane = join(rank, 256 << 10, met);
  if (rank == 1) {
    op_record big;
    big.to = 0;
    big.tensors.push_back(at::ones({64 << 20}));
    say("POSTING");
    plane->post(0, std::move(big));
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return;
  }
  std::atomic<int> delivered{0};
  plane->attach(0, {[&](op_record) { ++delivered; }, [](const std::string& why) { say("FAILED " + why); }});
  const auto start = clock_type::now();
  while (plane->gone().empty() && clock_type::now() - start < std::chrono::seconds(30))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  say("GONE " + std::to_string(plane->gone().size()) + " DELIVERED " + std::to_string(delivered.load()));
  const auto closing = clock_type::now();
  plane->close();
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - closing).count();
  say("CLOSED IN " + std::to_string(ms) + " MS");
}

const bool child_ran = [] {
  const char* scenario = std::getenv("ACTORPIPE_DP_CHILD");
  if (!scenario) return false;
  int code = 0;
  try {
    const int rank = std::stoi(env_or("ACTORPIPE_DP_RANK", "0"));
    if (std::string(scenario) == "exchange") scenario_exchange(rank);
    else if (std::string(scenario) == "killed") scenario_killed(rank);
    say("CHILD DONE");
  } catch (const std::exception& e) {
    say(std::string("CHILD FAILED: ") + e.what());
    code = 3;
  }
  std::fflush(nullptr);
  std::_Exit(code);
}();

// ---- the parent's side ------------------------------------------------------

struct pair_of_ranks {
  std::unique_ptr<child_process> rank0, rank1;
};

pair_of_ranks start(const std::string& scenario, std::map<std::string, std::string> extra = {}) {
  auto env = [&](int rank, int port) {
    auto e = extra;
    e["ACTORPIPE_DP_CHILD"] = scenario;
    e["ACTORPIPE_DP_RANK"] = std::to_string(rank);
    e["ACTORPIPE_DP_PORT"] = std::to_string(port);
    return e;
  };
  pair_of_ranks p;
  p.rank0 = std::make_unique<child_process>(env(0, 0));
  if (!p.rank0->read_until("PORT_END", clock_type::now() + std::chrono::seconds(60)))
    throw std::runtime_error("rank 0 reported no port:\n" + p.rank0->output());
  p.rank1 = std::make_unique<child_process>(env(1, actorpipe::test_support::parse_port(p.rank0->output())));
  return p;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void expect_exchange(const std::map<std::string, std::string>& env, const std::string& way) {
  auto p = start("exchange", env);
  const auto deadline = clock_type::now() + std::chrono::seconds(90);
  const int code1 = p.rank1->finish(deadline), code0 = p.rank0->finish(deadline);
  const std::string out0 = p.rank0->output(), out1 = p.rank1->output();
  EXPECT_EQ(code0, 0) << out0;
  EXPECT_EQ(code1, 0) << out1;
  EXPECT_TRUE(has(out0, "WAY " + way)) << out0;
  EXPECT_TRUE(has(out1, "WAY " + way)) << out1;
  EXPECT_TRUE(has(out1, "EQUAL 12/12")) << out1;
  // Slot 1's records in the order posted, but the held-back one (4), which
  // the later ones passed.
  EXPECT_TRUE(has(out1, "ORDER 0 1 2 5 6 8 9 10 4\n")) << out1;
  EXPECT_TRUE(has(out0, "ANSWERED")) << out0;
}

}  // namespace

TEST(DataPlane, RecordsCrossSharedRingsWholeInOrderToTheirSlots) { expect_exchange({}, "shared memory"); }

TEST(DataPlane, RecordsCrossTcpUnderShmDisable) { expect_exchange({{"ACTORPIPE_SHM_DISABLE", "1"}}, "tcp"); }

TEST(DataPlane, AFullShmGivesOneNoticeAndTcp) {
  // A 64 KiB tmpfs stands for a /dev/shm with no room for a ring.
  const fs::path dir = fs::temp_directory_path() / ("actorpipe_dp_full_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, "size=64k") != 0) {
    fs::remove(dir);
    GTEST_SKIP() << "cannot mount a small tmpfs here (" << std::strerror(errno) << "); needs root";
  }
  auto p = start("exchange", {{"ACTORPIPE_SHM_DIR", dir.string()}});
  const auto deadline = clock_type::now() + std::chrono::seconds(90);
  const int code1 = p.rank1->finish(deadline), code0 = p.rank0->finish(deadline);
  ::umount2(dir.c_str(), MNT_DETACH);
  fs::remove(dir);
  const std::string out0 = p.rank0->output(), out1 = p.rank1->output();
  EXPECT_EQ(code0, 0) << out0;
  EXPECT_EQ(code1, 0) << out1;
  for (const auto* out : {&out0, &out1}) {
    EXPECT_TRUE(has(*out, "WAY tcp")) << *out;
    EXPECT_TRUE(has(*out, "NOTICE no room for a shared ring of")) << *out;
    EXPECT_TRUE(has(*out, "; activations and gradients go over TCP instead")) << *out;
    const size_t first = out->find("NOTICE");
    EXPECT_EQ(out->find("NOTICE", first + 1), std::string::npos) << "one notice:\n" << *out;
  }
  EXPECT_TRUE(has(out1, "EQUAL 12/12")) << out1;
}

TEST(DataPlane, APeerKilledMidRecordIsGoneAndNothingHalfReadIsDelivered) {
  auto p = start("killed");
  ASSERT_TRUE(p.rank1->read_until("POSTING", clock_type::now() + std::chrono::seconds(60))) << p.rank1->output();
  p.rank1->kill_now();  // within a millisecond or so: 256 MiB take far longer to cross
  const int code0 = p.rank0->finish(clock_type::now() + std::chrono::seconds(60));
  const std::string out0 = p.rank0->output();
  EXPECT_EQ(code0, 0) << out0;
  EXPECT_TRUE(has(out0, "GONE 1 DELIVERED 0")) << out0;
  EXPECT_FALSE(has(out0, "FAILED")) << "a peer gone is supervision's to see:\n" << out0;
  // close() does not wait out a dead peer.
  const size_t at = out0.find("CLOSED IN ");
  ASSERT_NE(at, std::string::npos) << out0;
  EXPECT_LT(std::stoi(out0.substr(at + 10)), 2000) << out0;
}
