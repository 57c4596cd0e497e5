// runtime/dist/transport/data_channel: op records (a head, then the bytes
// of up to two tensors) cross a byte pipe whole, in order and bit for bit,
// over a socket and over a shared-memory ring; a peer that goes away ends
// the reader with why; a garbled head is refused, never allocated; a shape
// mismatch is one line naming both stages.
#include "runtime/dist/transport/data_channel.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dist/transport/shm_ring.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

using clock_type = byte_pipe::clock;

clock_type::time_point soon() { return clock_type::now() + std::chrono::seconds(30); }

/// What a receiver handed over, waited for.
struct inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<op_record> records;
  std::string failure;

  void deliver(op_record r) {
    std::lock_guard<std::mutex> l(mu);
    records.push_back(std::move(r));
    cv.notify_all();
  }
  void failed(const std::string& why) {
    std::lock_guard<std::mutex> l(mu);
    failure = why;
    cv.notify_all();
  }
  bool wait_for(size_t n) {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(30), [&] { return records.size() >= n || !failure.empty(); }) &&
           records.size() >= n;
  }
  bool wait_failure() {
    std::unique_lock<std::mutex> l(mu);
    return cv.wait_for(l, std::chrono::seconds(30), [&] { return !failure.empty(); });
  }
};

std::vector<op_record> sample_records() {
  std::vector<op_record> out;
  for (int i = 0; i < 6; ++i) {
    op_record r;
    r.kind = i % 2;
    r.to = 3;
    r.from = 2;
    r.epoch = 7;
    r.step = 1000 + i;
    r.mb = i;
    r.chunk = i % 3;
    r.round = -i;
    at::manual_seed(i);
    r.tensors.push_back(at::randn({16, 64 * (i + 1)}));
    // The targets ride along on some records; bf16 and int64 cross as bytes too.
    if (i % 3 == 0) r.tensors.push_back(at::randint(0, 10, {16}, at::kLong));
    if (i == 4) r.tensors[0] = r.tensors[0].to(at::kBFloat16);
    if (i == 5) r.tensors.push_back(at::Tensor());
    out.push_back(r);
  }
  op_record big;  // far larger than the ring
  big.tensors.push_back(at::randn({1 << 20}));
  out.push_back(big);
  op_record empty;  // a 0-element tensor, as the null device sends
  empty.tensors.push_back(at::empty({0}));
  out.push_back(empty);
  return out;
}

void expect_same(const op_record& a, const op_record& b) {
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.to, b.to);
  EXPECT_EQ(a.from, b.from);
  EXPECT_EQ(a.epoch, b.epoch);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.mb, b.mb);
  EXPECT_EQ(a.chunk, b.chunk);
  EXPECT_EQ(a.round, b.round);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    ASSERT_EQ(a.tensors[i].defined(), b.tensors[i].defined());
    if (!a.tensors[i].defined()) continue;
    EXPECT_EQ(a.tensors[i].scalar_type(), b.tensors[i].scalar_type());
    EXPECT_EQ(a.tensors[i].sizes(), b.tensors[i].sizes());
    // An empty tensor's data_ptr() is null, which memcmp may not be given.
    if (a.tensors[i].nbytes() > 0)
      EXPECT_EQ(std::memcmp(a.tensors[i].data_ptr(), b.tensors[i].data_ptr(), a.tensors[i].nbytes()), 0);
  }
}

// The writer's and the reader's pipe of a new ring `name` of `capacity`
// bytes in the test's directory (throws, failing the test, when it cannot be had).
std::pair<std::unique_ptr<byte_pipe>, std::unique_ptr<byte_pipe>> ring_ends(const std::string& name, size_t capacity) {
  const std::string path = (testing_util::test_dir("actorpipe_data_channel_test") / name).string();
  std::string why;
  auto w = shm_ring::create(path, capacity, &why);
  if (!w) throw std::runtime_error(why);
  auto r = shm_ring::open(path, &why);
  if (!r) throw std::runtime_error(why);
  return {ring_pipe(std::move(w)), ring_pipe(std::move(r))};
}

void round_trip(std::unique_ptr<byte_pipe> out, std::unique_ptr<byte_pipe> in) {
  inbox got;
  data_receiver receiver(std::move(in), [&](op_record r) { got.deliver(std::move(r)); },
                         [&](const std::string& why) { got.failed(why); });
  data_sender sender(std::move(out));
  const auto records = sample_records();
  for (const auto& r : records) sender.send(r, soon());
  ASSERT_TRUE(got.wait_for(records.size())) << got.failure;
  for (size_t i = 0; i < records.size(); ++i) expect_same(records[i], got.records[i]);
  receiver.stop();
  EXPECT_EQ(got.failure, "") << "stop() is not a failure";
}

