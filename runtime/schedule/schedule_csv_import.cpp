// Reading torch's schedule CSV (its _dump_csv / _load_csv format) into
// per-stage op orders, with what a row holds checked and named.
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
#include <utility>

namespace actorpipe {

using namespace schedule_csv_detail;

// -- import -----------------------------------------------------------------------

namespace {

const char* const syntax =
    "expected {stage}{action}{microbatch}, e.g. 0F3, with action F, B, I, W, SEND_F, RECV_F, SEND_B or RECV_B; "
    "{stage}UNSHARD, {stage}RESHARD or {stage}REDUCE_GRAD; or (0F3;1B2)OVERLAP_F_B";

struct cell {
  action a;
  int col = 0;
};

// Reads a schedule CSV: first every cell's action (syntax), then the
// compute actions as ops (backward kind, placement, chunks, each op once),
// then the other actions against the stages those found.
class csv_reader {
public:
  csv_reader(int stages, int microbatches, const std::string& source)
      : stages_(stages), m_(microbatches), source_(source) {}

  void row(const std::string& line, int row) {
    if (static_cast<int>(rows_.size()) == stages_)
      throw std::invalid_argument(source_ + ":" + std::to_string(row) + ": more rows than the " +
                                  std::to_string(stages_) + " stages");
    std::vector<cell> cells;
    std::istringstream in(line);
    std::string text;
    int col = 0;
    while (std::getline(in, text, ',')) {
      ++col;
      auto b = text.find_first_not_of(" \t");
      if (b == std::string::npos) continue;
      text = text.substr(b, text.find_last_not_of(" \t") - b + 1);
      cells.push_back({read_cell(text, row, col), col});
    }
    rows_.push_back(std::move(cells));
    row_of_rank_.push_back(row);
  }

  imported_schedule finish() {
    if (static_cast<int>(rows_.size()) != stages_)
      throw std::invalid_argument(source_ + ": " + std::to_string(rows_.size()) +
                                  " rows, expected one per stage (" + std::to_string(stages_) + ")");
    for (const auto& row : rows_)
      for (const auto& c : row) {
        const auto& parts = c.a.sub.empty() ? std::vector<action>{c.a} : c.a.sub;
        for (const auto& p : parts) split_ = split_ || p.type == act::I || p.type == act::W;
      }
    imported_schedule out;
    out.order.resize(stages_);
    out.overlap.resize(stages_);
    out.reduce_grad.resize(stages_);
    // Per rank, the (stage, microbatch) of each W and of each backward (B or
    // I, alone or in a compound): a B whose W is in the row is its I.
    weights_.assign(stages_, {});
    backwards_.assign(stages_, {});
    for (int rank = 0; rank < stages_; ++rank)
      for (const auto& c : rows_[rank]) {
        const auto& parts = c.a.sub.empty() ? std::vector<action>{c.a} : c.a.sub;
        for (const auto& p : parts) {
          if (p.type == act::W) weights_[rank].insert({p.stage, p.mb});
          if (p.type == act::B || p.type == act::I) backwards_[rank].insert({p.stage, p.mb});
        }
      }
    seen_.assign(stages_, std::vector<std::vector<int>>(3));
    last_backward_.assign(stages_, {});
    ops_at_.assign(stages_, {});
    for (int rank = 0; rank < stages_; ++rank) ops_at_[rank].assign(rows_[rank].size(), 0);
    for (int rank = 0; rank < stages_; ++rank)
      for (const auto& c : rows_[rank]) add_compute(c, rank, out);
    for (int rank = 0; rank < stages_; ++rank) check_complete(rank);
    out.placement = round_robin_ok_ ? placement_kind::round_robin : placement_kind::v_shape;
    out.split_backward = split_ == 1;
    out.chunks = chunks_;
    const placement plc{out.placement, stages_, chunks_};
    for (int rank = 0; rank < stages_; ++rank) {
      size_t ops_before = 0;
      for (const auto& c : rows_[rank]) {
        if (c.a.type == act::OVERLAP_F_B || is_compute(c.a.type)) {
          ops_before = ops_at_[rank][&c - rows_[rank].data()];
          continue;
        }
        check_other(c, rank, plc, ops_before, out);
      }
    }
    for (const auto& n : notice_order_) {
      auto& note = notices_[n];
      note.message = note.first + ": " + std::to_string(note.count) + " " + note.message;
      out.notices.push_back(note);
    }
    return out;
  }

private:
  std::string at(int row, int col) const { return source_ + ":" + std::to_string(row) + ":" + std::to_string(col); }

