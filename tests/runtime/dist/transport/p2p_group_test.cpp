// runtime/dist/transport/p2p_group: tensors between two real processes over c10d
// Gloo. The test binary re-executes itself (/proc/self/exe) as the ranks: a
// static initializer sees ACTORPIPE_P2P_CHILD, runs that scenario's side of
// the exchange and exits before GoogleTest starts. The parent only spawns,
// reads the children's output (bounded) and asserts on it.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <filesystem>
#include <future>
#include <optional>

#include <unistd.h>

#include "messages/payloads.hpp"
#include "runtime/dist/transport/p2p_group.hpp"
#include "runtime/dist/transport/shared_segments.hpp"
#include "runtime/dist/transport/state_transfer.hpp"
#include "runtime/dist/transport/tensor_channel.hpp"
#include "tests/child_process.hpp"

using namespace actorpipe;
using actorpipe::test_support::child_process;
using actorpipe::test_support::env_or;
using actorpipe::test_support::say;
namespace fs = std::filesystem;

namespace {

// ---- the children's side ----------------------------------------------------

bool bitwise_equal(const at::Tensor& a, const at::Tensor& b) {
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) return false;
  auto ca = a.contiguous(), cb = b.contiguous();
  size_t n = static_cast<size_t>(ca.numel()) * ca.element_size();
  return n == 0 || std::memcmp(ca.data_ptr(), cb.data_ptr(), n) == 0;
}

// The tensors of the dtype scenario; both ranks build the same ones.
std::vector<at::Tensor> dtype_cases() {
  at::manual_seed(20261123);
  std::vector<at::Tensor> out;
  out.push_back(at::randn({2, 3, 5}));
  out.push_back(at::randn({4, 16, 8}).to(at::kBFloat16));  // [b, T, dim]
  out.push_back(at::randint(-(int64_t{1} << 40), int64_t{1} << 40, {7}, at::kLong));
  out.push_back(at::empty({0, 4}));                  // no bytes: header only
  out.push_back(at::randn({3, 8}).t());              // not contiguous: sent as a copy
  out.push_back(at::scalar_tensor(2.5, at::kDouble));  // 0-dim
  out.push_back(at::randn({3, 64, 32}));             // 24 KiB
  return out;
}

// Final handshake: rank 0 stays until rank 1 has everything.
void finish_both(p2p_group& g) {
  at::Tensor one = at::ones({1}, at::kLong);
  if (g.rank() == 1)
    g.send(one, 0, max_transfer_tag).wait();
  else
    g.recv_into(one, 1, max_transfer_tag).wait();
}

void scenario_dtypes(p2p_group& g) {
  auto cases = dtype_cases();
  if (g.rank() == 0) {
    std::vector<transfer_handle> sends;
    for (size_t i = 0; i < cases.size(); ++i) sends.push_back(g.send(cases[i], 1, static_cast<uint32_t>(i)));
    // The same buffer on rank 1 receives three times.
    for (int k = 0; k < 3; ++k) sends.push_back(g.send(cases[0] * (k + 2), 1, static_cast<uint32_t>(100 + k)));
    for (auto& s : sends) s.wait();
  } else {
    int equal = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      at::Tensor buffer = at::empty(cases[i].sizes(), cases[i].options());
      g.recv_into(buffer, 0, static_cast<uint32_t>(i)).wait();
      if (bitwise_equal(buffer, cases[i])) ++equal;
      else say("NOT EQUAL case " + std::to_string(i));
    }
    say("dtype cases bitwise equal: " + std::to_string(equal) + "/" + std::to_string(cases.size()));
    at::Tensor reused = at::empty(cases[0].sizes());
    void* where = reused.data_ptr();
    int reuse_ok = 0;
    for (int k = 0; k < 3; ++k) {
      g.recv_into(reused, 0, static_cast<uint32_t>(100 + k)).wait();
      if (reused.data_ptr() == where && bitwise_equal(reused, cases[0] * (k + 2))) ++reuse_ok;
    }
    say("reused buffer receives: " + std::to_string(reuse_ok) + "/3");
  }
  finish_both(g);
}

