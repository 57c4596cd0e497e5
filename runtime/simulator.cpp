#include "runtime/simulator.hpp"

#include "runtime/policies/registry.hpp"
#include "runtime/text.hpp"

#include <algorithm>
#include <cmath>
#include <queue>
#include <sstream>
#include <stdexcept>

namespace actorpipe {

cost_model parse_cost(const std::string& text) {
  cost_model c;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    auto eq = item.find('=');
    if (eq == std::string::npos)
      throw std::invalid_argument("--cost: expected NAME=VALUE, got " + quoted_input(item));
    auto name = item.substr(0, eq);
    auto value = item.substr(eq + 1);
    char* end = nullptr;
    double v = std::strtod(value.c_str(), &end);
    if (value.empty() || *end != '\0' || !(v >= 0) || !std::isfinite(v))
      throw std::invalid_argument("--cost: " + quoted_input(name, "") + " needs a non-negative number, got " +
                                  quoted_input(value));
    if (v > max_cost)
      throw std::invalid_argument("--cost: " + quoted_input(name, "") + " is at most " + fmt("%g", max_cost) +
                                  ", got " + quoted_input(value));
    if (name == "F")
      c.f = v;
    else if (name == "B")
      c.b = v;
    else if (name == "W")
      c.w = v;
    else if (name == "comm")
      c.comm = v;
    else
      throw std::invalid_argument("--cost: unknown cost " + quoted_input(name) + " (F, B, W, comm)");
  }
  return c;
}

double sim_result::stage_bubble(int r) const {
  return makespan > 0 ? 1.0 - busy[r] / makespan : 0.0;
}

double sim_result::bubble() const {
  if (makespan <= 0 || busy.empty()) return 0.0;
  double total = 0.0;
  for (double b : busy) total += b;
  return 1.0 - total / (makespan * static_cast<double>(busy.size()));
}

std::vector<std::vector<op_id>> sim_result::order() const {
  std::vector<std::vector<op_id>> out(timeline.size());
  for (size_t r = 0; r < timeline.size(); ++r)
    for (const auto& o : timeline[r]) out[r].push_back(o.op);
  return out;
}

