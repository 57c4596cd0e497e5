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

std::vector<std::vector<op_id>> parse_schedule_csv(const std::string& text, int stages,
                                                   int microbatches, const std::string& source,
                                                   placement_kind* detected) {
  std::vector<std::vector<op_id>> order;
  std::vector<int> row_of_order;  // the file's row number of each rank
  int split = -1;  // unknown until the first backward cell: 1 for I, 0 for B
  // Which placements every cell so far agrees with; where both do (one
  // chunk, or the middle rank of an odd S) the file does not say.
  bool round_robin_ok = true, v_ok = true;
  std::string first_placement_cell;
  int chunks = 1;
  std::vector<std::vector<std::vector<int>>> seen;  // [rank][kind][chunk * M + mb]
  std::istringstream lines(text);
  std::string line;
  int row = 0;
  while (std::getline(lines, line)) {
    ++row;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t,") == std::string::npos) continue;
    if (static_cast<int>(order.size()) == stages)
      throw std::invalid_argument(source + ":" + std::to_string(row) + ": more rows than the " +
                                  std::to_string(stages) + " stages");
    const int rank = static_cast<int>(order.size());
    std::vector<op_id> ops;
    seen.emplace_back(3);
    std::istringstream cells(line);
    std::string cell;
    int col = 0;
    while (std::getline(cells, cell, ',')) {
      ++col;
      auto b = cell.find_first_not_of(" \t");
      if (b == std::string::npos) continue;
      cell = cell.substr(b, cell.find_last_not_of(" \t") - b + 1);
      auto where = source + ":" + std::to_string(row) + ":" + std::to_string(col) + ": " + quoted_input(cell) + ": ";
      size_t k = 0;
      while (k < cell.size() && std::isdigit(static_cast<unsigned char>(cell[k]))) ++k;
      if (k == 0 || k >= cell.size() || k > 6)
        throw std::invalid_argument(where + "expected {stage}{F|B|I|W}{microbatch}, e.g. 0F3");
      int stage_index = std::stoi(cell.substr(0, k));
      std::string rest = cell.substr(k);
      const bool input_grad = rest[0] == 'I';
      if (input_grad) rest[0] = 'B';
      auto op = parse_op(rest);
      if (!op) throw std::invalid_argument(where + "expected {stage}{F|B|I|W}{microbatch}, e.g. 0F3");
      if (op->kind == op_kind::B || op->kind == op_kind::W) {
        const int this_split = (input_grad || op->kind == op_kind::W) ? 1 : 0;
        if (op->kind == op_kind::B && split >= 0 && split != this_split)
          throw std::invalid_argument(where + "mixes full backwards (B) with split ones (I and W)");
        if (op->kind == op_kind::B) split = this_split;
      }
      const int chunk = stage_index / stages;
      const bool rr_here = placement{placement_kind::round_robin, stages, 1}.rank_of(stage_index) == rank;
      const bool v_here = placement{placement_kind::v_shape, stages, 1}.rank_of(stage_index) == rank;
      if (!rr_here && !v_here)
        throw std::invalid_argument(where + "stage " + std::to_string(stage_index) +
                                    " does not live on rank " + std::to_string(rank));
      if ((!rr_here || !v_here) && first_placement_cell.empty())
        first_placement_cell = source + ":" + std::to_string(row) + ":" + std::to_string(col);
      if (!(rr_here && round_robin_ok) && !(v_here && v_ok))
        throw std::invalid_argument(where + "stage " + std::to_string(stage_index) + " on rank " +
                                    std::to_string(rank) + " places chunks " +
                                    (rr_here ? "round-robin" : "in a V") + ", but " + first_placement_cell +
                                    " placed them " + (rr_here ? "in a V" : "round-robin"));
      round_robin_ok = round_robin_ok && rr_here;
      v_ok = v_ok && v_here;
      if (op->mb >= microbatches)
        throw std::invalid_argument(where + "microbatch " + std::to_string(op->mb) +
                                    " out of range (" + std::to_string(microbatches) + ")");
      chunks = std::max(chunks, chunk + 1);
      auto& slot = seen[rank][static_cast<int>(op->kind)];
      const size_t index = static_cast<size_t>(chunk) * microbatches + op->mb;
      if (slot.size() <= index) slot.resize(index + 1, 0);
      if (slot[index]++) throw std::invalid_argument(where + "appears twice in the row");
      ops.push_back({op->kind, op->mb, chunk});
    }
    order.push_back(std::move(ops));
    row_of_order.push_back(row);
  }
  if (static_cast<int>(order.size()) != stages)
    throw std::invalid_argument(source + ": " + std::to_string(order.size()) + " rows, expected one per stage (" +
                                std::to_string(stages) + ")");
  for (int rank = 0; rank < stages; ++rank) {
    auto has = [&](op_kind kind, int chunk, int mb) {
      const auto& slot = seen[rank][static_cast<int>(kind)];
      const size_t index = static_cast<size_t>(chunk) * microbatches + mb;
      return index < slot.size() && slot[index] != 0;
    };
    for (int c = 0; c < chunks; ++c)
      for (int i = 0; i < microbatches; ++i) {
        const char* missing = !has(op_kind::F, c, i)                   ? "F"
                              : !has(op_kind::B, c, i)                 ? (split == 1 ? "I" : "B")
                              : split == 1 && !has(op_kind::W, c, i)   ? "W"
                                                                       : nullptr;
        if (missing) {
          const placement plc{round_robin_ok ? placement_kind::round_robin : placement_kind::v_shape,
                              stages, chunks};
          throw std::invalid_argument(source + ":" + std::to_string(row_of_order[rank]) + ": rank " +
                                      std::to_string(rank) + " never runs " +
                                      std::to_string(plc.virtual_stage(rank, c)) + missing +
                                      std::to_string(i));
        }
      }
  }
  if (detected) *detected = round_robin_ok ? placement_kind::round_robin : placement_kind::v_shape;
  return order;
}

}  // namespace actorpipe
