// The sections around the pipeline: parallel, checkpoint, supervision and
// compare. What they need of the schedule and the batch is in
// cross_checks.cpp.
#include "runtime/config/sections.hpp"

#include "runtime/util/text.hpp"

#include <algorithm>

namespace actorpipe::config_detail {

void read_parallel(reader& r, const entry* e) {
  if (!e) return;
  const section s = r.read_map(e->value, "parallel");
  static const std::vector<field<parallel_config>> fields{
      {"dp", &parallel_config::dp, rule::at_least(1)},
      {"allreduce", &parallel_config::allreduce, rule::one_of("allreduce backend", {"auto", "gloo", "nccl"})},
  };
  r.read_fields(s, r.cfg().parallel, fields);
}

void read_checkpoint(reader& r, const entry* e) {
  if (!e) return;
  auto& c = r.cfg().checkpoint;
  const section s = r.read_map(e->value, "checkpoint");
  if (!r.read_string(s, "dir", c.dir) || c.dir.empty()) r.fail_key("checkpoint.dir", "expected a directory path");
  c.dir = r.resolve_path(c.dir);
  c.every = 1;
  static const std::vector<field<checkpoint_config>> fields{
      {"every", &checkpoint_config::every, rule::at_least(1)},
      {"keep_last", &checkpoint_config::keep_last, rule::at_least(0)},
  };
  r.read_fields(s, c, fields);
}

void read_supervision(reader& r, const entry* e) {
  if (!e) return;
  const section s = r.read_map(e->value, "supervision");
  using sc = supervision_config;
  static const std::vector<field<sc>> fields{
      {"op_timeout_ms", &sc::op_timeout_ms, rule::ms()},
      {"max_restarts", &sc::max_restarts, rule::at_least(0)},
      {"window_steps", &sc::window_steps, rule::at_least(1)},
      {"copy_every", &sc::copy_every, rule::at_least(1)},
      // A day: far beyond any op, and a period the watchdog's timer can hold.
      {"watchdog_s", &sc::watchdog_s, rule::at_least(0, 86400, "86400 (one day)")},
      {"on_nonfinite", &sc::on_nonfinite, rule::one_of("non-finite policy", {"skip", "stop"})},
      {"check_updates", &sc::check_updates},
      {"max_skipped_fraction", &sc::max_skipped_fraction, rule::within_unit()},
      {"connect_timeout_s", &sc::connect_timeout_s, rule::at_least(1, 86400, "86400 (one day)")},
      // Heartbeats go every 0.5 s: a timeout of 1 s misses one at most.
      {"heartbeat_timeout_s", &sc::heartbeat_timeout_s, rule::at_least(1, 86400, "86400 (one day)")},
      {"replace_timeout_s", &sc::replace_timeout_s, rule::at_least(0, 86400, "86400 (one day)")},
      {"shrink", &sc::shrink, rule::one_of("shrink mode", {"recut", "double_up"})},
  };
  r.read_fields(s, r.cfg().supervision, fields);
}

void read_compare(reader& r, const entry* e) {
  if (!e) return;
  const section s = r.read_map(e->value, "compare");
  const entry* se = s.find("schedules");
  if (!se) return;
  const std::string path = "compare.schedules";
  if (!se->value.IsSequence() || se->value.size() == 0)
    r.fail(reader::value_mark(*se), path, "expected a non-empty list of schedules, found " + describe(se->value));
  const auto& known = known_schedules();
  for (size_t i = 0; i < se->value.size(); ++i) {
    const Node n = se->value[i];
    const std::string key = item(path, i);
    r.mark(key, n);
    if (!n.IsScalar()) r.fail(n, key, "expected a schedule name, found " + describe(n));
    const std::string name = n.Scalar();
    if (std::find(known.begin(), known.end(), name) == known.end())
      r.fail(n, key, "unknown schedule " + quoted_input(name) + did_you_mean(name, known) + " (known: " + join(known) + ")");
    r.cfg().compare_schedules.push_back(name);
  }
}

}  // namespace actorpipe::config_detail