void scenario_out_of_order(p2p_group& g) {
  constexpr int n = 16;
  const int64_t step = 4097;  // wraps to 1 inside the tag
  if (g.rank() == 0) {
    std::vector<transfer_handle> sends;
    for (int mb : {5, 0, 15, 3, 9, 1, 12, 7, 2, 14, 4, 11, 6, 13, 8, 10})
      sends.push_back(g.send(at::full({64, 33}, static_cast<float>(mb)), 1,
                             transfer_tag(step, mb, mb % 4, transfer_direction::forward)));
    for (int i = n - 1; i >= 0; --i) sends[static_cast<size_t>(i)].wait();
    at::Tensor grad = at::empty({2, 2});
    g.recv_into(grad, 1, transfer_tag(step, 3, 3, transfer_direction::backward)).wait();
    say("backward grad: " + std::to_string(grad.sum().item<float>()));
  } else {
    std::vector<at::Tensor> buffers;
    std::vector<transfer_handle> recvs;
    for (int mb = n - 1; mb >= 0; --mb) {
      buffers.push_back(at::empty({64, 33}));
      recvs.push_back(g.recv_into(buffers.back(), 0, transfer_tag(step, mb, mb % 4, transfer_direction::forward)));
    }
    int matched = 0;
    for (int i : {3, 0, 15, 8, 1, 14, 2, 13, 4, 12, 5, 11, 6, 10, 7, 9}) {
      recvs[static_cast<size_t>(i)].wait();
      int mb = n - 1 - i;
      if (buffers[static_cast<size_t>(i)].eq(static_cast<float>(mb)).all().item<bool>()) ++matched;
    }
    say("matched by tag: " + std::to_string(matched) + "/" + std::to_string(n));
    g.send(at::full({2, 2}, 0.25f), 0, transfer_tag(step, 3, 3, transfer_direction::backward)).wait();
  }
  finish_both(g);
}

void expect_refused(p2p_group& g, at::Tensor buffer, uint32_t tag) {
  try {
    g.recv_into(buffer, 0, tag).wait();
    say("NO ERROR for tag " + std::to_string(tag));
  } catch (const transfer_error& e) {
    say(std::string("ERROR: ") + e.what());
  }
}

void scenario_size_mismatch(p2p_group& g) {
  if (g.rank() == 0) {
    auto a = g.send(at::randn({4, 8}), 1, 7);
    auto b = g.send(at::ones({3}), 1, 8);                   // float, rank 1 expects int64
    auto c = g.send(at::full({2, 2}, 3.0f), 1, 9);          // after the errors
    a.wait();
    b.wait();
    c.wait();
    say("sender waits returned");
  } else {
    expect_refused(g, at::empty({4, 9}), 7);
    expect_refused(g, at::empty({3}, at::kLong), 8);
    at::Tensor after = at::empty({2, 2});
    g.recv_into(after, 0, 9).wait();
    say("after the mismatches: " + std::to_string(after.sum().item<float>()));
  }
  finish_both(g);
}

// Rank 0 connects and then does nothing (it is killed, or stays silent);
// rank 1 waits for a tensor that never comes.
void scenario_lost_peer(p2p_group& g) {
  if (g.rank() == 0) {
    say("CONNECTED");
    std::this_thread::sleep_for(std::chrono::seconds(120));
    return;
  }
  at::Tensor buffer = at::empty({16});
  auto h = g.recv_into(buffer, 0, 99);
  say("POSTED");
  try {
    h.wait();
    say("NO ERROR");
  } catch (const transfer_error& e) {
    say(std::string("ERROR: ") + e.what());
  }
}

// A stage's boundary copy as both ranks build it: two weights, Adam state
// for two parameters (one with a slot left undefined), a third parameter
// with no state yet; `scale` makes the second copy differ from the first.
stage_snapshot snapshot_case(float scale) {
  at::manual_seed(20261124);
  stage_snapshot s;
  s.rank = 2;
  s.weights = {{"3.weight", at::randn({16, 8}) * scale}, {"3.bias", at::randn({16}) * scale}};
  auto opt = std::make_shared<optimizer_state_copy>();
  opt->names = {"3.weight", "3.bias", "5.weight"};
  opt->steps = {7, 7, 0};
  opt->tensors = {{at::randn({16, 8}) * scale, at::rand({16, 8}) * scale, at::Tensor()},
                  {at::randn({16}) * scale, at::rand({16}) * scale, at::Tensor()},
                  {}};
  s.optimizer = opt;
  return s;
}