namespace {

struct sim_stage {
  std::vector<mb_set> fwd_ready, bwd_ready, w_ready;  // per chunk
  std::vector<std::vector<char>> fwd_fired, bwd_fired;  // per chunk, per mb
  int fwd_done = 0;
  int bwd_done = 0;
  int w_done = 0;
  int w_expected = 0;  // W ops in a step: M x chunks when split, else 0
  int open = 0;        // microbatches opened by chunk 0's F, not yet closed
  double measured[3] = {0.0, 0.0, 0.0};  // mean duration per op kind so far
  int measured_n[3] = {0, 0, 0};
  bool busy = false;
};

enum class ev_kind : uint8_t { arrive_f, arrive_b, op_end };

struct event {
  double time;
  uint64_t seq;  // ties resolve in creation order: deterministic
  ev_kind kind;
  int stage;
  op_id op;
};

struct later {
  bool operator()(const event& a, const event& b) const {
    return a.time != b.time ? a.time > b.time : a.seq > b.seq;
  }
};

// The per-stage op grid of a stuck step: what each stage fired, what is
// ready but refused, and what each pending op waits for.
std::string diagnose(const std::vector<sim_stage>& st, const sim_result& r, int m, const placement& plc) {
  const int s_count = static_cast<int>(st.size());
  const int chunks = static_cast<int>(st.front().fwd_ready.size());
  std::ostringstream os;
  os << "deadlock: no op can fire and the step is not done\n";
  for (int s = 0; s < s_count; ++s) {
    bool done = st[s].bwd_done == m * chunks && st[s].w_done == st[s].w_expected;
    os << (done ? "   " : ">> ") << "stage " << s << ": fired [";
    std::vector<op_id> fired;
    for (const auto& o : r.timeline[s]) fired.push_back(o.op);
    os << to_string(fired) << "]";
    if (!done) {
      std::vector<std::string> ready, waits;
      for (int c = 0; c < chunks; ++c)
        for (int i = 0; i < m; ++i) {
          if (st[s].fwd_ready[c].contains(i)) ready.push_back(to_string(op_id{op_kind::F, i, c}));
          if (st[s].bwd_ready[c].contains(i)) ready.push_back(to_string(op_id{op_kind::B, i, c}));
          if (st[s].w_ready[c].contains(i)) ready.push_back(to_string(op_id{op_kind::W, i, c}));
        }
      for (int c = 0; c < chunks; ++c) {
        const int k = plc.virtual_stage(s, c);
        int next_f = -1, next_b = -1;
        for (int i = 0; i < m && next_f < 0; ++i)
          if (!st[s].fwd_fired[c][i] && !st[s].fwd_ready[c].contains(i)) next_f = i;
        for (int i = 0; i < m && next_b < 0; ++i)
          if (!st[s].bwd_fired[c][i] && !st[s].bwd_ready[c].contains(i)) next_b = i;
        auto name = [&](op_kind kind, int mb) { return to_string(op_id{kind, mb, c}); };
        if (next_f >= 0)
          waits.push_back(name(op_kind::F, next_f) + " waits for its input from stage " +
                          std::to_string(plc.rank_of(k - 1)));
        if (next_b >= 0)
          waits.push_back(name(op_kind::B, next_b) +
                          (k + 1 == s_count * chunks
                               ? " waits for its own " + name(op_kind::F, next_b)
                               : " waits for its gradient from stage " + std::to_string(plc.rank_of(k + 1))));
      }
      os << "  ready, not chosen: [";
      for (size_t i = 0; i < ready.size(); ++i) os << (i ? " " : "") << ready[i];
      os << "]";
      for (const auto& w : waits) os << "; " << w;
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace

std::string simulation_too_large(int64_t stages, int64_t microbatches, int chunks, bool split_backward) {
  // An op's timeline record, with the slack of a vector grown by doubling,
  // and its share of the per-microbatch ready flags.
  constexpr double bytes_per_op = 1.5 * sizeof(sim_op) + 2.5;
  const double ops = static_cast<double>(stages) * static_cast<double>(microbatches) * chunks * (split_backward ? 3 : 2);
  if (ops <= max_sim_ops) return "";
  auto memory = [](double bytes) {
    const double gb = bytes / 1e9;
    return fmt(gb < 10 ? "%.1f GB" : gb < 1e6 ? "%.0f GB" : "%.1e GB", gb);
  };
  return std::to_string(stages) + " stages x " + (chunks > 1 ? std::to_string(chunks) + " chunks x " : "") +
         std::to_string(microbatches) + " microbatches would simulate " + fmt("%.1e", ops) + " ops (about " +
         memory(ops * bytes_per_op) + "); the limit is " + fmt("%.1e", max_sim_ops) + " ops (about " +
         memory(max_sim_ops * bytes_per_op) + ")";
}

sim_result simulate(const policy& pol, int stages, int microbatches, const cost_model& cost) {
  if (stages < 1 || microbatches < 1)
    throw std::invalid_argument("simulate: stages and microbatches must be at least 1");
  if (const std::string why = simulation_too_large(stages, microbatches, pol.chunks(), pol.splits_backward());
      !why.empty())
    throw std::invalid_argument("simulate: " + why);
  const int s_count = stages;
  const int m = microbatches;
  sim_result res;
  res.stages = s_count;
  res.microbatches = m;
  res.schedule = pol.name();
  res.chunks = pol.chunks();
  res.placement = pol.placement();
  res.split_backward = pol.splits_backward();
  res.timeline.assign(s_count, {});
  res.busy.assign(s_count, 0.0);
  res.peak_stash.assign(s_count, 0);

  const int chunks = pol.chunks();
  const bool split = pol.splits_backward();
  const placement plc = pol.layout(s_count);
  const int last_k = plc.count() - 1;  // the last virtual stage computes the loss
  std::vector<sim_stage> st(s_count);
  for (auto& s : st) {
    s.fwd_ready.assign(chunks, mb_set{});
    s.bwd_ready.assign(chunks, mb_set{});
    s.w_ready.assign(chunks, mb_set{});
    for (auto& set : s.w_ready) set.reset(m);
    s.w_expected = split ? m * chunks : 0;
    for (auto& set : s.fwd_ready) set.reset(m);
    for (auto& set : s.bwd_ready) set.reset(m);
    s.fwd_fired.assign(chunks, std::vector<char>(m, 0));
    s.bwd_fired.assign(chunks, std::vector<char>(m, 0));
  }
  for (int i = 0; i < m; ++i) st[0].fwd_ready[0].insert(i);
  auto factor = [&](int r) {
    return r < static_cast<int>(cost.stage_factor.size()) ? cost.stage_factor[r] : 1.0;
  };

  std::priority_queue<event, std::vector<event>, later> q;
  uint64_t seq = 0;
  double now = 0.0;
  int done_stages = 0;
  auto decide = [&](int r) {
    auto& s = st[r];
    if (s.busy) return;
    stage_view v{r,      s_count,          m,      s.fwd_done, s.bwd_done, s.fwd_ready.data(),
                 s.bwd_ready.data(), chunks, s.w_ready.data(), s.w_done, s.open, s.measured};
    auto op = pol.next(v);
    if (!op) return;
    const auto& ready = op->kind == op_kind::F   ? s.fwd_ready
                        : op->kind == op_kind::B ? s.bwd_ready
                                                 : s.w_ready;
    if (op->chunk < 0 || op->chunk >= chunks || op->mb < 0 || op->mb >= m ||
        !ready[op->chunk].contains(op->mb))
      throw std::logic_error("policy " + pol.name() + " chose " + to_string(*op) + " on stage " +
                             std::to_string(r) + ", which is not ready");
    const double full_b = split ? cost.b : cost.b + cost.w;
    double d = (op->kind == op_kind::F ? cost.f : op->kind == op_kind::B ? full_b : cost.w) * factor(r);
    if (op->chunk == 0) {
      if (op->kind == op_kind::F) ++s.open;
      if (op->kind == (split ? op_kind::W : op_kind::B)) --s.open;
    }
    const int kind = static_cast<int>(op->kind);
    s.measured[kind] = (s.measured[kind] * s.measured_n[kind] + d) / (s.measured_n[kind] + 1);
    ++s.measured_n[kind];
    if (op->kind == op_kind::F) {
      s.fwd_ready[op->chunk].erase(op->mb);
      s.fwd_fired[op->chunk][op->mb] = 1;
      ++s.fwd_done;
    } else if (op->kind == op_kind::B) {
      s.bwd_ready[op->chunk].erase(op->mb);
      s.bwd_fired[op->chunk][op->mb] = 1;
      ++s.bwd_done;
    } else {
      s.w_ready[op->chunk].erase(op->mb);
      ++s.w_done;
    }
    // Activations live until the op that consumes them last: B, or W.
    if (op->kind == op_kind::F)
      res.peak_stash[r] = std::max(res.peak_stash[r], s.fwd_done - (split ? s.w_done : s.bwd_done));
    s.busy = true;
    res.timeline[r].push_back({*op, now, now + d});
    res.busy[r] += d;
    q.push({now + d, seq++, ev_kind::op_end, r, *op});
  };

  for (int r = 0; r < s_count; ++r) decide(r);
  // Only a stage that an event touched can choose differently from last
  // time (a policy is a pure function of its stage's view), so only those
  // choose again, in rank order as before: a step costs its events, not
  // stages x distinct times.
  std::vector<int> touched;
  std::vector<char> is_touched(s_count, 0);
  while (!q.empty()) {
    now = q.top().time;
    // Everything that happens at `now` (arrivals, op ends and the arrivals
    // they cause when comm is 0) is seen before any stage chooses.
    while (!q.empty() && q.top().time <= now) {
      event e = q.top();
      q.pop();
      if (!is_touched[e.stage]) {
        is_touched[e.stage] = 1;
        touched.push_back(e.stage);
      }
      auto& s = st[e.stage];
      switch (e.kind) {
        case ev_kind::arrive_f: s.fwd_ready[e.op.chunk].insert(e.op.mb); break;
        case ev_kind::arrive_b: s.bwd_ready[e.op.chunk].insert(e.op.mb); break;
        case ev_kind::op_end: {
          s.busy = false;
          res.makespan = std::max(res.makespan, e.time);
          const int k = plc.virtual_stage(e.stage, e.op.chunk);
          // A hop between two chunks of one rank (the V's turn) is local.
          auto hop = [&](int to) { return to == e.stage ? 0.0 : cost.comm; };
          if (e.op.kind == op_kind::F) {
            if (k < last_k) {
              const int to = plc.rank_of(k + 1);
              op_id next{op_kind::F, e.op.mb, plc.chunk_of(k + 1)};
              q.push({e.time + hop(to), seq++, ev_kind::arrive_f, to, next});
            } else {
              s.bwd_ready[e.op.chunk].insert(e.op.mb);  // the loss starts the backward
            }
          } else if (e.op.kind == op_kind::B) {
            if (k > 0) {
              const int to = plc.rank_of(k - 1);
              op_id prev{op_kind::B, e.op.mb, plc.chunk_of(k - 1)};
              q.push({e.time + hop(to), seq++, ev_kind::arrive_b, to, prev});
            }
            if (split) s.w_ready[e.op.chunk].insert(e.op.mb);
            if (s.bwd_done == m * chunks && s.w_done == s.w_expected) ++done_stages;
          } else if (s.bwd_done == m * chunks && s.w_done == s.w_expected) {
            ++done_stages;  // the stage's last W
          }
          break;
        }
      }
    }
    std::sort(touched.begin(), touched.end());
    for (int r : touched) {
      is_touched[r] = 0;
      decide(r);
    }
    touched.clear();
  }
  if (done_stages < s_count) {
    res.deadlock = true;
    res.diagnosis = diagnose(st, res, m, plc);
  }
  return res;
}

sim_result simulate(const std::string& schedule, int stages, int microbatches, const cost_model& cost,
                    int chunks, int max_inflight) {
  const schedule_traits* t = find_schedule(schedule);
  if (t && t->microbatches_in_stage_groups && microbatches % stages != 0)
    throw std::invalid_argument("simulate: " + t->name + " needs microbatches (" + std::to_string(microbatches) +
                                ") to be a multiple of stages (" + std::to_string(stages) + ")");
  auto pol = make_policy(schedule, policy_options{chunks, max_inflight});
  if (!pol) throw std::invalid_argument("simulate: unknown schedule " + quoted_input(schedule));
  return simulate(*pol, stages, microbatches, cost);
}

}  // namespace actorpipe
