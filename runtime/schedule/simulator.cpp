#include "runtime/schedule/simulator.hpp"

#include "runtime/schedule/op_grid.hpp"
#include "runtime/schedule/policies/registry.hpp"
#include "runtime/schedule/ready_board.hpp"
#include "runtime/util/text.hpp"

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
    else if (name == "overlap") {
      if (v != 0 && v != 1)
        throw std::invalid_argument("--cost: \"overlap\" is 0 (F and B of an overlapped pair run one after the other) or 1 (at once), got " +
                                    quoted_input(value));
      c.overlap = v == 1;
    } else
      throw std::invalid_argument("--cost: unknown cost " + quoted_input(name) + " (F, B, W, comm, overlap)");
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
  ready_board board;
  double measured[3] = {0.0, 0.0, 0.0};  // mean duration per op kind so far
  int measured_n[3] = {0, 0, 0};
  int running = 0;  // ops under way: two during an overlapped F and B
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

// The per-stage op grid of a stuck step, stuck stages marked.
std::string diagnose(const std::vector<sim_stage>& st, const sim_result& r, const placement& plc) {
  std::ostringstream os;
  os << "deadlock: no op can fire and the step is not done\n";
  for (int s = 0; s < static_cast<int>(st.size()); ++s) {
    const bool done = st[s].board.done();
    std::vector<op_id> fired;
    for (const auto& o : r.timeline[s]) fired.push_back(o.op);
    os << (done ? "   " : ">> ") << op_grid_row("stage " + std::to_string(s), fired, done ? nullptr : &st[s].board, plc, s)
       << "\n";
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

namespace {

// One simulated step: the stages' boards, the event queue and the result.
class simulation {
public:
  simulation(const policy& pol, int stages, int microbatches, const cost_model& cost)
      : pol_(pol), cost_(cost), m_(microbatches), split_(pol.splits_backward()), plc_(pol.layout(stages)),
        st_(stages) {
    res_.stages = stages;
    res_.microbatches = microbatches;
    res_.schedule = pol.name();
    res_.chunks = pol.chunks();
    res_.placement = pol.placement();
    res_.split_backward = split_;
    res_.timeline.assign(stages, {});
    res_.overlapped.assign(stages, {});
    res_.busy.assign(stages, 0.0);
    res_.peak_stash.assign(stages, 0);
    for (auto& s : st_) s.board.reset(m_, pol.chunks(), split_);
    for (int i = 0; i < m_; ++i) st_[0].board.arrive(op_kind::F, plc_.chunk_of(0), i);
  }

  sim_result run() {
    const int s_count = static_cast<int>(st_.size());
    for (int r = 0; r < s_count; ++r) decide(r);
    // Only a stage that an event touched can choose differently from last
    // time (a policy is a pure function of its stage's view), so only those
    // choose again, in rank order as before: a step costs its events, not
    // stages x distinct times.
    std::vector<int> touched;
    std::vector<char> is_touched(s_count, 0);
    while (!q_.empty()) {
      now_ = q_.top().time;
      // Everything that happens at `now` (arrivals, op ends and the arrivals
      // they cause when comm is 0) is seen before any stage chooses.
      while (!q_.empty() && q_.top().time <= now_) {
        event e = q_.top();
        q_.pop();
        if (!is_touched[e.stage]) {
          is_touched[e.stage] = 1;
          touched.push_back(e.stage);
        }
        handle(e);
      }
      std::sort(touched.begin(), touched.end());
      for (int r : touched) {
        is_touched[r] = 0;
        decide(r);
      }
      touched.clear();
    }
    if (done_stages_ < s_count) {
      res_.deadlock = true;
      res_.diagnosis = diagnose(st_, res_, plc_);
    }
    return std::move(res_);
  }

private:
  double factor(int r) const {
    return r < static_cast<int>(cost_.stage_factor.size()) ? cost_.stage_factor[r] : 1.0;
  }

  // Stage r, if idle, fires what its policy chooses: one op, or an
  // overlapped F and B (priced at once where the device can, else in turn).
  void decide(int r) {
    auto& s = st_[r];
    if (s.running > 0) return;
    const int stages = static_cast<int>(st_.size());
    auto view = s.board.view(r, stages, s.measured);
    auto op = pol_.next(view);
    if (!op) return;
    const bool pair = pol_.overlaps_next(view);
    const double first = fire(r, *op, now_);
    if (!pair) {
      res_.busy[r] += first;
      return;
    }
    res_.overlapped[r].back() = 1;
    auto second = pol_.next(s.board.view(r, stages, s.measured));
    if (!second || op->kind != op_kind::F || second->kind != op_kind::B)
      throw std::logic_error("policy " + pol_.name() + " overlapped " + to_string(*op) + " on stage " +
                             std::to_string(r) + " with " + (second ? to_string(*second) : std::string("nothing")) +
                             ", not a ready B");
    const double then = fire(r, *second, cost_.overlap ? now_ : now_ + first);
    res_.busy[r] += cost_.overlap ? std::max(first, then) : first + then;
  }

  // Fires `op` on stage r at time `at`; returns its duration.
  double fire(int r, const op_id& op, double at) {
    auto& s = st_[r];
    if (!s.board.ready(op))
      throw std::logic_error("policy " + pol_.name() + " chose " + to_string(op) + " on stage " +
                             std::to_string(r) + ", which is not ready");
    const double full_b = split_ ? cost_.b : cost_.b + cost_.w;
    double d = (op.kind == op_kind::F ? cost_.f : op.kind == op_kind::B ? full_b : cost_.w) * factor(r);
    const int kind = static_cast<int>(op.kind);
    s.measured[kind] = (s.measured[kind] * s.measured_n[kind] + d) / (s.measured_n[kind] + 1);
    ++s.measured_n[kind];
    s.board.fire(op);
    // Activations live until the op that consumes them last: B, or W.
    if (op.kind == op_kind::F)
      res_.peak_stash[r] =
          std::max(res_.peak_stash[r], s.board.fwd_done() - (split_ ? s.board.w_done() : s.board.bwd_done()));
    ++s.running;
    res_.timeline[r].push_back({op, at, at + d});
    res_.overlapped[r].push_back(0);
    q_.push({at + d, seq_++, ev_kind::op_end, r, op});
    return d;
  }

  void handle(const event& e) {
    auto& s = st_[e.stage];
    if (e.kind == ev_kind::arrive_f) return (void)s.board.arrive(op_kind::F, e.op.chunk, e.op.mb);
    if (e.kind == ev_kind::arrive_b) return (void)s.board.arrive(op_kind::B, e.op.chunk, e.op.mb);
    --s.running;
    res_.makespan = std::max(res_.makespan, e.time);
    const int k = plc_.virtual_stage(e.stage, e.op.chunk);
    if (e.op.kind == op_kind::F) {
      if (k < plc_.count() - 1)
        send(e, ev_kind::arrive_f, {op_kind::F, e.op.mb, plc_.chunk_of(k + 1)}, plc_.rank_of(k + 1));
      else
        s.board.arrive(op_kind::B, e.op.chunk, e.op.mb);  // the loss starts the backward
    } else if (e.op.kind == op_kind::B && k > 0) {
      send(e, ev_kind::arrive_b, {op_kind::B, e.op.mb, plc_.chunk_of(k - 1)}, plc_.rank_of(k - 1));
    }
    if (e.op.kind != op_kind::F && s.board.done()) ++done_stages_;  // its last B, or W
  }

  // The input `input` of stage `to`, sent when op e ended. A hop between
  // two chunks of one rank (the V's turn) is local.
  void send(const event& e, ev_kind kind, op_id input, int to) {
    const double latency = (to == e.stage ? 0.0 : cost_.comm) +
                           (cost_.message_delay ? cost_.message_delay(e.stage, to, input) : 0.0);
    q_.push({e.time + latency, seq_++, kind, to, input});
  }

  const policy& pol_;
  const cost_model& cost_;
  const int m_;
  const bool split_;
  const placement plc_;
  std::vector<sim_stage> st_;
  sim_result res_;
  std::priority_queue<event, std::vector<event>, later> q_;
  uint64_t seq_ = 0;
  double now_ = 0.0;
  int done_stages_ = 0;
};

}  // namespace

sim_result simulate(const policy& pol, int stages, int microbatches, const cost_model& cost) {
  if (stages < 1 || microbatches < 1)
    throw std::invalid_argument("simulate: stages and microbatches must be at least 1");
  if (const std::string why = simulation_too_large(stages, microbatches, pol.chunks(), pol.splits_backward());
      !why.empty())
    throw std::invalid_argument("simulate: " + why);
  return simulation(pol, stages, microbatches, cost).run();
}

sim_result simulate(const std::string& schedule, int stages, int microbatches, const cost_model& cost,
                    int chunks, int max_inflight) {
  const schedule_traits* t = find_schedule(schedule);
  if (t && t->microbatches_in_stage_groups && microbatches % stages != 0)
    throw std::invalid_argument("simulate: " + t->name + " needs microbatches (" + std::to_string(microbatches) +
                                ") to be a multiple of stages (" + std::to_string(stages) + ")");
  if (t && t->shape_error)
    if (const std::string why = t->shape_error(stages, microbatches); !why.empty())
      throw std::invalid_argument("simulate: " + why);
  auto pol = make_policy(schedule, policy_options{chunks, max_inflight});
  if (!pol) throw std::invalid_argument("simulate: unknown schedule " + quoted_input(schedule));
  return simulate(*pol, stages, microbatches, cost);
}

}  // namespace actorpipe
