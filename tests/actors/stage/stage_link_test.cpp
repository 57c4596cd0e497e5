// actors/stage_link: a record from another process is checked against the
// width its chunk expects before it reaches the stage. The widths come from
// the config's layer specs (output_width); here they are held against the
// widths the layers really give, run on a batch, and a wrong one is one
// line naming both stages.
#include "actors/stage/stage_link.hpp"

#include <ATen/ATen.h>
#include <caf/all.hpp>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "messages/atoms.hpp"
#include "runtime/config/config.hpp"
#include "runtime/model/model.hpp"
#include "runtime/model/partition.hpp"

namespace actorpipe {
namespace {

// Every boundary of the config's partition: the width the specs give, and
// the width running the layers up to it gives; and the largest boundary's
// bytes for one microbatch against that width.
void expect_widths_of(const std::string& file) {
  const config cfg = load_config(std::string(ACTORPIPE_SOURCE_DIR) + "/configs/" + file);
  const auto layers = build_layers(cfg);
  const auto parts = partition_for(cfg);
  torch::NoGradGuard no_grad;
  at::Tensor x = at::randn({3, cfg.model.layers.front().in});
  forward_ctx ctx;
  ctx.training = false;
  int64_t widest = 0;
  for (size_t k = 0; k < parts.size(); ++k) {
    for (int i = parts[k].first; i <= parts[k].second; ++i) x = layers[static_cast<size_t>(i)].forward(x, ctx);
    EXPECT_EQ(output_width(cfg.model.layers, parts[k].second), x.size(-1)) << file << ": after layer " << parts[k].second;
    if (k + 1 < parts.size()) widest = std::max<int64_t>(widest, x.size(-1));
  }
  ASSERT_NE(cfg.data.kind, "text") << file << ": the rows below leave out a sequence";
  const int64_t rows = (cfg.train.batch_size + cfg.parallel.dp * cfg.pipeline.microbatches - 1) /
                       (cfg.parallel.dp * cfg.pipeline.microbatches);
  EXPECT_EQ(largest_boundary_bytes(cfg, parts), rows * widest * 4 + rows * 8) << file;
}

TEST(StageLink, BoundaryWidthsFromTheSpecsAreWhatTheLayersGive) {
  expect_widths_of("seed_mlp.yaml");
  expect_widths_of("digits_mlp.yaml");
}

op_record activation(int from, int chunk, at::Tensor x) {
  op_record r;
  r.kind = 0;
  r.from = from;
  r.chunk = chunk;
  r.tensors = {std::move(x), at::zeros({16}, at::kLong)};
  return r;
}

TEST(StageLink, ARecordOfTheWrongWidthIsOneLineNamingBothStages) {
  const std::vector<int64_t> in{0, 128}, out{128, 0};  // chunk 0 gets the microbatch; chunk 1's output is the loss's
  EXPECT_EQ(record_mismatch(activation(1, 1, at::zeros({16, 128})), 2, in, out), "");
  EXPECT_EQ(record_mismatch(activation(1, 1, at::zeros({16, 64})), 2, in, out),
            "stage 2 expected an activation of shape [16, 128] from stage 1, got [16, 64]");
  // A transformer's activations: only the last dimension is the width.
  EXPECT_EQ(record_mismatch(activation(0, 1, at::zeros({4, 32, 96})), 1, in, out),
            "stage 1 expected an activation of shape [4, 32, 128] from stage 0, got [4, 32, 96]");
  op_record g;
  g.kind = 1;
  g.from = 3;
  g.chunk = 0;
  g.tensors = {at::zeros({16, 100})};
  EXPECT_EQ(record_mismatch(g, 2, in, out), "stage 2 expected a gradient of shape [16, 128] from stage 3, got [16, 100]");
  // Unchecked: an unknown width, a chunk out of range, the null device's empty tensors.
  EXPECT_EQ(record_mismatch(activation(1, 0, at::zeros({16, 7})), 2, in, out), "");
  EXPECT_EQ(record_mismatch(activation(1, 5, at::zeros({16, 7})), 2, in, out), "");
  EXPECT_EQ(record_mismatch(activation(1, 1, at::empty({0})), 2, in, out), "");
}

bool same_bytes(const at::Tensor& a, const at::Tensor& b) {
  return a.defined() && b.defined() && a.sizes() == b.sizes() && a.scalar_type() == b.scalar_type() &&
         std::memcmp(a.data_ptr(), b.data_ptr(), a.nbytes()) == 0;
}

// What the data plane's reader thread hands a real stage actor: the
// message with the record's ids and tensors, or (a wrong width) the stage
// taken down with the line.
TEST(StageLink, ARecordBecomesTheStagesMessageOrTakesItDownWithTheLine) {
  caf::actor_system_config cfg;
  caf::actor_system sys{cfg};
  caf::scoped_actor observer{sys};
  const caf::actor to = observer;
  auto stage = sys.spawn([to](caf::event_based_actor* self) -> caf::behavior {
    self->set_exit_handler([=](caf::exit_msg& m) {
      self->send(to, self->system().render(m.reason));
      self->quit(m.reason);
    });
    return {[=](fwd_atom, activation_msg& m) { self->send(to, m); },
            [=](bwd_atom, gradient_msg& m) { self->send(to, m); }};
  });
  auto inbox = record_inbox(stage.address(), 2, "cpu", {0, 128}, {128, 0});
  const auto wait = std::chrono::seconds(10);
  op_record f = activation(1, 1, at::randn({16, 128}));
  f.epoch = 3;
  f.step = 7;
  f.mb = 5;
  f.round = 11;
  inbox(f);
  bool got = false;
  observer->receive(
      [&](activation_msg& m) {
        got = true;
        EXPECT_EQ(m.h.epoch, 3u);
        EXPECT_EQ(m.h.step, 7);
        EXPECT_EQ(m.h.mb, 5);
        EXPECT_EQ(m.h.chunk, 1);
        EXPECT_EQ(m.h.round, 11);
        EXPECT_TRUE(same_bytes(m.x, f.tensors[0]));
        EXPECT_TRUE(same_bytes(m.y, f.tensors[1]));
      },
      caf::after(wait) >> [] {});
  EXPECT_TRUE(got) << "no activation reached the stage";
  op_record g;
  g.kind = 1;
  g.from = 3;
  g.chunk = 0;
  g.step = 7;
  g.mb = 2;
  g.tensors = {at::randn({16, 128})};
  inbox(g);
  got = false;
  observer->receive(
      [&](gradient_msg& m) {
        got = true;
        EXPECT_EQ(m.h.mb, 2);
        EXPECT_TRUE(same_bytes(m.g, g.tensors[0]));
      },
      caf::after(wait) >> [] {});
  EXPECT_TRUE(got) << "no gradient reached the stage";
  inbox(activation(1, 1, at::zeros({16, 64})));
  std::string why;
  observer->receive([&](std::string& s) { why = s; }, caf::after(wait) >> [] {});
  EXPECT_NE(why.find("stage 2 expected an activation of shape [16, 128] from stage 1, got [16, 64]"), std::string::npos)
      << why;
}

}  // namespace
}  // namespace actorpipe