  action read_cell(const std::string& text, int row, int col) const {
    const std::string where = at(row, col) + ": " + quoted_input(text) + ": ";
    if (text[0] != '(') return read_action(text, where);
    const auto close = text.find(')');
    if (close == std::string::npos) throw std::invalid_argument(where + "no ')': " + syntax);
    if (text.substr(close + 1) != "OVERLAP_F_B")
      throw std::invalid_argument(where + "a compound action is (F;B)OVERLAP_F_B, e.g. (0F3;1B2)OVERLAP_F_B");
    action pair{act::OVERLAP_F_B, -1, -1, {}};
    std::istringstream inner(text.substr(1, close - 1));
    std::string part;
    while (std::getline(inner, part, ';')) {
      auto b = part.find_first_not_of(" \t");
      if (b == std::string::npos) throw std::invalid_argument(where + "an empty action inside OVERLAP_F_B");
      pair.sub.push_back(read_action(part.substr(b, part.find_last_not_of(" \t") - b + 1), where));
    }
    if (text[close - 1] == ';') throw std::invalid_argument(where + "an empty action inside OVERLAP_F_B");
    if (pair.sub.size() != 2 || pair.sub[0].type != act::F ||
        (pair.sub[1].type != act::B && pair.sub[1].type != act::I))
      throw std::invalid_argument(where +
                                  "OVERLAP_F_B holds a forward then a backward, (F;B) or (F;I), e.g. "
                                  "(0F3;1B2)OVERLAP_F_B");
    return pair;
  }

  // {stage}{name}{microbatch}, the whole text.
  static action read_action(const std::string& text, const std::string& where) {
    size_t k = 0;
    while (k < text.size() && std::isdigit(static_cast<unsigned char>(text[k]))) ++k;
    if (k == 0 || k > 6) throw std::invalid_argument(where + syntax);
    action a;
    a.stage = std::stoi(text.substr(0, k));
    const std::string rest = text.substr(k);
    const char* name = nullptr;
    for (const auto& [n, kind] : action_names)
      if (rest.compare(0, std::char_traits<char>::length(n), n) == 0) {
        name = n;
        a.type = kind;
        break;
      }
    if (!name) throw std::invalid_argument(where + syntax);
    const std::string mb = rest.substr(std::char_traits<char>::length(name));
    if (mb.size() > 9 || mb.find_first_not_of("0123456789") != std::string::npos)
      throw std::invalid_argument(where + syntax);
    if (takes_microbatch(a.type) && mb.empty())
      throw std::invalid_argument(where + name + " needs a microbatch, e.g. " + std::to_string(a.stage) + name + "0");
    if (!takes_microbatch(a.type) && !mb.empty())
      throw std::invalid_argument(where + name + " takes no microbatch: " + std::to_string(a.stage) + name);
    if (!mb.empty()) a.mb = std::stoi(mb);
    return a;
  }

  void note(const std::string& key, const std::string& first, const std::string& what) {
    auto it = notices_.find(key);
    if (it == notices_.end()) {
      it = notices_.emplace(key, schedule_csv_notice{key, 0, first, what}).first;
      notice_order_.push_back(key);
    }
    ++it->second.count;
  }

