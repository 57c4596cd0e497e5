// runtime/model/model: seeded construction, parameter counts, init_from against
// Python's own reference values, order-free dropout, activation accounting.
#include "runtime/model/model.hpp"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/config/config.hpp"

namespace actorpipe {
namespace {

layer_spec linear(int64_t in, int64_t out) {
  layer_spec s;
  s.type = "linear";
  s.in = in;
  s.out = out;
  return s;
}
layer_spec act(const std::string& type) {
  layer_spec s;
  s.type = type;
  return s;
}
layer_spec layernorm(int64_t dim) {
  layer_spec s;
  s.type = "layernorm";
  s.dim = dim;
  return s;
}
layer_spec dropout(double p) {
  layer_spec s;
  s.type = "dropout";
  s.p = p;
  return s;
}

config make_config(std::vector<layer_spec> layers, uint64_t seed = 42,
                   const std::string& init_from = "") {
  config cfg;
  cfg.path = "in_memory.yaml";
  cfg.model.layers = std::move(layers);
  cfg.model.init_from = init_from;
  cfg.train.seed = seed;
  return cfg;
}

/// The fixture's model: nn.Sequential(Linear(4,3), ReLU(), LayerNorm(3), Linear(3,2)).
std::vector<layer_spec> fixture_layers() {
  return {linear(4, 3), act("relu"), layernorm(3), linear(3, 2)};
}

const std::string fixture_pt = std::string(ACTORPIPE_TEST_DATA) + "/state_dict_ordered.pt";

std::map<std::string, at::Tensor> named(const std::vector<layer>& layers) {
  std::map<std::string, at::Tensor> out;
  for (const auto& l : layers)
    for (const auto& [name, t] : l.parameters()) out[std::to_string(l.index()) + "." + name] = t;
  return out;
}

/// Python's reference: `name dtype ndim dims... values...` per line.
std::map<std::string, at::Tensor> read_reference(const std::string& path) {
  std::map<std::string, at::Tensor> out;
  std::ifstream f(path);
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream is(line);
    std::string name, kind;
    int ndim = 0;
    is >> name >> kind >> ndim;
    std::vector<int64_t> dims(ndim);
    for (auto& d : dims) is >> d;
    std::vector<double> values;
    for (double v; is >> v;) values.push_back(v);
    out[name] = torch::tensor(values, torch::kDouble).reshape(dims);
  }
  return out;
}

std::string config_error_of(const config& cfg) {
  try {
    build_layers(cfg);
  } catch (const config_error& e) {
    return e.what();
  }
  return "(no error)";
}

// -- construction ---------------------------------------------------------------

TEST(BuildLayers, SameSeedGivesIdenticalWeights) {
  auto cfg = make_config({linear(8, 16), act("relu"), layernorm(16), linear(16, 4)}, 7);
  auto a = named(build_layers(cfg));
  torch::manual_seed(999);  // the global RNG state before the call must not matter
  torch::rand({100});
  auto b = named(build_layers(cfg));
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) EXPECT_TRUE(torch::equal(t, b.at(name))) << name;
}

TEST(BuildLayers, DifferentSeedGivesDifferentWeights) {
  auto a = named(build_layers(make_config({linear(8, 16), act("relu"), linear(16, 4)}, 1)));
  auto b = named(build_layers(make_config({linear(8, 16), act("relu"), linear(16, 4)}, 2)));
  for (const char* name : {"0.weight", "0.bias", "2.weight", "2.bias"})
    EXPECT_FALSE(torch::equal(a.at(name), b.at(name))) << name;
}

TEST(BuildLayers, ParameterNamesFollowTorchSequential) {
  auto layers = build_layers(make_config(fixture_layers()));
  std::vector<std::string> names;
  for (const auto& [name, t] : layer_stack(std::move(layers)).named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias",
                                             "3.weight", "3.bias"}));
}

// A heal's stand-ins: the layers asked for with build_layers' names and
// shapes (a linear one's tensors uninitialised), parameterless ones in the
// other places; given the built weights they compute what the built
// layers compute, and train (their gradients have the weights' shapes).
TEST(StandInLayers, HoldTheNeededLayersAndComputeOnceGivenTheirWeights) {
  const auto cfg = make_config({linear(4, 6), act("relu"), linear(6, 5), act("relu"), layernorm(5), linear(5, 3)});
  auto built = build_layers(cfg);
  auto stand = stand_in_layers(cfg, [](int i) { return i >= 2; });
  ASSERT_EQ(stand.size(), built.size());
  EXPECT_TRUE(stand[0].parameters().empty()) << "layer 0 is not needed";
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 2; i < built.size(); ++i) {
      const auto want = built[i].parameters(), got = stand[i].parameters();
      ASSERT_EQ(got.size(), want.size()) << "layer " << i;
      for (size_t k = 0; k < got.size(); ++k) {
        EXPECT_EQ(got[k].first, want[k].first);
        EXPECT_EQ(got[k].second.sizes(), want[k].second.sizes()) << "layer " << i << " " << got[k].first;
        EXPECT_TRUE(got[k].second.requires_grad());
        got[k].second.copy_(want[k].second);
      }
    }
  }
  std::vector<layer> tail_built, tail_stand;
  for (size_t i = 2; i < built.size(); ++i) {
    tail_built.push_back(std::move(built[i]));
    tail_stand.push_back(std::move(stand[i]));
  }
  layer_stack a(std::move(tail_built)), b(std::move(tail_stand));
  const auto x = torch::randn({7, 6});
  forward_ctx ctx;
  const auto ya = a.forward(x, ctx, nullptr), yb = b.forward(x, ctx, nullptr);
  EXPECT_TRUE(torch::equal(ya, yb));
  yb.sum().backward();
  for (const auto& t : b.parameters()) {
    ASSERT_TRUE(t.grad().defined());
    EXPECT_EQ(t.grad().sizes(), t.sizes());
  }
}

