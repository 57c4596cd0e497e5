// faults: the injected faults. The only place that turns a fault kind's
// name into a fault_kind. Whether a fault's stage, replica and microbatch
// exist is a cross-section check; the indices wait in read_facts.
#include "runtime/config/sections.hpp"

#include "messages/ops.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe::config_detail {

namespace {

fault_kind read_kind(reader& r, const section& s, const std::string& key) {
  std::string kind;
  if (!r.read_string(s, "kind", kind) || kind.empty()) r.fail_key(key, "needs a kind");
  if (auto k = fault_kind_named(kind)) return *k;
  std::vector<std::string> kinds;
  for (const auto& i : fault_kinds()) kinds.push_back(i.name);
  r.fail_key(key + ".kind", "unknown fault kind " + quoted_input(kind) + did_you_mean(kind, kinds) + " (known: " +
                                join(kinds) + ")");
}

/// An index at least 0, kept as written for the cross-section checks and
/// stored (as an int) in `out`.
std::optional<int64_t> read_index(reader& r, const section& s, const char* name, int& out) {
  int64_t x = 0;
  if (!r.read_int(s, name, x)) return std::nullopt;
  r.at_least(s.path + "." + name, x, 0);
  out = static_cast<int>(x);
  return x;
}

/// probability, ms and factor: how often and how much.
void read_amounts(reader& r, const section& s, fault_spec& spec) {
  const std::string& key = s.path;
  if (r.read_number(s, "probability", spec.probability) && !(spec.probability >= 0 && spec.probability <= 1))
    r.fail_key(key + ".probability", "must be within [0, 1], found " + std::to_string(spec.probability));
  if (r.read_number(s, "ms", spec.ms)) r.ms_in_range(key + ".ms", spec.ms);
  if (r.read_number(s, "factor", spec.factor) && !(spec.factor >= 1.0))
    r.fail_key(key + ".factor", "must be at least 1 (a slower stage), found " + std::to_string(spec.factor));
  // Every op of the stage sleeps factor - 1 times its own time.
  if (spec.factor > 1000) r.fail_key(key + ".factor", "must be at most 1000, found " + num(spec.factor));
}

void read_fault(reader& r, const Node& n, const std::string& key) {
  r.mark(key, n);
  if (!n.IsMap()) r.fail(n, key, "expected a map such as {kind: nonfinite, stage: 1, step: 5, microbatch: 2}");
  const section s = r.read_map(n, key);
  fault_spec spec;
  fault_indices at;
  spec.kind = read_kind(r, s, key);
  const fault_kind_info& kind_info = info(spec.kind);
  at.from = read_index(r, s, "from", spec.from);
  at.to = read_index(r, s, "to", spec.to);
  read_amounts(r, s, spec);
  if (const char* name = kind_info.op_key) {
    if (!r.read_string(s, name, spec.op)) r.fail_key(key, std::string("needs ") + name + ", e.g. F5 or B2");
    // A process's kill or stop can also come right after the step's update.
    const bool of_process = spec.kind == fault_kind::kill_process || spec.kind == fault_kind::stop_process;
    if (!(of_process && spec.op == "update") && !parse_op(spec.op))
      r.fail_key(key + "." + name, std::string("expected an op such as F5, B2 or W3") + (of_process ? ", or update" : "") +
                                       ", found " + quoted_input(spec.op));
  }
  at.stage = read_index(r, s, "stage", spec.stage);
  at.replica = read_index(r, s, "replica", spec.replica);
  if (at.replica && kind_info.picks_messages)
    r.fail_key(key + ".replica", std::string(kind_info.name) + " picks messages of every replica; replica is for a stage's faults");
  if (r.read_int(s, "step", spec.step)) r.at_least(key + ".step", spec.step, 0);
  at.microbatch = read_index(r, s, "microbatch", spec.microbatch);
  std::string where = "grad";
  r.read_choice(s, "where", "place for the value", {"grad", "activation", "update"}, where);
  spec.where = where == "activation" ? nonfinite_site::activation
               : where == "update"   ? nonfinite_site::update
                                     : nonfinite_site::grad;
  if (spec.where == nonfinite_site::update && at.microbatch)
    r.fail_key(key + ".microbatch", "an update is the whole step's, of no one microbatch (where: update)");
  r.cfg().faults.inject.push_back(spec);
  r.facts().faults.push_back(at);
}

}  // namespace

void read_faults(reader& r, const entry* e) {
  if (!e) return;
  const section s = r.read_map(e->value, "faults");
  static const std::vector<field<faults_config>> fields{{"seed", &faults_config::seed}};
  r.read_fields(s, r.cfg().faults, fields);
  const entry* ie = s.find("inject");
  if (!ie) return;
  if (!ie->value.IsSequence())
    r.fail(reader::value_mark(*ie), "faults.inject", "expected a list of faults, found " + describe(ie->value));
  for (size_t i = 0; i < ie->value.size(); ++i) read_fault(r, ie->value[i], item("faults.inject", i));
}

}  // namespace actorpipe::config_detail
