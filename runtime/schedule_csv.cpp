#include "runtime/schedule_csv.hpp"

#include <sstream>
#include <stdexcept>

namespace actorpipe {

std::string to_schedule_csv(const std::vector<std::vector<op_id>>& order, int stages,
                            bool split_backward) {
  std::ostringstream os;
  for (size_t r = 0; r < order.size(); ++r) {
    for (size_t i = 0; i < order[r].size(); ++i) {
      const auto& op = order[r][i];
      if (i) os << ',';
      os << (static_cast<int>(r) + op.chunk * stages)
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
                                                   int microbatches, const std::string& source) {
  std::vector<std::vector<op_id>> order;
  int split = -1;  // unknown until the first backward cell: 1 for I, 0 for B
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
    std::vector<int> seen_f(microbatches, 0), seen_b(microbatches, 0), seen_w(microbatches, 0);
    std::istringstream cells(line);
    std::string cell;
    int col = 0;
    while (std::getline(cells, cell, ',')) {
      ++col;
      auto b = cell.find_first_not_of(" \t");
      if (b == std::string::npos) continue;
      cell = cell.substr(b, cell.find_last_not_of(" \t") - b + 1);
      auto where = source + ":" + std::to_string(row) + ":" + std::to_string(col) + ": '" + cell + "': ";
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
      if (stage_index % stages != rank)
        throw std::invalid_argument(where + "stage " + std::to_string(stage_index) +
                                    " does not live on rank " + std::to_string(rank));
      if (stage_index / stages != 0)
        throw std::invalid_argument(where + "virtual stages (chunks) are not supported here");
      if (op->mb >= microbatches)
        throw std::invalid_argument(where + "microbatch " + std::to_string(op->mb) +
                                    " out of range (" + std::to_string(microbatches) + ")");
      auto& seen = op->kind == op_kind::F ? seen_f : op->kind == op_kind::B ? seen_b : seen_w;
      if (seen[op->mb]++)
        throw std::invalid_argument(where + "appears twice in the row");
      ops.push_back(*op);
    }
    for (int i = 0; i < microbatches; ++i) {
      const char* missing = !seen_f[i]                 ? "F"
                            : !seen_b[i]               ? (split == 1 ? "I" : "B")
                            : split == 1 && !seen_w[i] ? "W"
                                                       : nullptr;
      if (split != 1 && seen_w[i]) missing = nullptr;
      if (missing)
        throw std::invalid_argument(source + ":" + std::to_string(row) + ": rank " +
                                    std::to_string(rank) + " never runs " + missing + std::to_string(i));
    }
    order.push_back(std::move(ops));
  }
  if (static_cast<int>(order.size()) != stages)
    throw std::invalid_argument(source + ": " + std::to_string(order.size()) + " rows, expected one per stage (" +
                                std::to_string(stages) + ")");
  return order;
}

}  // namespace actorpipe
