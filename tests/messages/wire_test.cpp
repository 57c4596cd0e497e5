// messages/wire.hpp and the payloads' inspect(): every message body goes
// through CAF's binary serializer and back, as it will between processes,
// and comes out equal field by field, its tensors bitwise (dtype, shape,
// bytes). A blob that is not a tensor is refused with a reason, never
// turned into one.
#include <ATen/ATen.h>
#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "messages/payloads.hpp"
#include "messages/wire.hpp"

namespace actorpipe {
namespace {

// Each test has its own actor system, registered as every node's is (a
// static one would outlive what CAF 0.17 needs at its teardown).
caf::actor_system* current = nullptr;

caf::actor_system& sys() { return *current; }

class Wire : public ::testing::Test {
protected:
  void SetUp() override {
    add_payload_types(cfg_);
    system_ = std::make_unique<caf::actor_system>(cfg_);
    current = system_.get();
  }
  void TearDown() override {
    current = nullptr;
    system_.reset();
  }

private:
  caf::actor_system_config cfg_;
  std::unique_ptr<caf::actor_system> system_;
};

template <class T>
std::vector<char> save(T& x) {
  std::vector<char> buf;
  caf::binary_serializer sink{sys(), buf};
  auto err = sink(x);
  EXPECT_FALSE(err) << sys().render(err);
  return buf;
}

template <class T>
T round_trip(T x) {
  auto buf = save(x);
  T y;
  caf::binary_deserializer source{sys(), buf};
  auto err = source(y);
  EXPECT_FALSE(err) << sys().render(err);
  return y;
}

// Same dtype, shape and bytes (NaNs included), or both undefined.
void expect_same(const at::Tensor& a, const at::Tensor& b) {
  ASSERT_EQ(a.defined(), b.defined());
  if (!a.defined()) return;
  ASSERT_EQ(a.scalar_type(), b.scalar_type());
  ASSERT_EQ(a.sizes(), b.sizes());
  EXPECT_TRUE(b.is_contiguous());
  const at::Tensor ca = a.contiguous(), cb = b.contiguous();
  ASSERT_EQ(0, std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.numel() * ca.element_size()));
}

TEST_F(Wire, TensorsComeBackBitwiseWhateverTheirLayoutAndDtype) {
  at::manual_seed(3);
  at::Tensor with_nan = at::randn({4, 5});
  with_nan[1][2] = std::nanf("");
  with_nan[3][0] = -std::numeric_limits<float>::infinity();
  const std::vector<at::Tensor> cases = {
      at::randn({3, 7}),
      at::randn({7, 3}).t(),                         // not contiguous
      at::randn({6, 8}).slice(1, 2, 6, 2),           // a strided view
      at::randn({2, 3}).to(at::kBFloat16),
      at::randn({2, 3}).to(at::kHalf),
      at::randn({5}, at::kDouble),
      at::randint(0, 1 << 20, {4, 2}, at::kLong),
      at::randint(0, 2, {9}, at::kBool),
      at::empty({0, 3}),
      at::scalar_tensor(2.5),                        // zero dimensions
      with_nan,
      at::Tensor(),                                  // undefined
  };
  for (const auto& t : cases) {
    at::Tensor copy = t;
    expect_same(t, round_trip(copy));
  }
}

TEST_F(Wire, ABlobThatIsNotATensorIsRefusedWithAReason) {
  at::Tensor out;
  std::string why;
  tensor_wire short_data = to_wire(at::ones({2, 2}));
  short_data.bytes.pop_back();
  EXPECT_FALSE(from_wire(short_data, out, why));
  EXPECT_EQ(why, "tensor of 15 bytes, its shape and dtype need 16");

  tensor_wire unknown = to_wire(at::ones({1}));
  unknown.dtype = 100;
  EXPECT_FALSE(from_wire(unknown, out, why));
  EXPECT_EQ(why, "tensor dtype 100 is unknown");

  tensor_wire negative = to_wire(at::ones({1}));
  negative.shape = {-1};
  EXPECT_FALSE(from_wire(negative, out, why));
  EXPECT_EQ(why, "tensor shape has a negative or overflowing size");

  tensor_wire huge = to_wire(at::ones({1}));
  huge.shape = {int64_t(1) << 40, int64_t(1) << 40};  // 2^80 floats
  EXPECT_FALSE(from_wire(huge, out, why));
  EXPECT_EQ(why, "tensor shape has a negative or overflowing size");

  tensor_wire undefined_with_data;
  undefined_with_data.bytes = {1};
  EXPECT_FALSE(from_wire(undefined_with_data, out, why));
  EXPECT_FALSE(out.defined());

  // Through CAF: the deserializer reports it; no tensor is made.
  tensor_wire bad = to_wire(at::ones({2, 2}));
  bad.bytes.resize(3);
  auto buf = save(bad);
  at::Tensor t;
  caf::binary_deserializer source{sys(), buf};
  auto err = source(t);
  ASSERT_TRUE(err);
  EXPECT_NE(sys().render(err).find("tensor of 3 bytes, its shape and dtype need 16"), std::string::npos)
      << sys().render(err);
  EXPECT_FALSE(t.defined());
}

TEST_F(Wire, ActivationsAndGradientsKeepTheirHeaderAndTensors) {
  activation_msg a;
  a.h = {7, 12, 3, 1, 44};
  a.x = at::randn({4, 16});
  a.y = at::randint(0, 10, {4}, at::kLong);
  a.ready = nullptr;
  auto a2 = round_trip(a);
  EXPECT_EQ(a2.h.epoch, 7u);
  EXPECT_EQ(a2.h.step, 12);
  EXPECT_EQ(a2.h.mb, 3);
  EXPECT_EQ(a2.h.chunk, 1);
  EXPECT_EQ(a2.h.round, 44);
  expect_same(a.x, a2.x);
  expect_same(a.y, a2.y);
  EXPECT_EQ(a2.ready, nullptr);

  gradient_msg g;
  g.h = {1, 2, 5, 0, 0};
  g.g = at::randn({4, 16}).to(at::kBFloat16);
  auto g2 = round_trip(g);
  EXPECT_EQ(g2.h.mb, 5);
  expect_same(g.g, g2.g);
}

TEST_F(Wire, ReportsApplyAndSnapshotsKeepEveryField) {
  grads_report r;
  r.rank = 3;
  r.replica = 1;
  r.step = 9;
  r.grad_norms = {at::rand({4}), at::rand({2})};
  r.loss_sum = 1.25;
  r.correct = 17;
  r.samples = 32;
  r.stats.events = {{{op_kind::F, 0, 1}, 10, 20, -1}, {{op_kind::W, 3, 0}, 30, 45, 2}};
  r.stats.busy_ns = 123;
  r.stats.stale_epochs = 4;
  r.stats.retransmits = 2;
  r.stats.memory = {{1, 100}, {2, 50}};
  r.stats.cuda_memory = {{{5, 6, 7}}};
  r.nonfinite = {2, "gradient", 99};
  auto r2 = round_trip(r);
  EXPECT_EQ(r2.rank, 3);
  EXPECT_EQ(r2.replica, 1);
  EXPECT_EQ(r2.step, 9);
  ASSERT_EQ(r2.grad_norms.size(), 2u);
  expect_same(r.grad_norms[0], r2.grad_norms[0]);
  expect_same(r.grad_norms[1], r2.grad_norms[1]);
  EXPECT_EQ(r2.loss_sum, 1.25);
  EXPECT_EQ(r2.correct, 17);
  EXPECT_EQ(r2.samples, 32);
  ASSERT_EQ(r2.stats.events.size(), 2u);
  EXPECT_EQ(r2.stats.events[1].op, (op_id{op_kind::W, 3, 0}));
  EXPECT_EQ(r2.stats.events[1].end_ns, 45);
  EXPECT_EQ(r2.stats.events[1].version, 2);
  EXPECT_EQ(r2.stats.busy_ns, 123);
  EXPECT_EQ(r2.stats.stale_epochs, 4u);
  EXPECT_EQ(r2.stats.retransmits, 2u);
  EXPECT_EQ(r2.stats.memory, r.stats.memory);
  EXPECT_EQ(r2.stats.cuda_memory, r.stats.cuda_memory);
  EXPECT_EQ(r2.nonfinite.mb, 2);
  EXPECT_EQ(r2.nonfinite.where, "gradient");
  EXPECT_EQ(r2.nonfinite.at_ns, 99);

  apply_msg ap;
  ap.step = 4;
  ap.lr = 0.01;
  ap.checksum = true;
  auto ap2 = round_trip(ap);  // clip_coef undefined: no clipping
  EXPECT_EQ(ap2.step, 4);
  EXPECT_EQ(ap2.lr, 0.01);
  EXPECT_TRUE(ap2.checksum);
  EXPECT_FALSE(ap2.skip);
  EXPECT_FALSE(ap2.clip_coef.defined());
  ap.clip_coef = at::scalar_tensor(0.5f);
  expect_same(ap.clip_coef, round_trip(ap).clip_coef);

  stage_snapshot s;
  s.rank = 2;
  s.weights = {{"0.weight", at::randn({3, 3})}, {"0.bias", at::randn({3})}};
  auto s2 = round_trip(s);
  EXPECT_EQ(s2.rank, 2);
  ASSERT_EQ(s2.weights.size(), 2u);
  EXPECT_EQ(s2.weights[1].first, "0.bias");
  expect_same(s.weights[1].second, s2.weights[1].second);
  EXPECT_EQ(s2.optimizer, nullptr);

  auto opt = std::make_shared<optimizer_state_copy>();
  opt->names = {"0.weight", "0.bias"};
  opt->steps = {3, 0};
  opt->tensors = {{at::randn({3, 3}), at::rand({3, 3})}, {}};
  s.optimizer = opt;
  auto s3 = round_trip(s);
  ASSERT_NE(s3.optimizer, nullptr);
  EXPECT_EQ(s3.optimizer->names, opt->names);
  EXPECT_EQ(s3.optimizer->steps, opt->steps);
  ASSERT_EQ(s3.optimizer->tensors.size(), 2u);
  ASSERT_EQ(s3.optimizer->tensors[0].size(), 2u);
  expect_same(opt->tensors[0][1], s3.optimizer->tensors[0][1]);
  EXPECT_TRUE(s3.optimizer->tensors[1].empty());
}

TEST_F(Wire, RegisteredBodiesCrossAsTypeErasedMessages) {
  // What the network layer does: a whole caf::message, its element types
  // found by the names add_payload_types registered.
  eval_result e{40, 64, 12.5};
  stage_status st{1, 88, true, "F0 F1 | B0"};
  eval_msg ev;
  ev.x = at::randn({2, 4});
  ev.y = at::tensor({1, 0}, at::kLong);
  ev.chunk = 1;
  auto msg = caf::make_message(e, st, ev);
  std::vector<char> buf;
  caf::binary_serializer sink{sys(), buf};
  ASSERT_FALSE(sink(msg));
  caf::message back;
  caf::binary_deserializer source{sys(), buf};
  auto err = source(back);
  ASSERT_FALSE(err) << sys().render(err);
  ASSERT_TRUE((back.match_elements<eval_result, stage_status, eval_msg>()));
  const auto& e2 = back.get_as<eval_result>(0);
  EXPECT_EQ(e2.correct, 40);
  EXPECT_EQ(e2.total, 64);
  EXPECT_EQ(e2.loss_sum, 12.5);
  const auto& st2 = back.get_as<stage_status>(1);
  EXPECT_EQ(st2.fired, 88);
  EXPECT_TRUE(st2.done);
  EXPECT_EQ(st2.grid, "F0 F1 | B0");
  const auto& ev2 = back.get_as<eval_msg>(2);
  EXPECT_EQ(ev2.chunk, 1);
  expect_same(ev.x, ev2.x);
  expect_same(ev.y, ev2.y);
}

}  // namespace
}  // namespace actorpipe
