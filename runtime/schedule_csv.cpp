#include "runtime/schedule_csv.hpp"

#include <sstream>
#include <stdexcept>

namespace actorpipe {

std::string to_schedule_csv(const std::vector<std::vector<op_id>>& order, int stages) {
  std::ostringstream os;
  for (size_t r = 0; r < order.size(); ++r) {
    for (size_t i = 0; i < order[r].size(); ++i) {
      const auto& op = order[r][i];
      if (i) os << ',';
      os << (static_cast<int>(r) + op.chunk * stages)
         << (op.kind == op_kind::F ? 'F' : op.kind == op_kind::B ? 'B' : 'W') << op.mb;
    }
    os << '\n';
  }
  return os.str();
}

std::vector<std::vector<op_id>> parse_schedule_csv(const std::string& text, int stages,
                                                   int microbatches, const std::string& source) {
  std::vector<std::vector<op_id>> order;
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
    std::vector<int> seen_f(microbatches, 0), seen_b(microbatches, 0);
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
        throw std::invalid_argument(where + "expected {stage}{F|B|W}{microbatch}, e.g. 0F3");
      int stage_index = std::stoi(cell.substr(0, k));
      auto op = parse_op(cell.substr(k));
      if (!op) throw std::invalid_argument(where + "expected {stage}{F|B|W}{microbatch}, e.g. 0F3");
      if (op->kind == op_kind::W)
        throw std::invalid_argument(where + "W ops need a split-backward schedule; this runtime's "
                                    "stages run full backwards (B) only");
      if (stage_index % stages != rank)
        throw std::invalid_argument(where + "stage " + std::to_string(stage_index) +
                                    " does not live on rank " + std::to_string(rank));
      if (stage_index / stages != 0)
        throw std::invalid_argument(where + "virtual stages (chunks) are not supported here");
      if (op->mb >= microbatches)
        throw std::invalid_argument(where + "microbatch " + std::to_string(op->mb) +
                                    " out of range (" + std::to_string(microbatches) + ")");
      auto& seen = op->kind == op_kind::F ? seen_f : seen_b;
      if (seen[op->mb]++)
        throw std::invalid_argument(where + "appears twice in the row");
      ops.push_back(*op);
    }
    for (int i = 0; i < microbatches; ++i)
      if (!seen_f[i] || !seen_b[i])
        throw std::invalid_argument(source + ":" + std::to_string(row) + ": rank " +
                                    std::to_string(rank) + " never runs " +
                                    (!seen_f[i] ? "F" : "B") + std::to_string(i));
    order.push_back(std::move(ops));
  }
  if (static_cast<int>(order.size()) != stages)
    throw std::invalid_argument(source + ": " + std::to_string(order.size()) + " rows, expected one per stage (" +
                                std::to_string(stages) + ")");
  return order;
}

}  // namespace actorpipe