TEST(LayerParameterCounts, MatchesTheBuiltModulesNumel) {
  std::vector<layer_spec> specs = {linear(64, 256), act("gelu"),  layernorm(256), dropout(0.1),
                                   act("tanh"),     linear(256, 10), act("relu")};
  auto counts = layer_parameter_counts(specs);
  auto layers = build_layers(make_config(specs));
  ASSERT_EQ(counts.size(), layers.size());
  for (size_t i = 0; i < layers.size(); ++i) {
    int64_t numel = 0;
    for (const auto& [name, t] : layers[i].parameters()) numel += t.numel();
    EXPECT_EQ(counts[i], numel) << "layer " << i << " (" << specs[i].type << ")";
    EXPECT_EQ(layers[i].parameter_count(), numel);
  }
  // torch.nn.Linear(64, 256) has 64*256 weights and 256 biases.
  EXPECT_EQ(counts[0], 64 * 256 + 256);
}

// -- init_from ------------------------------------------------------------------

TEST(BuildLayersInitFrom, LoadsPythonStateDictValues) {
  auto layers = build_layers(make_config(fixture_layers(), 42, fixture_pt));
  auto got = named(layers);
  auto want = read_reference(std::string(ACTORPIPE_TEST_DATA) + "/state_dict_ordered.txt");
  ASSERT_EQ(want.size(), 6u);
  ASSERT_EQ(got.size(), want.size());
  for (const auto& [name, ref] : want) {
    ASSERT_TRUE(got.count(name)) << name;
    const auto& t = got.at(name);
    EXPECT_EQ(t.sizes(), ref.sizes()) << name;
    EXPECT_EQ(t.scalar_type(), torch::kFloat) << name;
    // The reference prints each float32 exactly (repr of its double value).
    EXPECT_TRUE(torch::equal(t.to(torch::kDouble), ref)) << name;
  }
}

TEST(BuildLayersInitFrom, LoadedModelComputesWithTheLoadedWeights) {
  auto want = read_reference(std::string(ACTORPIPE_TEST_DATA) + "/state_dict_ordered.txt");
  layer_stack stack(build_layers(make_config(fixture_layers(), 42, fixture_pt)));
  auto x = torch::randn({5, 4});
  forward_ctx ctx;
  auto y = stack.forward(x, ctx, nullptr);
  // The same network written out with plain tensor ops.
  auto h = torch::relu(torch::matmul(x, want["0.weight"].to(torch::kFloat).t()) +
                       want["0.bias"].to(torch::kFloat));
  h = torch::layer_norm(h, {3}, want["2.weight"].to(torch::kFloat), want["2.bias"].to(torch::kFloat));
  auto ref = torch::matmul(h, want["3.weight"].to(torch::kFloat).t()) + want["3.bias"].to(torch::kFloat);
  EXPECT_TRUE(torch::allclose(y, ref, 1e-5, 1e-6));
}

TEST(BuildLayersInitFrom, WrongShapeNamesKeyAndBothShapes) {
  // Linear(4,3) -> Linear(4,5): the first saved tensor no longer fits.
  auto msg = config_error_of(make_config({linear(4, 5), act("relu"), layernorm(5), linear(5, 2)},
                                         42, fixture_pt));
  EXPECT_EQ(msg.rfind("in_memory.yaml: model.init_from: ", 0), 0u) << msg;
  EXPECT_NE(msg.find("'0.weight'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[3, 4]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[5, 4]"), std::string::npos) << msg;
}

TEST(BuildLayersInitFrom, MissingKeyIsNamed) {
  // One more linear layer than the file has.
  auto layers = fixture_layers();
  layers.push_back(act("relu"));
  layers.push_back(linear(2, 2));
  auto msg = config_error_of(make_config(layers, 42, fixture_pt));
  EXPECT_NE(msg.find("model.init_from: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing key '5."), std::string::npos) << msg;
}