  void add_compute(const cell& c, int rank, imported_schedule& out) {
    const int row = row_of_rank_[rank];
    const std::string here = at(row, c.col);
    const std::string where = here + ": " + quoted_input(text_of(c.a)) + ": ";
    auto& ops = out.order[rank];
    auto& flags = out.overlap[rank];
    auto emit = [&](const action& a, bool overlapped) {
      check_placement(a.stage, rank, here, where);
      if (a.mb >= m_)
        throw std::invalid_argument(where + "microbatch " + std::to_string(a.mb) + " out of range (" +
                                    std::to_string(m_) + ")");
      const int chunk = a.stage / stages_;
      chunks_ = std::max(chunks_, chunk + 1);
      auto push = [&](op_kind kind, const char* why) {
        auto& slot = seen_[rank][static_cast<int>(kind)];
        const size_t index = static_cast<size_t>(chunk) * m_ + a.mb;
        if (slot.size() <= index) slot.resize(index + 1, 0);
        if (slot[index]++) throw std::invalid_argument(where + "appears twice in the row" + why);
        ops.push_back({kind, a.mb, chunk});
        flags.push_back(0);
        if (kind == (split_ ? op_kind::W : op_kind::B)) {
          auto& last = last_backward_[rank][chunk];
          last = {ops.size(), c.col, text_of(a)};
        }
      };
      if (a.type == act::F) {
        push(op_kind::F, "");
        flags.back() = overlapped ? 1 : 0;
      } else if (a.type == act::I) {
        push(op_kind::B, "");
      } else if (a.type == act::W) {
        if (!backwards_[rank].count({a.stage, a.mb}))
          throw std::invalid_argument(where + "a W (weight gradient) without a backward of microbatch " +
                                      std::to_string(a.mb) + " on stage " + std::to_string(a.stage) +
                                      " in the row (B or I, e.g. " + std::to_string(a.stage) + "B" +
                                      std::to_string(a.mb) + ")");
        push(op_kind::W, "");
      } else if (weights_[rank].count({a.stage, a.mb})) {  // B with its W in the row: the I (zero-bubble notation)
        push(op_kind::B, "");
      } else {  // B: the full backward; split, its I then its W
        push(op_kind::B, "");
        if (split_) {
          push(op_kind::W, " (a full backward B in a split schedule runs its I, then its W)");
          note("B", here, "full backwards (B) in a split schedule: each runs as its I, then its W");
        }
      }
    };
    if (c.a.type == act::OVERLAP_F_B) {
      emit(c.a.sub[0], true);
      emit(c.a.sub[1], false);
    } else if (is_compute(c.a.type)) {
      emit(c.a, false);
    }
    ops_at_[rank][&c - rows_[rank].data()] = ops.size();
  }

  // Which placements every cell so far agrees with; where both do (one
  // chunk, or the middle rank of an odd S) the file does not say.
  void check_placement(int stage_index, int rank, const std::string& at, const std::string& where) {
    const bool rr_here = placement{placement_kind::round_robin, stages_, 1}.rank_of(stage_index) == rank;
    const bool v_here = placement{placement_kind::v_shape, stages_, 1}.rank_of(stage_index) == rank;
    if (!rr_here && !v_here)
      throw std::invalid_argument(where + "stage " + std::to_string(stage_index) + " does not live on rank " +
                                  std::to_string(rank));
    if ((!rr_here || !v_here) && first_placement_cell_.empty()) first_placement_cell_ = at;
    if (!(rr_here && round_robin_ok_) && !(v_here && v_ok_))
      throw std::invalid_argument(where + "stage " + std::to_string(stage_index) + " on rank " +
                                  std::to_string(rank) + " places chunks " + (rr_here ? "round-robin" : "in a V") +
                                  ", but " + first_placement_cell_ + " placed them " +
                                  (rr_here ? "in a V" : "round-robin"));
    round_robin_ok_ = round_robin_ok_ && rr_here;
    v_ok_ = v_ok_ && v_here;
  }

  bool has(int rank, op_kind kind, int chunk, int mb) const {
    const auto& slot = seen_[rank][static_cast<int>(kind)];
    const size_t index = static_cast<size_t>(chunk) * m_ + mb;
    return index < slot.size() && slot[index] != 0;
  }

  void check_complete(int rank) const {
    for (int c = 0; c < chunks_; ++c)
      for (int i = 0; i < m_; ++i) {
        const char* missing = !has(rank, op_kind::F, c, i)                  ? "F"
                              : !has(rank, op_kind::B, c, i)                ? (split_ == 1 ? "I" : "B")
                              : split_ == 1 && !has(rank, op_kind::W, c, i) ? "W"
                                                                            : nullptr;
        if (!missing) continue;
        const placement plc{round_robin_ok_ ? placement_kind::round_robin : placement_kind::v_shape, stages_,
                            chunks_};
        throw std::invalid_argument(source_ + ":" + std::to_string(row_of_rank_[rank]) + ": rank " +
                                    std::to_string(rank) + " never runs " +
                                    std::to_string(plc.virtual_stage(rank, c)) + missing + std::to_string(i));
      }
  }

