#include "runtime/schedule_csv.hpp"
#include "runtime/text.hpp"

#include <sstream>
#include <stdexcept>

namespace actorpipe {

std::string to_schedule_csv(const std::vector<std::vector<op_id>>& order, int stages,
                            bool split_backward, placement_kind kind) {
  const placement plc{kind, stages, 1};
  std::ostringstream os;
  for (size_t r = 0; r < order.size(); ++r) {
    for (size_t i = 0; i < order[r].size(); ++i) {
      const auto& op = order[r][i];
      if (i) os << ',';
      os << plc.virtual_stage(static_cast<int>(r), op.chunk)
         << (op.kind == op_kind::F   ? 'F'
             : op.kind == op_kind::B ? (split_backward ? 'I' : 'B')
                                     : 'W')
         << op.mb;
    }
    os << '\n';
  }
  return os.str();
}

namespace {

// Reads a schedule CSV row by row, cell by cell, keeping what the cells so
// far agree on: the backward (full or split), the placement, the chunks.
class csv_reader {
public:
  csv_reader(int stages, int microbatches, const std::string& source)
      : stages_(stages), m_(microbatches), source_(source) {}

  void row(const std::string& line, int row) {
    if (static_cast<int>(order_.size()) == stages_)
      throw std::invalid_argument(source_ + ":" + std::to_string(row) + ": more rows than the " +
                                  std::to_string(stages_) + " stages");
    const int rank = static_cast<int>(order_.size());
    std::vector<op_id> ops;
    seen_.emplace_back(3);
    std::istringstream cells(line);
    std::string cell;
    int col = 0;
    while (std::getline(cells, cell, ',')) {
      ++col;
      auto b = cell.find_first_not_of(" \t");
      if (b == std::string::npos) continue;
      cell = cell.substr(b, cell.find_last_not_of(" \t") - b + 1);
      ops.push_back(read_cell(cell, rank, row, col));
    }
    order_.push_back(std::move(ops));
    row_of_order_.push_back(row);
  }

  std::vector<std::vector<op_id>> finish(placement_kind* detected) {
    if (static_cast<int>(order_.size()) != stages_)
      throw std::invalid_argument(source_ + ": " + std::to_string(order_.size()) +
                                  " rows, expected one per stage (" + std::to_string(stages_) + ")");
    for (int rank = 0; rank < stages_; ++rank) check_complete(rank);
    if (detected) *detected = round_robin_ok_ ? placement_kind::round_robin : placement_kind::v_shape;
    return std::move(order_);
  }

private:
  op_id read_cell(const std::string& cell, int rank, int row, int col) {
    const std::string at = source_ + ":" + std::to_string(row) + ":" + std::to_string(col);
    const std::string where = at + ": " + quoted_input(cell) + ": ";
    size_t k = 0;
    while (k < cell.size() && std::isdigit(static_cast<unsigned char>(cell[k]))) ++k;
    if (k == 0 || k >= cell.size() || k > 6)
      throw std::invalid_argument(where + "expected {stage}{F|B|I|W}{microbatch}, e.g. 0F3");
    const int stage_index = std::stoi(cell.substr(0, k));
    std::string rest = cell.substr(k);
    const bool input_grad = rest[0] == 'I';
    if (input_grad) rest[0] = 'B';
    auto op = parse_op(rest);
    if (!op) throw std::invalid_argument(where + "expected {stage}{F|B|I|W}{microbatch}, e.g. 0F3");
    if (op->kind == op_kind::B) {
      const int this_split = input_grad ? 1 : 0;
      if (split_ >= 0 && split_ != this_split)
        throw std::invalid_argument(where + "mixes full backwards (B) with split ones (I and W)");
      split_ = this_split;
    }
    check_placement(stage_index, rank, at, where);
    if (op->mb >= m_)
      throw std::invalid_argument(where + "microbatch " + std::to_string(op->mb) + " out of range (" +
                                  std::to_string(m_) + ")");
    const int chunk = stage_index / stages_;
    chunks_ = std::max(chunks_, chunk + 1);
    auto& slot = seen_[rank][static_cast<int>(op->kind)];
    const size_t index = static_cast<size_t>(chunk) * m_ + op->mb;
    if (slot.size() <= index) slot.resize(index + 1, 0);
    if (slot[index]++) throw std::invalid_argument(where + "appears twice in the row");
    return {op->kind, op->mb, chunk};
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
        throw std::invalid_argument(source_ + ":" + std::to_string(row_of_order_[rank]) + ": rank " +
                                    std::to_string(rank) + " never runs " +
                                    std::to_string(plc.virtual_stage(rank, c)) + missing + std::to_string(i));
      }
  }

  const int stages_, m_;
  const std::string& source_;
  std::vector<std::vector<op_id>> order_;
  std::vector<int> row_of_order_;  // the file's row number of each rank
  int split_ = -1;                 // unknown until the first backward cell: 1 for I, 0 for B
  bool round_robin_ok_ = true, v_ok_ = true;
  std::string first_placement_cell_;
  int chunks_ = 1;
  std::vector<std::vector<std::vector<int>>> seen_;  // [rank][kind][chunk * M + mb]
};

}  // namespace

std::vector<std::vector<op_id>> parse_schedule_csv(const std::string& text, int stages, int microbatches,
                                                   const std::string& source, placement_kind* detected) {
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
  return reader.finish(detected);
}

}  // namespace actorpipe
