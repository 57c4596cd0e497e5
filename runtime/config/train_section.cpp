// train: steps, batch size, seed, clipping, the optimizer and the lr schedule.
#include "runtime/config/sections.hpp"

namespace actorpipe::config_detail {

namespace {

/// betas: [beta1, beta2], each in [0, 1).
void read_betas(reader& r, const entry& be, optimizer_config& o) {
  const std::string path = "train.optimizer.betas";
  const Node& b = be.value;
  if (!b.IsSequence() || b.size() != 2)
    r.fail(reader::value_mark(be), path, "expected a list of two numbers [beta1, beta2], found " +
                                             (b.IsSequence() ? "a list of length " + std::to_string(b.size()) : describe(b)));
  double* beta[2] = {&o.beta1, &o.beta2};
  for (size_t i = 0; i < 2; ++i) {
    const std::string key = item(path, i);
    r.mark(key, b[i]);
    *beta[i] = r.parse_number(entry{b[i], b[i]}, key);
    r.unit_interval(key, *beta[i]);
  }
}

void read_optimizer(reader& r, const entry& oe, optimizer_config& o) {
  const section s = r.read_map(oe.value, "train.optimizer");
  r.read_choice(s, "type", "optimizer", {"adam", "sgd"}, o.type);
  if (o.type == "adam")
    r.only_keys(s, {"type", "lr", "betas", "eps", "weight_decay"}, "the adam optimizer", [](auto&) { return "sgd"; });
  else
    r.only_keys(s, {"type", "lr", "momentum", "weight_decay"}, "the sgd optimizer", [](auto&) { return "adam"; });
  static const std::vector<field<optimizer_config>> lr{{"lr", &optimizer_config::lr, rule::positive()}};
  r.read_fields(s, o, lr);
  if (const entry* be = s.find("betas")) read_betas(r, *be, o);
  static const std::vector<field<optimizer_config>> rest{
      {"eps", &optimizer_config::eps, rule::positive()},
      {"weight_decay", &optimizer_config::weight_decay, rule::at_least(0)},
      {"momentum", &optimizer_config::momentum, rule::at_least(0)},
  };
  r.read_fields(s, o, rest);
}

void read_lr_schedule(reader& r, const entry& le, lr_schedule_config& l) {
  const section s = r.read_map(le.value, "train.lr_schedule");
  r.read_choice(s, "type", "lr schedule", {"none", "step"}, l.type);
  if (l.type == "none") r.only_keys(s, {"type"}, "lr_schedule none", [](auto&) { return "step"; });
  static const std::vector<field<lr_schedule_config>> fields{
      {"step_size", &lr_schedule_config::step_size, rule::at_least(1)},
      {"gamma", &lr_schedule_config::gamma, rule::positive()},
  };
  r.read_fields(s, l, fields);
}

}  // namespace

void read_train(reader& r, const entry* e) {
  auto& t = r.cfg().train;
  const section s = r.read_map(e ? e->value : Node(), "train");
  static const std::vector<field<train_config>> fields{
      {"steps", &train_config::steps, rule::count()},
      {"batch_size", &train_config::batch_size, rule::count()},
      {"clip_grad_norm", &train_config::clip_grad_norm, rule::positive()},
      {"seed", &train_config::seed, rule::at_least(0)},
  };
  r.read_fields(s, t, fields);
  if (const entry* oe = s.find("optimizer")) read_optimizer(r, *oe, t.optimizer);
  if (const entry* le = s.find("lr_schedule")) read_lr_schedule(r, *le, t.lr_schedule);
}

}  // namespace actorpipe::config_detail