  // A communication, sharding or REDUCE_GRAD action of `rank`, after
  // `ops_before` of its ops: checked, then noted.
  void check_other(const cell& c, int rank, const placement& plc, size_t ops_before, imported_schedule& out) {
    const std::string here = at(row_of_rank_[rank], c.col);
    const std::string where = here + ": " + quoted_input(text_of(c.a)) + ": ";
    const auto& a = c.a;
    const int count = plc.count();
    if (a.stage >= count)
      throw std::invalid_argument(where + "stage " + std::to_string(a.stage) + " out of range (" +
                                  std::to_string(stages_) + " ranks x " + std::to_string(chunks_) + " chunks = " +
                                  std::to_string(count) + " stages)");
    if (plc.rank_of(a.stage) != rank)
      throw std::invalid_argument(where + "stage " + std::to_string(a.stage) + " does not live on rank " +
                                  std::to_string(rank));
    if (a.mb >= m_)
      throw std::invalid_argument(where + "microbatch " + std::to_string(a.mb) + " out of range (" +
                                  std::to_string(m_) + ")");
    const bool first_stage = a.stage == 0, last_stage = a.stage == count - 1;
    if ((a.type == act::SEND_F && last_stage) || (a.type == act::RECV_B && last_stage))
      throw std::invalid_argument(where + "stage " + std::to_string(a.stage) + " is the last: no next stage to " +
                                  (a.type == act::SEND_F ? "send to" : "receive from"));
    if ((a.type == act::RECV_F && first_stage) || (a.type == act::SEND_B && first_stage))
      throw std::invalid_argument(where + "stage 0 is the first: no previous stage to " +
                                  (a.type == act::SEND_B ? "send to" : "receive from"));
    const std::string name = name_of(a.type);
    switch (a.type) {
      case act::SEND_F:
        return note(name, here, name + " actions ignored: a stage sends each activation when its forward ends");
      case act::SEND_B:
        return note(name, here, name + " actions ignored: a stage sends each input gradient when its backward ends");
      case act::RECV_F:
      case act::RECV_B:
        return note(name, here,
                    name + " actions ignored: a stage takes each input as it arrives; the op order alone says when it runs");
      case act::UNSHARD:
      case act::RESHARD:
        return note(name, here, name + " actions ignored: actorpipe keeps every stage's parameters whole (no FSDP)");
      default:
        break;
    }
    // REDUCE_GRAD: once the stage's last backward has run, and once.
    const int chunk = plc.chunk_of(a.stage);
    const auto& last = last_backward_[rank][chunk];
    if (std::get<0>(last) > ops_before)
      throw std::invalid_argument(where + "REDUCE_GRAD of stage " + std::to_string(a.stage) +
                                  " before the stage's last backward (" + std::get<2>(last) + " at " +
                                  at(row_of_rank_[rank], std::get<1>(last)) +
                                  "); it reduces the gradients of every microbatch, so it comes after it");
    auto& done = out.reduce_grad[rank];
    if (std::find(done.begin(), done.end(), chunk) != done.end())
      throw std::invalid_argument(where + "a second REDUCE_GRAD of stage " + std::to_string(a.stage));
    done.push_back(chunk);
    note(name, here,
         "REDUCE_GRAD actions mapped to the rank's data-parallel allreduce, which actorpipe runs after the rank's last op "
         "for all its chunks");
  }

  const int stages_, m_;
  const std::string& source_;
  std::vector<std::vector<cell>> rows_;
  std::vector<int> row_of_rank_;  // the file's row number of each rank
  int split_ = 0;                 // 1: the file has I or W
  bool round_robin_ok_ = true, v_ok_ = true;
  std::string first_placement_cell_;
  int chunks_ = 1;
  std::vector<std::set<std::pair<int, int>>> weights_, backwards_;  // [rank]: (stage, mb) of its Ws, its B and I
  std::vector<std::vector<std::vector<int>>> seen_;                  // [rank][kind][chunk * M + mb]
  std::vector<std::vector<size_t>> ops_at_;          // [rank][cell]: ops emitted up to and with that cell
  // [rank][chunk]: ops up to and with the chunk's last backward, its column and text
  std::vector<std::map<int, std::tuple<size_t, int, std::string>>> last_backward_;
  std::map<std::string, schedule_csv_notice> notices_;
  std::vector<std::string> notice_order_;
};

}  // namespace

imported_schedule read_schedule_csv(const std::string& text, int stages, int microbatches,
                                    const std::string& source) {
  csv_reader reader(stages, microbatches, source);
  std::istringstream lines(text);
  std::string line;
  int row = 0;
  while (std::getline(lines, line)) {
    ++row;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t,") == std::string::npos) continue;
    reader.row(line, row);
  }
  return reader.finish();
}

std::vector<std::vector<op_id>> parse_schedule_csv(const std::string& text, int stages, int microbatches,
                                                   const std::string& source, placement_kind* detected) {
  auto imported = read_schedule_csv(text, stages, microbatches, source);
  if (detected) *detected = imported.placement;
  return std::move(imported.order);
}

}  // namespace actorpipe
