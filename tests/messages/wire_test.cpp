// messages/wire.hpp and the payloads' inspect(): every message body goes
// through CAF's binary serializer and back, as it will between processes,
// and comes out equal field by field, its tensors bitwise (dtype, shape,
// bytes), its floating fields bit for bit (subnormals, signed zeros,
// infinities, NaN payloads). No payload hands a float or a double to CAF's
// own float serializer, and no message handler takes one. A blob that is
// not a tensor is refused with a reason, never turned into one.
#include <ATen/ATen.h>
#include <caf/all.hpp>
#include <caf/binary_deserializer.hpp>
#include <caf/binary_serializer.hpp>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "messages/atoms.hpp"

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

// -- floating fields, bit for bit ----------------------------------------------

template <class F>
F from_bits(std::conditional_t<sizeof(F) == 8, uint64_t, uint32_t> bits) {
  F x;
  std::memcpy(&x, &bits, sizeof x);
  return x;
}

template <class F>
bool same_bits(F a, F b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

template <class F>
std::string bits_text(F x) {
  std::conditional_t<sizeof(F) == 8, uint64_t, uint32_t> bits;
  std::memcpy(&bits, &x, sizeof x);
  std::ostringstream os;
  os << std::hexfloat << x << " (0x" << std::hex << bits << ")";
  return os.str();
}

// What CAF 0.17's pack754 loses or might lose, both signs: subnormals (the
// smallest, the largest, and the learning rate that came back as -inf),
// zeros, infinities, NaNs with payload bits, the smallest and largest
// normals.
template <class F>
std::vector<F> hard_values() {
  using lim = std::numeric_limits<F>;
  std::vector<F> out;
  for (F sign : {F(1), F(-1)}) {
    out.push_back(sign * lim::denorm_min());
    out.push_back(sign * std::nextafter(lim::min(), F(0)));  // the largest subnormal
    out.push_back(sign * lim::min());
    out.push_back(sign * lim::max());
    out.push_back(sign * lim::infinity());
    out.push_back(sign * F(0));
  }
  if constexpr (sizeof(F) == 8) {
    out.push_back(7.12e-309);
    out.push_back(-7.12e-309);
    out.push_back(from_bits<double>(0x7ff8000000000123ull));  // quiet NaN, payload 0x123
    out.push_back(from_bits<double>(0xfff0000000000042ull));  // signalling NaN, sign set
  } else {
    out.push_back(from_bits<float>(0x7fc00123u));
    out.push_back(from_bits<float>(0xff800042u));
  }
  return out;
}

TEST_F(Wire, EveryFloatingFieldComesBackBitForBit) {
  for (double v : hard_values<double>()) {
    grads_report r;
    r.loss_sum = v;
    EXPECT_TRUE(same_bits(v, round_trip(r).loss_sum)) << "grads_report.loss_sum " << bits_text(v);
    apply_msg m;
    m.lr = v;
    EXPECT_TRUE(same_bits(v, round_trip(m).lr)) << "apply_msg.lr " << bits_text(v);
    eval_result e;
    e.loss_sum = v;
    EXPECT_TRUE(same_bits(v, round_trip(e).loss_sum)) << "eval_result.loss_sum " << bits_text(v);
    grads_report q;
    q.stats.cpu_quota = v;
    EXPECT_TRUE(same_bits(v, round_trip(q).stats.cpu_quota)) << "stage_stats.cpu_quota " << bits_text(v);
    // As the network layer sends it: a whole message, the body type-erased.
    auto msg = caf::make_message(apply_atom::value, m);
    std::vector<char> buf;
    caf::binary_serializer sink{sys(), buf};
    ASSERT_FALSE(sink(msg));
    caf::message back;
    caf::binary_deserializer source{sys(), buf};
    ASSERT_FALSE(source(back));
    ASSERT_TRUE((back.match_elements<apply_atom, apply_msg>()));
    EXPECT_TRUE(same_bits(v, back.get_as<apply_msg>(1).lr)) << "apply_msg.lr in a message " << bits_text(v);
  }
  // Tensors carry their elements as bytes: clipping coefficients, norms,
  // activations.
  auto doubles = hard_values<double>();
  auto floats = hard_values<float>();
  at::Tensor d = at::from_blob(doubles.data(), {static_cast<int64_t>(doubles.size())}, at::kDouble).clone();
  at::Tensor f = at::from_blob(floats.data(), {static_cast<int64_t>(floats.size())}, at::kFloat).clone();
  apply_msg m;
  m.clip_coef = f;
  expect_same(f, round_trip(m).clip_coef);
  grads_report r;
  r.grad_norms = {f, d};
  auto r2 = round_trip(r);
  expect_same(f, r2.grad_norms[0]);
  expect_same(d, r2.grad_norms[1]);
}

// A serializer that writes nothing and counts the values CAF's own float
// serializer (pack754) would have packed: a payload's floating field that
// does not go through exact() shows here.
class float_counter final : public caf::serializer {
public:
  explicit float_counter(caf::actor_system& sys) : caf::serializer(sys) {}
  int floats = 0;
  caf::error begin_object(uint16_t&, std::string&) override { return caf::none; }
  caf::error end_object() override { return caf::none; }
  caf::error begin_sequence(size_t&) override { return caf::none; }
  caf::error end_sequence() override { return caf::none; }
  caf::error apply_raw(size_t, void*) override { return caf::none; }

protected:
  caf::error apply_impl(int8_t&) override { return caf::none; }
  caf::error apply_impl(uint8_t&) override { return caf::none; }
  caf::error apply_impl(int16_t&) override { return caf::none; }
  caf::error apply_impl(uint16_t&) override { return caf::none; }
  caf::error apply_impl(int32_t&) override { return caf::none; }
  caf::error apply_impl(uint32_t&) override { return caf::none; }
  caf::error apply_impl(int64_t&) override { return caf::none; }
  caf::error apply_impl(uint64_t&) override { return caf::none; }
  caf::error apply_impl(float&) override { return ++floats, caf::none; }
  caf::error apply_impl(double&) override { return ++floats, caf::none; }
  caf::error apply_impl(long double&) override { return ++floats, caf::none; }
  caf::error apply_impl(std::string&) override { return caf::none; }
  caf::error apply_impl(std::u16string&) override { return caf::none; }
  caf::error apply_impl(std::u32string&) override { return caf::none; }
};

// Each payload with every sequence non-empty, so that an element type's
// fields are visited too. A payload added to for_each_payload without one
// here does not compile.
template <class T>
T filled(payload_tag<T>) = delete;

activation_msg filled(payload_tag<activation_msg>) {
  activation_msg m;
  m.x = at::ones({2});
  m.y = at::ones({2}, at::kLong);
  return m;
}
gradient_msg filled(payload_tag<gradient_msg>) {
  gradient_msg m;
  m.g = at::ones({2});
  return m;
}
grads_report filled(payload_tag<grads_report>) {
  grads_report r;
  r.grad_norms = {at::ones({2})};
  r.stats.events = {op_event{}};
  r.stats.memory = {{1, 2}};
  r.stats.cuda_memory = {{{1, 2, 3}}};
  r.nonfinite = {0, "activation", 1};
  return r;
}
apply_msg filled(payload_tag<apply_msg>) {
  apply_msg m;
  m.clip_coef = at::scalar_tensor(0.5);
  return m;
}
eval_msg filled(payload_tag<eval_msg>) { return eval_msg{at::ones({1}), at::ones({1}), 0, nullptr}; }
eval_result filled(payload_tag<eval_result>) { return eval_result{1, 2, 3.0}; }
named_params filled(payload_tag<named_params>) { return {{"0.weight", at::ones({1})}}; }
stage_snapshot filled(payload_tag<stage_snapshot>) {
  stage_snapshot s;
  s.weights = {{"0.weight", at::ones({1})}};
  auto opt = std::make_shared<optimizer_state_copy>();
  opt->names = {"0.weight"};
  opt->steps = {1};
  opt->tensors = {{at::ones({1})}};
  s.optimizer = opt;
  return s;
}
stage_status filled(payload_tag<stage_status>) { return stage_status{0, 1, false, "F0"}; }
std::vector<int64_t> filled(payload_tag<std::vector<int64_t>>) { return {1, 2}; }
std::vector<int32_t> filled(payload_tag<std::vector<int32_t>>) { return {1, 2}; }

TEST_F(Wire, NoPayloadHandsAFloatingValueToCafsFloatSerializer) {
  int payloads = 0;
  for_each_payload([&](auto tag, const char* name) {
    ++payloads;
    using T = typename decltype(tag)::type;
    for (T x : {T{}, filled(tag)}) {
      float_counter sink{sys()};
      ASSERT_FALSE(sink(x)) << name;
      EXPECT_EQ(sink.floats, 0) << name << " serializes a float or double with CAF's pack754 (which turns a "
                                           "subnormal into -inf): wrap the field in exact() in its inspect()";
    }
  });
  EXPECT_GE(payloads, 10);
  // The counter sees a plain double, as it would a new unwrapped field.
  float_counter sink{sys()};
  double plain = 0.5;
  ASSERT_FALSE(sink(plain));
  EXPECT_EQ(sink.floats, 1);
}

// Messages that are not payload types: their elements are the handler's
// parameters. A float or a double among them, or in an answer, would go
// through pack754 between processes.
TEST(WireSources, NoMessageHandlerTakesOrAnswersAFloatingValue) {
  namespace fs = std::filesystem;
  const std::regex handler(R"(\[[^\]\n]*\]\s*\(([^)]*)\)\s*(->\s*([^{]*))?\{)");
  const std::regex answer_handler(R"(\.then\(\s*\[[^\]\n]*\]\s*\(([^)]*)\))");
  const std::regex atom_param(R"(\w+_atom\b)");
  const std::regex floating(R"(\b(float|double)\b)");
  int files = 0, handlers = 0;
  std::string found;
  for (const char* dir : {"actors", "apps", "runtime"}) {
    for (const auto& entry : fs::recursive_directory_iterator(fs::path(ACTORPIPE_SOURCE_DIR) / dir)) {
      const auto ext = entry.path().extension();
      if (ext != ".cpp" && ext != ".hpp") continue;
      std::ifstream in(entry.path());
      std::stringstream text;
      text << in.rdbuf();
      const std::string src = text.str();
      ++files;
      for (std::sregex_iterator it(src.begin(), src.end(), handler), end; it != end; ++it) {
        const std::string params = (*it)[1].str(), answer = (*it)[3].str();
        if (!std::regex_search(params, atom_param)) continue;
        ++handlers;
        if (std::regex_search(params, floating) || std::regex_search(answer, floating))
          found += entry.path().string() + ": (" + params + ")" + (answer.empty() ? "" : " -> " + answer) + "\n";
      }
      for (std::sregex_iterator it(src.begin(), src.end(), answer_handler), end; it != end; ++it) {
        ++handlers;
        if (std::regex_search((*it)[1].str(), floating))
          found += entry.path().string() + ": .then(" + (*it)[1].str() + ")\n";
      }
    }
  }
  EXPECT_GT(files, 50);
  EXPECT_GT(handlers, 30);  // the scan finds the handlers it is meant to check
  EXPECT_TRUE(found.empty()) << "message handlers with a float or double (send its bits, or a payload with "
                                "exact()):\n"
                             << found;
}

}  // namespace
}  // namespace actorpipe
