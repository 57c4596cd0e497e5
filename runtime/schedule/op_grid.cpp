#include "runtime/schedule/op_grid.hpp"

#include <sstream>

namespace actorpipe {

namespace {

void list(std::ostringstream& os, const char* what, const std::vector<op_id>& ops) {
  os << what << "[";
  for (size_t i = 0; i < ops.size(); ++i) os << (i ? " " : "") << to_string(ops[i]);
  os << "]";
}

}  // namespace

std::string op_grid_row(const std::string& label, const std::vector<op_id>& fired, const ready_board* pending,
                        const placement& plc, int rank) {
  std::ostringstream os;
  list(os, (label + ": fired ").c_str(), fired);
  if (!pending) return os.str();
  const ready_board& b = *pending;
  list(os, "  ready, not chosen: ", b.ready_ops());
  if (auto queued = b.queued_ops(); !queued.empty()) list(os, "  in order after them: ", queued);
  for (int c = 0; c < b.chunks(); ++c) {
    const int k = plc.virtual_stage(rank, c);
    if (int f = b.first_missing(op_kind::F, c); f >= 0)
      os << "; " << to_string(op_id{op_kind::F, f, c}) << " waits for its input from "
         << (k == 0 ? std::string("the driver") : "stage " + std::to_string(plc.rank_of(k - 1)));
    if (int g = b.first_missing(op_kind::B, c); g >= 0)
      os << "; " << to_string(op_id{op_kind::B, g, c})
         << (k + 1 == plc.count() ? std::string(" waits for its own forward")
                                  : " waits for its gradient from stage " + std::to_string(plc.rank_of(k + 1)));
  }
  return os.str();
}

}  // namespace actorpipe