int defined_tensors(const stage_snapshot& s) {
  int n = static_cast<int>(s.weights.size());
  for (const auto& ts : s.optimizer->tensors)
    for (const auto& t : ts) n += t.defined();
  return n;
}

bool same_snapshot(const stage_snapshot& a, const stage_snapshot& b) {
  if (a.rank != b.rank || a.weights.size() != b.weights.size()) return false;
  for (size_t i = 0; i < a.weights.size(); ++i)
    if (a.weights[i].first != b.weights[i].first || !bitwise_equal(a.weights[i].second, b.weights[i].second))
      return false;
  const auto &x = *a.optimizer, &y = *b.optimizer;
  if (x.names != y.names || x.steps != y.steps || x.tensors.size() != y.tensors.size()) return false;
  for (size_t i = 0; i < x.tensors.size(); ++i) {
    if (x.tensors[i].size() != y.tensors[i].size()) return false;
    for (size_t k = 0; k < x.tensors[i].size(); ++k) {
      if (x.tensors[i][k].defined() != y.tensors[i][k].defined()) return false;
      if (x.tensors[i][k].defined() && !bitwise_equal(x.tensors[i][k], y.tensors[i][k])) return false;
    }
  }
  return true;
}

// The description line of a snapshot goes as two tensors after it (its
// length, then its bytes): the channel's tags count per destination from
// 0, so rank 1 knows where each one is.
void post_line(tensor_channel& ch, const std::string& line, int to = 1) {
  ch.post(at::full({1}, static_cast<int64_t>(line.size()), at::kLong), to);
  at::Tensor bytes = at::empty({static_cast<int64_t>(line.size())}, at::kByte);
  std::memcpy(bytes.data_ptr(), line.data(), line.size());
  ch.post(bytes, to);
}

at::Tensor fetch_now(tensor_channel& ch, int from, uint32_t tag, at::ScalarType dtype, std::vector<int64_t> shape) {
  remote_tensor d;
  d.from = from;
  d.tag = tag;
  d.dtype = static_cast<int8_t>(dtype);
  d.shape = std::move(shape);
  auto got = std::make_shared<std::promise<at::Tensor>>();
  auto arrived = got->get_future();
  ch.fetch(
      d, [got](at::Tensor t) { got->set_value(std::move(t)); },
      [got](const std::string& why) { got->set_exception(std::make_exception_ptr(transfer_error(why))); });
  return arrived.get();
}

std::string fetch_line(tensor_channel& ch, uint32_t tag, int from = 0) {
  const int64_t size = fetch_now(ch, from, tag, at::kLong, {1}).item<int64_t>();
  at::Tensor bytes = fetch_now(ch, from, tag + 1, at::kByte, {size});
  return std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(size));
}

// A line that receive_snapshot_async must refuse, by throwing, before any
// receive starts; "MALFORMED ..." when it did not.
void say_whether_refused(tensor_channel& ch, const std::string& what, const std::string& line) {
  try {
    receive_snapshot_async(
        ch, line, [what](stage_snapshot) { say("MALFORMED: " + what + " received"); },
        [what](const std::string&) { say("MALFORMED: " + what + " failed late"); });
    say("MALFORMED: " + what + " not refused");
  } catch (const transfer_error& e) {
    say(what + " refused: " + e.what());
  }
}

