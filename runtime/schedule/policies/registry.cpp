#include "runtime/schedule/policies/registry.hpp"

#include <cmath>

#include "runtime/schedule/canonical.hpp"
#include "runtime/schedule/policies/builtin.hpp"

namespace actorpipe {

namespace {

// Idle fraction of a step with equal op costs: S-1 slots of idle time in
// a step of `useful` slots.
double idle_share(int stages, double useful) { return (stages - 1) / (useful + stages - 1); }

schedule_traits one_chunk(std::string name, policy_factory make) {
  schedule_traits t;
  t.name = t.display = std::move(name);
  t.make = std::move(make);
  t.bubble = [](int s, int m, int) { return idle_share(s, m); };
  t.formula = "(S-1)/(M+S-1)";
  return t;
}

std::vector<schedule_traits> build() {
  std::vector<schedule_traits> r;

  auto naive = one_chunk("naive", [](const policy_options&) { return std::make_unique<gpipe_policy>("naive"); });
  naive.one_microbatch = true;
  naive.canonical = [](int, int, int, int) { return canonical::gpipe_stage(1); };
  naive.bubble = [](int s, int, int) { return idle_share(s, 1); };
  naive.formula = "(S-1)/S, one microbatch";
  r.push_back(naive);

  auto gpipe = one_chunk("gpipe", [](const policy_options&) { return std::make_unique<gpipe_policy>(); });
  gpipe.canonical = [](int, int, int m, int) { return canonical::gpipe_stage(m); };
  r.push_back(gpipe);

  auto ofob = one_chunk("1f1b", [](const policy_options&) { return std::make_unique<one_f_one_b_policy>(); });
  ofob.canonical = [](int s, int rank, int m, int) { return canonical::one_f_one_b_stage(s, rank, m); };
  r.push_back(ofob);

  auto inter = one_chunk("interleaved", [](const policy_options& o) {
    return std::make_unique<interleaved_policy>(o.virtual_stages);
  });
  inter.fixed_chunks = 0;
  inter.default_chunks = 2;
  inter.microbatches_in_stage_groups = true;
  inter.canonical = [](int s, int rank, int m, int v) { return canonical::interleaved_stage(s, rank, m, v); };
  inter.bubble = [](int s, int m, int v) { return idle_share(s, static_cast<double>(m) * v); };
  inter.formula = "(S-1)/(vM+S-1)";
  r.push_back(inter);

  auto zbh1 = one_chunk("zb-h1", [](const policy_options&) { return std::make_unique<zb_h1_policy>(); });
  zbh1.canonical = [](int s, int rank, int m, int) { return canonical::zb_h1_stage(s, rank, m); };
  // F = B = W: each stage idles (S-1)(F+B-W) = S-1 of 3M + S-1.
  zbh1.bubble = [](int s, int m, int) { return idle_share(s, 3.0 * m); };
  zbh1.formula = "(S-1)/(3M+S-1), F = B = W";
  r.push_back(zbh1);

  auto zbv = one_chunk("zb-v", [](const policy_options&) { return std::make_unique<zb_v_policy>(); });
  zbv.fixed_chunks = zbv.default_chunks = 2;
  zbv.chunks_why = "one down the V, one back";
  zbv.canonical = [](int s, int rank, int m, int) { return canonical::zb_v_stage(s, rank, m); };
  // F = I = W per chunk: rank r starts r forwards late and ends level with
  // the rest, so every rank idles S-1 of 6M + S-1 (M >= 2S-1).
  zbv.bubble = [](int s, int m, int) { return m < 2 * s - 1 ? std::nan("") : idle_share(s, 6.0 * m); };
  zbv.formula = "(S-1)/(6M+S-1), F = I = W per chunk, M >= 2S-1";
  r.push_back(zbv);

  auto dpv = one_chunk("dualpipev", [](const policy_options&) { return std::make_unique<dualpipev_policy>(); });
  dpv.display = "dualpipev (DeepSeek's DualPipeV)";
  dpv.fixed_chunks = dpv.default_chunks = 2;
  dpv.chunks_why = "one down the V, one back";
  dpv.shape_error = canonical::dualpipev_shape_error;
  dpv.canonical = [](int s, int rank, int m, int) { return canonical::dualpipev_stage(s, rank, m); };
  // DeepSeek's bubble (PP/2 - 1)(F&B + B - 3W) with PP = 2S chunks, here
  // with F = B = W per chunk on a device that runs the overlapped pair in
  // turn (F&B = F + B + W): each rank idles S - 1 of 6M + S - 1.
  dpv.bubble = [](int s, int m, int) {
    return canonical::dualpipev_shape_error(s, m).empty() ? idle_share(s, 6.0 * m) : std::nan("");
  };
  dpv.formula = "(S-1)(F&B+B-3W) idle: (S-1)/(6M+S-1) with F = B = W, F&B = F+B+W";
  r.push_back(dpv);

  auto async = one_chunk("async", [](const policy_options&) { return std::make_unique<async_policy>(); });
  async.display = "async (PipeDream-2BW)";
  async.microbatches_at_least_stages = true;
  async.flushes = false;
  // No flush: the pipeline fills and drains once per run, not per step.
  async.bubble = [](int, int, int) { return 0.0; };
  async.formula = "0 in steady state: no flush, one fill and drain per run";
  r.push_back(async);

  auto greedy = one_chunk("greedy", [](const policy_options& o) {
    return std::make_unique<greedy_policy>(o.virtual_stages, o.max_inflight);
  });
  greedy.fixed_chunks = 0;
  greedy.takes_max_inflight = true;
  r.push_back(greedy);

  auto forward_first = one_chunk("forward-first", [](const policy_options&) {
    return std::make_unique<forward_first_policy>();
  });
  r.push_back(forward_first);

  auto ig = one_chunk("interleaved-greedy", [](const policy_options& o) {
    return std::make_unique<interleaved_greedy_policy>(o.virtual_stages);
  });
  ig.fixed_chunks = 0;
  ig.default_chunks = 2;
  ig.trains = false;
  ig.bubble = inter.bubble;
  ig.formula = inter.formula;
  r.push_back(ig);
  return r;
}

}  // namespace

const std::vector<schedule_traits>& schedules() {
  static const std::vector<schedule_traits> r = build();
  return r;
}

const schedule_traits* find_schedule(std::string_view name) {
  // "1f1b+recompute": recomputation changes op costs, not the schedule.
  name = name.substr(0, name.find('+'));
  for (const auto& t : schedules())
    if (t.name == name) return &t;
  return nullptr;
}

std::vector<std::string> trainable_schedule_names() {
  std::vector<std::string> names;
  for (bool flushing : {true, false})
    for (const auto& t : schedules())
      if (t.trains && t.flushes == flushing) names.push_back(t.name);
  return names;
}

std::string trainable_schedules_where(bool (*has)(const schedule_traits&)) {
  std::vector<std::string> names;
  for (const auto& n : trainable_schedule_names())
    if (has(*find_schedule(n))) names.push_back(n);
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " and " : ", ") + names[i];
  return out;
}

std::unique_ptr<policy> make_policy(const std::string& name, const policy_options& opts) {
  for (const auto& t : schedules())
    if (t.name == name) return t.make(opts);
  return nullptr;
}

std::vector<std::string> policy_names() {
  std::vector<std::string> names;
  for (const auto& t : schedules()) names.push_back(t.name);
  return names;
}

}  // namespace actorpipe