TEST(BuildLayersInitFrom, UnexpectedKeyIsNamed) {
  // The file's last Linear (3.*) has no counterpart.
  auto msg = config_error_of(
      make_config({linear(4, 3), act("relu"), layernorm(3)}, 42, fixture_pt));
  EXPECT_NE(msg.find("model.init_from: "), std::string::npos) << msg;
  EXPECT_NE(msg.find("unexpected key '3."), std::string::npos) << msg;
}

TEST(BuildLayersInitFrom, UnreadableFileIsAConfigError) {
  const std::string bad = ::testing::TempDir() + "/actorpipe_model_test_not_a_pickle.pt";
  std::ofstream(bad) << "this is not a torch.save file";
  auto msg = config_error_of(make_config(fixture_layers(), 42, bad));
  EXPECT_EQ(msg.rfind("in_memory.yaml: model.init_from: ", 0), 0u) << msg;
}

// -- dropout --------------------------------------------------------------------

forward_ctx ctx_of(uint64_t seed, int64_t step, int32_t mb, bool training = true) {
  forward_ctx c;
  c.seed = seed;
  c.step = step;
  c.mb = mb;
  c.training = training;
  return c;
}

TEST(Dropout, MaskDependsOnlyOnSeedStepMicrobatchAndLayer) {
  layer d(3, dropout(0.5));
  auto x = torch::ones({16, 64});
  auto a1 = d.forward(x, ctx_of(1, 2, 3));
  auto b1 = d.forward(x, ctx_of(1, 2, 4));
  torch::manual_seed(12345);  // global RNG state is irrelevant
  auto a2 = d.forward(x, ctx_of(1, 2, 3));
  auto b2 = d.forward(x, ctx_of(1, 2, 4));
  EXPECT_TRUE(torch::equal(a1, a2));
  EXPECT_TRUE(torch::equal(b1, b2));
  EXPECT_FALSE(torch::equal(a1, b1)) << "another microbatch must draw another mask";
  EXPECT_FALSE(torch::equal(a1, d.forward(x, ctx_of(1, 3, 3)))) << "another step";
  EXPECT_FALSE(torch::equal(a1, d.forward(x, ctx_of(2, 2, 3)))) << "another seed";
  layer other(4, dropout(0.5));
  EXPECT_FALSE(torch::equal(a1, other.forward(x, ctx_of(1, 2, 3)))) << "another layer";
  layer same_index(3, dropout(0.5));
  EXPECT_TRUE(torch::equal(a1, same_index.forward(x, ctx_of(1, 2, 3)))) << "a copy of the layer";
}

TEST(Dropout, KeptUnitsAreScaledByOneOverKeepProbability) {
  layer d(0, dropout(0.25));
  auto x = torch::rand({64, 64}) + 1.0;
  auto y = d.forward(x, ctx_of(5, 0, 0));
  auto kept = y != 0;
  EXPECT_TRUE(torch::allclose(y.masked_select(kept), x.masked_select(kept) / 0.75));
  double keep_rate = kept.to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(keep_rate, 0.75, 0.03);  // 4096 draws: ~5 sigma
}

TEST(Dropout, EvalModeIsIdentity) {
  layer d(0, dropout(0.5));
  auto x = torch::randn({8, 8});
  EXPECT_TRUE(torch::equal(d.forward(x, ctx_of(1, 2, 3, false)), x));
  layer zero(0, dropout(0.0));
  EXPECT_TRUE(torch::equal(zero.forward(x, ctx_of(1, 2, 3, true)), x));
}

// -- layer_stack ----------------------------------------------------------------

TEST(LayerStack, ForwardAddsEveryLayerOutputsBytes) {
  layer_stack stack(build_layers(make_config({linear(8, 16), act("relu"), linear(16, 4)})));
  const int64_t batch = 5;
  auto x = torch::randn({batch, 8});
  int64_t bytes = 100;  // it adds to what is there
  auto y = stack.forward(x, forward_ctx{}, &bytes);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{batch, 4}));
  // Outputs: [5,16] + [5,16] + [5,4] float32.
  EXPECT_EQ(bytes, 100 + (batch * 16 + batch * 16 + batch * 4) * 4);

  auto xd = torch::randn({3, 8}, torch::kDouble);
  layer_stack dstack(build_layers(make_config({linear(8, 16), act("relu"), linear(16, 4)})));
  for (auto& p : dstack.parameters()) p.set_data(p.to(torch::kDouble));
  int64_t dbytes = 0;
  dstack.forward(xd, forward_ctx{}, &dbytes);
  EXPECT_EQ(dbytes, (3 * 16 + 3 * 16 + 3 * 4) * 8);
}

TEST(LayerStack, ForwardEqualsLayerByLayerForward) {
  layer_stack stack(build_layers(make_config({linear(8, 16), act("gelu"), layernorm(16),
                                              act("tanh"), linear(16, 4)})));
  auto x = torch::randn({6, 8});
  forward_ctx ctx;
  auto h = x;
  for (const auto& l : stack.layers()) h = l.forward(h, ctx);
  EXPECT_TRUE(torch::equal(stack.forward(x, ctx, nullptr), h));
}

}  // namespace
}  // namespace actorpipe
