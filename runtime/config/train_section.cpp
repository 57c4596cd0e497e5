// train: steps, batch size, seed, clipping, the optimizer and the lr schedule.
#include "runtime/config/sections.hpp"

#include <limits>
#include <map>

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

/// A rate LibTorch takes as a float: past float32's largest it refuses it
/// mid-run, with a message that names no key.
void float_rate(const reader& r, const std::string& key, double v) {
  if (v > static_cast<double>(std::numeric_limits<float>::max()))
    r.fail_key(key, num(v) + " is past float32's largest value (" + num(std::numeric_limits<float>::max()) +
                        "), which the optimizer computes in");
}

void read_optimizer(reader& r, const entry& oe, optimizer_config& o) {
  const section s = r.read_map(oe.value, "train.optimizer");
  r.read_choice(s, "type", "optimizer", {"adam", "adamw", "sgd"}, o.type);
  auto owner = [](const std::string& k) { return k == "momentum" ? "sgd" : k == "decay_1d" ? "adamw" : "adam and adamw"; };
  if (o.type == "adam")
    r.only_keys(s, {"type", "lr", "betas", "eps", "weight_decay"}, "the adam optimizer", owner);
  else if (o.type == "adamw")
    r.only_keys(s, {"type", "lr", "betas", "eps", "weight_decay", "decay_1d"}, "the adamw optimizer", owner);
  else
    r.only_keys(s, {"type", "lr", "momentum", "weight_decay"}, "the sgd optimizer", owner);
  if (o.type == "adamw") o.weight_decay = 0.01;  // torch.optim.AdamW's default
  static const std::vector<field<optimizer_config>> lr{{"lr", &optimizer_config::lr, rule::positive()}};
  r.read_fields(s, o, lr);
  float_rate(r, "train.optimizer.lr", o.lr);
  if (const entry* be = s.find("betas")) read_betas(r, *be, o);
  static const std::vector<field<optimizer_config>> rest{
      {"eps", &optimizer_config::eps, rule::positive()},
      {"weight_decay", &optimizer_config::weight_decay, rule::at_least(0)},
      {"momentum", &optimizer_config::momentum, rule::at_least(0)},
      {"decay_1d", &optimizer_config::decay_1d},
  };
  r.read_fields(s, o, rest);
}

void read_lr_schedule(reader& r, const entry& le, lr_schedule_config& l) {
  const section s = r.read_map(le.value, "train.lr_schedule");
  r.read_choice(s, "type", "lr schedule", {"none", "step", "cosine", "linear", "constant"}, l.type);
  auto owner = [](const std::string& k) {
    return k == "step_size" || k == "gamma" ? "step" : k == "warmup_steps" ? "cosine, linear and constant" : "cosine and linear";
  };
  static const std::map<std::string, std::vector<std::string>> keys{
      {"none", {"type"}},
      {"step", {"type", "step_size", "gamma"}},
      {"constant", {"type", "warmup_steps"}},
      {"cosine", {"type", "warmup_steps", "decay_steps", "min_lr"}},
      {"linear", {"type", "warmup_steps", "decay_steps", "min_lr"}}};
  r.only_keys(s, keys.at(l.type), "lr_schedule " + l.type, owner);
  static const std::vector<field<lr_schedule_config>> fields{
      {"step_size", &lr_schedule_config::step_size, rule::at_least(1)},
      {"gamma", &lr_schedule_config::gamma, rule::positive()},
      {"warmup_steps", &lr_schedule_config::warmup_steps, rule::count(0)},
      {"decay_steps", &lr_schedule_config::decay_steps, rule::count(1)},
      {"min_lr", &lr_schedule_config::min_lr, rule::at_least(0)},
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
  if (t.lr_schedule.min_lr > t.optimizer.lr)
    r.fail_key("train.lr_schedule.min_lr", num(t.lr_schedule.min_lr) + " is above train.optimizer.lr " +
                                               num(t.optimizer.lr) + "; the decay would raise the rate");
}

void read_eval(reader& r, const entry* e) {
  if (!e) return;
  const section s = r.read_map(e->value, "eval");
  if (!s.has("every")) r.fail_key("eval.every", "required: evaluate after every this many updates");
  static const std::vector<field<eval_config>> fields{
      {"every", &eval_config::every, rule::count(1)},
      {"batches", &eval_config::batches, rule::count(1)},
  };
  r.read_fields(s, r.cfg().eval, fields);
}

}  // namespace actorpipe::config_detail