// Rank 0 sends three boundary copies; rank 1 receives the first with the
// asynchronous receive (a callback on the channel's thread), refuses two
// malformed lines before any receive starts, takes the second with the
// blocking one, and the third, packed, as views of one buffer.
void scenario_snapshot(p2p_group g) {
  tensor_channel ch(std::move(g));
  const auto first = snapshot_case(1.0f), second = snapshot_case(-3.0f), third = snapshot_case(0.5f);
  const auto n = static_cast<uint32_t>(defined_tensors(first));
  if (ch.rank() == 0) {
    post_line(ch, send_snapshot(ch, first, 1));
    post_line(ch, send_snapshot(ch, second, 1));
    auto packed = third;
    pack_snapshot(packed);
    post_line(ch, send_snapshot(ch, packed, 1));
    fetch_now(ch, 1, 0, at::kLong, {1});  // rank 1 is done (its first post to rank 0)
    return;
  }
  // Tags: first's tensors 0..n-1, its line n and n+1, second's n+2..2n+1.
  const std::string line1 = fetch_line(ch, n);
  const std::string line2 = fetch_line(ch, 2 * n + 2);
  say_whether_refused(ch, "malformed line", "v1 2 1 3.weight 0 nonsense");
  // A packed buffer of 3 elements for a tensor of 4.
  say_whether_refused(ch, "malformed v2 line", "v2 0 5 6 1 3 2 1 3.weight 1 4 0");
  auto got = std::make_shared<std::promise<stage_snapshot>>();
  auto arrived = got->get_future();
  const auto caller = std::this_thread::get_id();
  auto called_on = std::make_shared<std::thread::id>();
  receive_snapshot_async(
      ch, line1,
      [got, called_on](stage_snapshot s) {
        *called_on = std::this_thread::get_id();
        got->set_value(std::move(s));
      },
      [got](const std::string& why) { got->set_exception(std::make_exception_ptr(transfer_error(why))); });
  const stage_snapshot one = arrived.get();
  say(std::string("async copy bitwise equal: ") + (same_snapshot(one, first) ? "yes" : "no") +
      (*called_on != caller ? ", called back on the channel's thread" : ", called back on the caller"));
  const stage_snapshot two = receive_snapshot(ch, line2);
  say(std::string("blocking copy bitwise equal: ") + (same_snapshot(two, second) ? "yes" : "no"));
  // Packed: one transfer (tag 2n+4), its line after it (2n+5, 2n+6); every
  // tensor received is a view of one buffer.
  const std::string line3 = fetch_line(ch, 2 * n + 5);
  const stage_snapshot three = receive_snapshot(ch, line3);
  bool one_buffer = true;
  const void* storage = three.weights.front().second.storage().data();
  for (const auto& [name, t] : three.weights) one_buffer = one_buffer && t.storage().data() == storage;
  for (const auto& fields : three.optimizer->tensors)
    for (const auto& t : fields) one_buffer = one_buffer && (!t.defined() || t.storage().data() == storage);
  one_buffer = one_buffer && three.flat.defined() && three.flat.storage().data() == storage;
  say("packed line " + line3.substr(0, 2) + ", copy bitwise equal: " + (same_snapshot(three, third) ? "yes" : "no") +
      (one_buffer ? ", one buffer" : ", several buffers"));
  ch.post(at::ones({1}, at::kLong), 0);
}

