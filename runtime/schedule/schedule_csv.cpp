// Writing per-stage op orders as torch's schedule CSV (its _dump_csv format),
// with the send and receive actions torch's _add_send_recv would place.
#include "runtime/schedule/schedule_csv.hpp"
#include "runtime/schedule/schedule_csv_actions.hpp"
#include "runtime/util/text.hpp"

#include <algorithm>
#include <cctype>
#include <deque>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>
#include <tuple>

namespace actorpipe {

using namespace schedule_csv_detail;

// -- export -----------------------------------------------------------------------

namespace {

// torch's _add_send_recv: ranks take turns, each placing its next action once
// its input is there (a receive some sender placed on this rank, or the
// neighbouring stage on this rank ran it); a placed F or B that feeds
// another rank appends its SEND here and the matching RECV on the receiver.
std::vector<std::vector<action>> add_send_recv(std::vector<std::vector<action>> compute, const placement& plc) {
  const int ranks = static_cast<int>(compute.size());
  const int last = plc.count() - 1;
  std::vector<std::deque<action>> todo(ranks);
  for (int r = 0; r < ranks; ++r) todo[r].assign(compute[r].begin(), compute[r].end());
  std::vector<std::vector<action>> out(ranks);
  std::vector<std::set<action_key>> seen(ranks);
  auto crosses = [&](const action& a) {
    if (a.type == act::F) return a.stage != last && plc.rank_of(a.stage + 1) != plc.rank_of(a.stage);
    if (a.type == act::B || a.type == act::I) return a.stage != 0 && plc.rank_of(a.stage - 1) != plc.rank_of(a.stage);
    return false;
  };
  auto ready = [&](const action& a, const std::set<action_key>& prev) {
    if (a.type == act::F && a.stage != 0)
      return prev.count(key_of(act::RECV_F, a.stage, a.mb)) || prev.count(key_of(act::F, a.stage - 1, a.mb));
    if ((a.type == act::B || a.type == act::I) && a.stage != last)
      return prev.count(key_of(act::RECV_B, a.stage, a.mb)) || prev.count(key_of(act::I, a.stage + 1, a.mb)) ||
             prev.count(key_of(act::B, a.stage + 1, a.mb));
    return true;
  };
  for (bool left = true; left;) {
    bool progress = false;
    left = false;
    for (int r = 0; r < ranks; ++r) {
      if (todo[r].empty()) continue;
      const action a = todo[r].front();
      const std::vector<action> parts = a.sub.empty() ? std::vector<action>{a} : a.sub;
      if (!std::all_of(parts.begin(), parts.end(), [&](const action& p) { return ready(p, seen[r]); })) {
        left = true;
        continue;
      }
      out[r].push_back(a);
      for (const auto& p : parts) {
        seen[r].insert(key_of(p));
        if (!crosses(p)) continue;
        const bool fwd = p.type == act::F;
        action send{fwd ? act::SEND_F : act::SEND_B, p.stage, p.mb, {}};
        action recv{fwd ? act::RECV_F : act::RECV_B, fwd ? p.stage + 1 : p.stage - 1, p.mb, {}};
        out[r].push_back(send);
        seen[r].insert(key_of(send));
        const int to = plc.rank_of(recv.stage);
        out[to].push_back(recv);
        seen[to].insert(key_of(recv));
      }
      todo[r].pop_front();
      progress = true;
      left = left || !todo[r].empty();
    }
    if (left && !progress) {
      std::string stuck;
      for (int r = 0; r < ranks; ++r)
        if (!todo[r].empty()) stuck += (stuck.empty() ? "" : ", ") + std::string("rank ") + std::to_string(r) + " at " +
                                       text_of(todo[r].front());
      throw std::invalid_argument("compute_comms export: no rank can go on (" + stuck +
                                  "): every one waits for an input no rank sends");
    }
  }
  return out;
}

}  // namespace

std::string to_schedule_csv(const std::vector<std::vector<op_id>>& order, int stages,
                            const schedule_csv_options& opt) {
  int chunks = 1;
  for (const auto& rank : order)
    for (const auto& op : rank) chunks = std::max(chunks, op.chunk + 1);
  const placement plc{opt.placement, stages, chunks};
  const placement one{opt.placement, stages, 1};  // a stage index without the chunk count
  auto single = [&](int r, const op_id& op) {
    const act type = op.kind == op_kind::F ? act::F
                     : op.kind == op_kind::W ? act::W
                     : opt.split_backward    ? act::I
                                             : act::B;
    return action{type, one.virtual_stage(r, op.chunk), op.mb, {}};
  };
  std::vector<std::vector<action>> rows(order.size());
  for (size_t r = 0; r < order.size(); ++r) {
    const auto& ops = order[r];
    const std::vector<char>* flags = r < opt.overlap.size() ? &opt.overlap[r] : nullptr;
    // The op that ends each chunk's backward (its last B, or W when
    // split): REDUCE_GRAD follows the action holding it.
    std::map<int, int> backwards_left;
    for (const auto& op : ops)
      if (op.kind == (opt.split_backward ? op_kind::W : op_kind::B)) ++backwards_left[op.chunk];
    for (size_t i = 0; i < ops.size(); ++i) {
      action a = single(static_cast<int>(r), ops[i]);
      std::vector<op_id> held{ops[i]};
      if (flags && i < flags->size() && (*flags)[i] && i + 1 < ops.size()) {
        a = action{act::OVERLAP_F_B, -1, -1, {a, single(static_cast<int>(r), ops[i + 1])}};
        held.push_back(ops[++i]);
      }
      rows[r].push_back(a);
      if (opt.format != schedule_csv_format::compute_comms) continue;
      for (const auto& op : held)
        if (op.kind == (opt.split_backward ? op_kind::W : op_kind::B) && --backwards_left[op.chunk] == 0)
          rows[r].push_back({act::REDUCE_GRAD, one.virtual_stage(static_cast<int>(r), op.chunk), -1, {}});
    }
  }
  if (opt.format == schedule_csv_format::compute_comms) rows = add_send_recv(std::move(rows), plc);
  std::ostringstream os;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) os << (i ? "," : "") << text_of(row[i]);
    os << '\n';
  }
  return os.str();
}

std::string to_schedule_csv(const std::vector<std::vector<op_id>>& order, int stages, bool split_backward,
                            placement_kind kind) {
  schedule_csv_options opt;
  opt.split_backward = split_backward;
  opt.placement = kind;
  return to_schedule_csv(order, stages, opt);
}

schedule_csv_format parse_schedule_csv_format(const std::string& text) {
  if (text == "compute" || text == "compute_only") return schedule_csv_format::compute_only;
  if (text == "comms" || text == "compute_comms") return schedule_csv_format::compute_comms;
  throw std::invalid_argument("unknown schedule CSV format " + quoted_input(text) +
                              " (compute: F, I/B, W and OVERLAP_F_B; comms: those with REDUCE_GRAD and the "
                              "SEND/RECV torch's lowering adds)");
}

}  // namespace actorpipe