TEST(DataChannel, RecordsCrossASocketWholeInOrderAndBitForBit) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  round_trip(socket_pipe(fds[0], "socket to 1"), socket_pipe(fds[1], "socket from 0"));
}

TEST(DataChannel, RecordsCrossASharedRingWholeInOrderAndBitForBit) {
  auto [w, r] = ring_ends("ring", 256 << 10);
  round_trip(std::move(w), std::move(r));
}

TEST(DataChannel, APeerThatGoesAwayEndsTheReaderWithWhy) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  inbox got;
  data_receiver receiver(socket_pipe(fds[1], "socket from 0"), [&](op_record r) { got.deliver(std::move(r)); },
                         [&](const std::string& why) { got.failed(why); });
  {
    data_sender sender(socket_pipe(fds[0], "socket to 1"));
    op_record r;
    r.tensors.push_back(at::ones({4}));
    sender.send(r, soon());
  }  // the sender's end closes
  ASSERT_TRUE(got.wait_failure());
  EXPECT_EQ(got.records.size(), 1u);
  EXPECT_EQ(got.failure, "socket from 0: reading: the peer closed the stream");
}

TEST(DataChannel, AGarbledHeadIsRefusedNotAllocated) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  inbox got;
  data_receiver receiver(socket_pipe(fds[1], "socket from 0"), [&](op_record r) { got.deliver(std::move(r)); },
                         [&](const std::string& why) { got.failed(why); });
  std::vector<unsigned char> junk(184, 0xab);
  ASSERT_EQ(::write(fds[0], junk.data(), junk.size()), 184);
  ASSERT_TRUE(got.wait_failure());
  EXPECT_NE(got.failure.find("socket from 0: a record head that is not actorpipe's"), std::string::npos) << got.failure;
  EXPECT_TRUE(got.records.empty());
}

TEST(DataChannel, PostNeverWaitsOnAReaderThatDoesNotRead) {
  // A 64 KiB ring and nobody reading: post() returns at once for 4 MiB of
  // records; once the reader starts, every one arrives, in order.
  auto [w, r] = ring_ends("stalled", 64 << 10);
  data_sender sender(std::move(w));
  std::vector<op_record> sent;
  const auto start = clock_type::now();
  for (int i = 0; i < 16; ++i) {
    op_record rec;
    rec.mb = i;
    rec.tensors.push_back(at::full({64 << 10}, static_cast<float>(i)));
    sent.push_back(rec);
    sender.post(rec);
  }
  EXPECT_LT(clock_type::now() - start, std::chrono::seconds(5)) << "post() waited for the reader";
  inbox got;
  data_receiver receiver(std::move(r), [&](op_record rec) { got.deliver(std::move(rec)); },
                         [&](const std::string& why) { got.failed(why); });
  ASSERT_TRUE(got.wait_for(sent.size())) << got.failure;
  for (size_t i = 0; i < sent.size(); ++i) expect_same(sent[i], got.records[i]);
}

TEST(DataChannel, AHeldBackRecordLetsTheLaterOnesPass) {
  int fds[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  inbox got;
  data_receiver receiver(socket_pipe(fds[1], "socket from 0"), [&](op_record r) { got.deliver(std::move(r)); },
                         [&](const std::string& why) { got.failed(why); });
  data_sender sender(socket_pipe(fds[0], "socket to 1"));
  for (int i = 0; i < 5; ++i) {
    op_record r;
    r.mb = i;
    r.tensors.push_back(at::ones({4}));
    sender.post(r, i == 1 ? clock_type::now() + std::chrono::milliseconds(200) : clock_type::time_point{});
  }
  ASSERT_TRUE(got.wait_for(5)) << got.failure;
  std::vector<int> order;
  for (const auto& r : got.records) order.push_back(r.mb);
  EXPECT_EQ(order, (std::vector<int>{0, 2, 3, 4, 1}));
}

TEST(DataChannel, AShapeMismatchIsOneLineNamingBothStages) {
  EXPECT_EQ(shape_mismatch("an activation", 1, 2, {16, 128}, {16, 128}), "");
  EXPECT_EQ(shape_mismatch("an activation", 1, 2, {16, 128}, {16, 64}),
            "stage 2 expected an activation of shape [16, 128] from stage 1, got [16, 64]");
}

}  // namespace
}  // namespace actorpipe