// Boundary copies through shared memory (runtime/dist/transport/shared_segments)
// between the two processes, in ACTORPIPE_SHM_DIR. Rank 0 writes copy 1;
// rank 1 maps it and sends it back through the socket (as a keeper sends
// a copy to a process started again). While rank 1 holds copy 1, copy 2
// takes a second segment, and a third finds both held; copy 2's line,
// mapped again, finds it taken (one holder frees it). Once rank 1 drops
// both, copy 3 reuses a segment, and copy 1's line is refused: its segment
// holds another copy now. A bigger copy replaces the free segment, too
// small for it. Copy 3 stays readable after rank 0's segments are gone
// (as after a SIGKILL).
void scenario_shared(p2p_group g) {
  tensor_channel ch(std::move(g));
  const auto one = snapshot_case(1.5f), two = snapshot_case(-0.25f), three = snapshot_case(4.0f);
  const std::string dir = env_or("ACTORPIPE_SHM_DIR", "/dev/shm");
  if (ch.rank() == 0) {
    auto ring = std::make_unique<segment_ring>(dir + "/shared_test.r0", 2);
    post_line(ch, write_shared(*ring, one));  // tags 0, 1
    const stage_snapshot back = receive_snapshot(ch, fetch_line(ch, 1, 1));
    say(std::string("sent back bitwise equal: ") + (same_snapshot(back, one) ? "yes" : "no"));
    const std::string line2 = write_shared(*ring, two);
    say("segments while copy 1 is held: " + std::to_string(ring->size()));
    std::string why;
    const std::string line3 = write_shared(*ring, three, &why);
    say("a third copy: " + (line3.empty() ? "refused, " + why : "written"));
    post_line(ch, line2);        // tags 2, 3
    fetch_now(ch, 1, 3, at::kLong, {1});  // rank 1 dropped both
    const std::string again = write_shared(*ring, three, &why);
    say("after both were dropped: " + (again.empty() ? "refused, " + why : "written") + ", segments " +
        std::to_string(ring->size()));
    post_line(ch, again);  // tags 4, 5
    fetch_now(ch, 1, 4, at::kLong, {1});  // rank 1 holds copy 3
    auto bigger = snapshot_case(2.0f);
    bigger.weights.emplace_back("extra", torch::ones({1000}));
    const std::string big = write_shared(*ring, bigger, &why);
    say("a bigger copy: " + (big.empty() ? "refused, " + why : "written") + ", segments " + std::to_string(ring->size()));
    ring.reset();
    ch.post(at::ones({1}, at::kLong), 1);  // tag 6: the segments are gone
    fetch_now(ch, 1, 5, at::kLong, {1});
    return;
  }
  const std::string line1 = fetch_line(ch, 0);
  say("line " + line1.substr(0, 2));
  std::optional<stage_snapshot> first = receive_snapshot(ch, line1);
  say(std::string("shared copy bitwise equal: ") + (same_snapshot(*first, one) ? "yes" : "no"));
  post_line(ch, send_snapshot(ch, *first, 0, /*pack=*/true), 0);  // tags 0, 1, 2
  const std::string line2 = fetch_line(ch, 2);
  std::optional<stage_snapshot> second = receive_snapshot(ch, line2);
  try {
    receive_snapshot(ch, line2);
    say("copy 2 mapped twice");
  } catch (const transfer_error& e) {
    say(std::string("copy 2 again: ") + e.what());
  }
  say(std::string("second copy bitwise equal: ") + (same_snapshot(*second, two) ? "yes" : "no"));
  // Copy 1 went back through the channel: its send holds it until the
  // channel's reaper lets the send go.
  ch.wait_sent();
  first.reset();
  second.reset();
  ch.post(at::ones({1}, at::kLong), 0);  // tag 3
  const stage_snapshot third = receive_snapshot(ch, fetch_line(ch, 4));
  try {
    receive_snapshot(ch, line1);
    say("copy 1 read again");
  } catch (const transfer_error& e) {
    say(std::string("copy 1 again: ") + e.what());
  }
  ch.post(at::ones({1}, at::kLong), 0);  // tag 4
  fetch_now(ch, 0, 6, at::kLong, {1});
  say(std::string("third copy after the sender's segments went: ") +
      (same_snapshot(third, three) ? "bitwise equal" : "changed"));
  ch.post(at::ones({1}, at::kLong), 0);  // tag 5
}

int run_child(const std::string& scenario) {
  try {
    p2p_options o;
    o.rank = std::stoi(env_or("ACTORPIPE_P2P_RANK", "0"));
    o.world_size = 2;
    o.is_master = o.rank == 0;
    o.master_port = static_cast<uint16_t>(std::stoi(env_or("ACTORPIPE_P2P_PORT", "0")));
    o.timeout = std::chrono::milliseconds(std::stoi(env_or("ACTORPIPE_P2P_TIMEOUT_MS", "20000")));
    o.store_prefix = "p2p_test/" + scenario;
    o.on_store_listening = [](uint16_t port) { say("PORT " + std::to_string(port) + " PORT_END"); };
    auto g = p2p_group::connect(o);
    if (scenario == "dtypes") scenario_dtypes(g);
    else if (scenario == "out_of_order") scenario_out_of_order(g);
    else if (scenario == "size_mismatch") scenario_size_mismatch(g);
    else if (scenario == "lost_peer") scenario_lost_peer(g);
    else if (scenario == "snapshot") scenario_snapshot(std::move(g));
    else if (scenario == "shared") scenario_shared(std::move(g));
    else throw std::runtime_error("unknown scenario " + scenario);
    say("CHILD DONE");
    return 0;
  } catch (const std::exception& e) {
    say(std::string("CHILD FAILED: ") + e.what());
    return 3;
  }
}

// Runs before GoogleTest's main in a child, and exits there.
const bool child_ran = [] {
  const char* scenario = std::getenv("ACTORPIPE_P2P_CHILD");
  if (!scenario) return false;
  int code = run_child(scenario);
  std::fflush(nullptr);
  std::_Exit(code);
}();

// ---- the parent's side ------------------------------------------------------

using clock_type = child_process::clock;

struct pair_of_ranks {
  std::unique_ptr<child_process> rank0, rank1;
};

// Starts rank 0 (the master, on an ephemeral port), reads the port it got,
// then starts rank 1 with it.
pair_of_ranks start_ranks(const std::string& scenario, int timeout_ms) {
  auto env = [&](int rank, int port) {
    return std::map<std::string, std::string>{{"ACTORPIPE_P2P_CHILD", scenario},
                                              {"ACTORPIPE_P2P_RANK", std::to_string(rank)},
                                              {"ACTORPIPE_P2P_PORT", std::to_string(port)},
                                              {"ACTORPIPE_P2P_TIMEOUT_MS", std::to_string(timeout_ms)}};
  };
  pair_of_ranks p;
  p.rank0 = std::make_unique<child_process>(env(0, 0));
  if (!p.rank0->read_until("PORT_END", clock_type::now() + std::chrono::seconds(60)))
    throw std::runtime_error("rank 0 reported no port; its output:\n" + p.rank0->output());
  int port = actorpipe::test_support::parse_port(p.rank0->output());
  if (port <= 0) throw std::runtime_error("bad port line:\n" + p.rank0->output());
  p.rank1 = std::make_unique<child_process>(env(1, port));
  return p;
}

struct finished {
  int code0, code1;
  std::string out0, out1;
};

finished finish(pair_of_ranks& p, std::chrono::seconds limit = std::chrono::seconds(120)) {
  auto deadline = clock_type::now() + limit;
  finished f;
  f.code1 = p.rank1->finish(deadline);
  f.code0 = p.rank0->finish(deadline);
  f.out0 = p.rank0->output();
  f.out1 = p.rank1->output();
  return f;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST(TransferTag, PacksFieldsWithoutCollisionInsideTheStepWindow) {
  std::set<uint32_t> seen;
  for (int64_t step : {0, 1, 4095})
    for (int64_t mb : {0, 1, 2047})
      for (int64_t chunk : {0, 5, 63})
        for (auto d : {transfer_direction::forward, transfer_direction::backward}) {
          uint32_t t = transfer_tag(step, mb, chunk, d);
          EXPECT_LE(t, max_transfer_tag);
          EXPECT_TRUE(seen.insert(t).second) << step << " " << mb << " " << chunk;
        }
  EXPECT_EQ(seen.size(), 3u * 3u * 3u * 2u);
  // The step wraps at 4096: the window of steps in flight.
  EXPECT_EQ(transfer_tag(4096 + 7, 3, 2, transfer_direction::backward),
            transfer_tag(7, 3, 2, transfer_direction::backward));
  EXPECT_EQ(transfer_tag(4095, 2047, 63, transfer_direction::backward), max_transfer_tag);
  EXPECT_EQ(transfer_tag(0, 0, 0, transfer_direction::forward), 0u);
}

TEST(TransferTag, RefusesFieldsThatDoNotFit) {
  EXPECT_THROW(transfer_tag(-1, 0, 0, transfer_direction::forward), std::out_of_range);
  EXPECT_THROW(transfer_tag(0, 2048, 0, transfer_direction::forward), std::out_of_range);
  EXPECT_THROW(transfer_tag(0, -1, 0, transfer_direction::forward), std::out_of_range);
  EXPECT_THROW(transfer_tag(0, 0, 64, transfer_direction::forward), std::out_of_range);
  EXPECT_THROW(transfer_tag(0, 0, 0, static_cast<transfer_direction>(2)), std::out_of_range);
  try {
    transfer_tag(0, 5000, 0, transfer_direction::forward);
  } catch (const std::out_of_range& e) {
    EXPECT_TRUE(has(e.what(), "microbatch 5000")) << e.what();
  }
}

TEST(P2PGroup, RefusesBadOptionsBeforeConnecting) {
  p2p_options o;
  o.rank = 1;
  o.master_port = 0;  // not the master: needs the port
  EXPECT_THROW(p2p_group::connect(o), transfer_error);
  o.rank = 2;  // world_size 2
  o.is_master = true;
  EXPECT_THROW(p2p_group::connect(o), transfer_error);
}

TEST(P2PGroup, ConnectingToAMissingMasterFailsAtTheTimeout) {
  // A port that was free a moment ago (bound to port 0, read, closed).
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  socklen_t len = sizeof addr;
  ASSERT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  ::close(fd);
  p2p_options o;
  o.rank = 1;
  o.master_port = ntohs(addr.sin_port);
  o.timeout = std::chrono::milliseconds(1500);
  try {
    p2p_group::connect(o);
    FAIL() << "connected to nobody";
  } catch (const transfer_error& e) {
    EXPECT_TRUE(has(e.what(), "p2p rank 1/2: cannot")) << e.what();
    EXPECT_TRUE(has(e.what(), "127.0.0.1:" + std::to_string(o.master_port))) << e.what();
  }
}

TEST(P2PGroup, TensorsOfSeveralDtypesAndShapesArriveBitwiseEqual) {
  auto ranks = start_ranks("dtypes", 20000);
  auto f = finish(ranks);
  EXPECT_EQ(f.code0, 0) << f.out0;
  ASSERT_EQ(f.code1, 0) << f.out1;
  EXPECT_TRUE(has(f.out1, "dtype cases bitwise equal: 7/7")) << f.out1;
  EXPECT_TRUE(has(f.out1, "reused buffer receives: 3/3")) << f.out1;
}

// pack_snapshot: every tensor copied, once, into one buffer whose views
// they become, in the transfer's order; the original is left alone.
TEST(StateTransfer, PackingCopiesEveryTensorIntoOneBufferInOrder) {
  const auto original = snapshot_case(2.0f);
  auto packed = original;
  ASSERT_TRUE(pack_snapshot(packed));
  ASSERT_TRUE(packed.flat.defined());
  EXPECT_TRUE(same_snapshot(packed, original));
  EXPECT_EQ(packed.flat.numel(), 16 * 8 + 16 + 2 * (16 * 8 + 16));
  const void* base = packed.flat.storage().data();
  int64_t offset = 0;
  auto in_order = [&](const at::Tensor& t) {
    EXPECT_EQ(t.storage().data(), base);
    EXPECT_EQ(t.storage_offset(), offset);
    offset += t.numel();
  };
  for (const auto& [name, t] : packed.weights) in_order(t);
  for (const auto& fields : packed.optimizer->tensors)
    for (const auto& t : fields)
      if (t.defined()) in_order(t);
  EXPECT_EQ(offset, packed.flat.numel());
  packed.flat.fill_(0.0f);  // a copy: the original's tensors keep their values
  EXPECT_TRUE(same_snapshot(original, snapshot_case(2.0f)));
}

// runtime/dist/transport/state_transfer over the channel between two processes:
// a stage's boundary copy arrives bitwise, by callback or blocking, and a
// line that does not parse is refused before any receive starts.
TEST(StateTransfer, ABoundaryCopyArrivesBitwiseAsynchronouslyOrBlocking) {
  auto ranks = start_ranks("snapshot", 20000);
  auto f = finish(ranks);
  EXPECT_EQ(f.code0, 0) << f.out0;
  ASSERT_EQ(f.code1, 0) << f.out1;
  EXPECT_TRUE(has(f.out1, "async copy bitwise equal: yes, called back on the channel's thread")) << f.out1;
  EXPECT_TRUE(has(f.out1, "blocking copy bitwise equal: yes")) << f.out1;
  EXPECT_TRUE(has(f.out1, "packed line v2, copy bitwise equal: yes, one buffer")) << f.out1;
  EXPECT_TRUE(has(f.out1, "malformed line refused: a state transfer's description does not parse")) << f.out1;
  EXPECT_TRUE(has(f.out1, "malformed v2 line refused: a state transfer's description does not parse")) << f.out1;
  EXPECT_FALSE(has(f.out1, "MALFORMED")) << f.out1;
}

TEST(StateTransfer, ACopyThroughSharedMemoryArrivesBitwiseAndItsSegmentIsWrittenOnlyOnceFree) {
  const fs::path dir = fs::temp_directory_path() / ("actorpipe_shm_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  ::setenv("ACTORPIPE_SHM_DIR", dir.c_str(), 1);
  auto ranks = start_ranks("shared", 20000);
  auto f = finish(ranks);
  ::unsetenv("ACTORPIPE_SHM_DIR");
  EXPECT_EQ(f.code0, 0) << f.out0;
  ASSERT_EQ(f.code1, 0) << f.out1;
  EXPECT_TRUE(has(f.out1, "line v3")) << f.out1;
  EXPECT_TRUE(has(f.out1, "shared copy bitwise equal: yes")) << f.out1;
  EXPECT_TRUE(has(f.out0, "sent back bitwise equal: yes")) << f.out0;
  EXPECT_TRUE(has(f.out0, "segments while copy 1 is held: 2")) << f.out0;
  EXPECT_TRUE(has(f.out0, "a third copy: refused, all 2 segments are held")) << f.out0;
  EXPECT_TRUE(has(f.out1, "second copy bitwise equal: yes")) << f.out1;
  EXPECT_TRUE(has(f.out1, "copy 2 again: the shared copy")) << f.out1;
  EXPECT_TRUE(has(f.out1, "was taken already: copy 2")) << f.out1;
  EXPECT_TRUE(has(f.out0, "after both were dropped: written, segments 2")) << f.out0;
  EXPECT_TRUE(has(f.out0, "a bigger copy: written, segments 2")) << f.out0;
  EXPECT_TRUE(has(f.out1, "copy 1 again: the shared copy")) << f.out1;
  EXPECT_TRUE(has(f.out1, "no longer holds copy 1")) << f.out1;
  EXPECT_TRUE(has(f.out1, "third copy after the sender's segments went: bitwise equal")) << f.out1;
  EXPECT_TRUE(fs::is_empty(dir));
  fs::remove_all(dir);
}

TEST(P2PGroup, MessagesSentOutOfOrderAreMatchedByTag) {
  auto ranks = start_ranks("out_of_order", 20000);
  auto f = finish(ranks);
  EXPECT_EQ(f.code1, 0) << f.out1;
  ASSERT_EQ(f.code0, 0) << f.out0;
  EXPECT_TRUE(has(f.out1, "matched by tag: 16/16")) << f.out1;
  EXPECT_TRUE(has(f.out0, "backward grad: 1.0")) << f.out0;
}

TEST(P2PGroup, SizeOrDtypeMismatchIsAnErrorNamingBothRanksAndTheGroupStaysUsable) {
  auto ranks = start_ranks("size_mismatch", 20000);
  auto f = finish(ranks);
  ASSERT_EQ(f.code1, 0) << f.out1;
  EXPECT_EQ(f.code0, 0) << f.out0;
  EXPECT_TRUE(has(f.out1,
                  "ERROR: p2p recv on rank 1 from rank 0, tag 7: rank 0 sent Float [4, 8] (128 bytes) "
                  "but rank 1 expected Float [4, 9] (144 bytes)"))
      << f.out1;
  EXPECT_TRUE(has(f.out1, "tag 8: rank 0 sent Float [3] (12 bytes) but rank 1 expected Long [3] (24 bytes)"))
      << f.out1;
  EXPECT_TRUE(has(f.out1, "after the mismatches: 12.0")) << f.out1;
  EXPECT_TRUE(has(f.out0, "sender waits returned")) << f.out0;
}

TEST(P2PGroup, PeerKilledMidReceiveFailsTheWaitWithAClearError) {
  auto ranks = start_ranks("lost_peer", 10000);
  auto deadline = clock_type::now() + std::chrono::seconds(60);
  ASSERT_TRUE(ranks.rank0->read_until("CONNECTED", deadline)) << ranks.rank0->output();
  ASSERT_TRUE(ranks.rank1->read_until("POSTED", deadline)) << ranks.rank1->output();
  ranks.rank0->kill_now();
  int code1 = ranks.rank1->finish(clock_type::now() + std::chrono::seconds(60));
  const auto& out = ranks.rank1->output();
  EXPECT_EQ(code1, 0) << out;
  // Gloo sees the closed socket at once; a missed close would still end at
  // the 10 s timeout, with another reason.
  EXPECT_TRUE(has(out, "ERROR: p2p recv on rank 1 from rank 0, tag 99 (header): ")) << out;
  EXPECT_FALSE(has(out, "NO ERROR")) << out;
}

TEST(P2PGroup, SilentPeerFailsTheWaitAtTheTimeout) {
  auto ranks = start_ranks("lost_peer", 2000);  // rank 0 sleeps; rank 1 times out
  int code1 = ranks.rank1->finish(clock_type::now() + std::chrono::seconds(60));
  const auto& out = ranks.rank1->output();
  EXPECT_EQ(code1, 0) << out;
  EXPECT_TRUE(has(out, "ERROR: p2p recv on rank 1 from rank 0, tag 99 (header): timed out after 2000 ms")) << out;
  ranks.rank0->kill_now();
}
