#include "runtime/schedule/ready_board.hpp"

#include <stdexcept>

namespace actorpipe {

void ready_board::reset(int microbatches, int chunks, bool split) {
  m_ = microbatches;
  chunks_ = chunks;
  split_ = split;
  for (auto* sets : {&fwd_ready_, &bwd_ready_, &w_ready_, &fwd_arrived_, &bwd_arrived_}) {
    sets->assign(chunks, mb_set{});
    for (auto& set : *sets) set.reset(microbatches);
  }
  fwd_next_.assign(chunks, 0);
  bwd_next_.assign(chunks, 0);
  fwd_seen_.assign(static_cast<size_t>(chunks) * microbatches, 0);
  bwd_seen_.assign(static_cast<size_t>(chunks) * microbatches, 0);
  fwd_done_ = bwd_done_ = w_done_ = open_ = 0;
}

void ready_board::promote(mb_set& arrived, mb_set& ready, int next) {
  if (next < m_ && arrived.contains(next)) {
    arrived.erase(next);
    ready.insert(next);
  }
}

bool ready_board::arrive(op_kind kind, int chunk, int mb) {
  if (kind == op_kind::W || !in_range(chunk, mb)) return false;
  const bool fwd = kind == op_kind::F;
  char& seen = (fwd ? fwd_seen_ : bwd_seen_)[slot(chunk, mb)];
  if (seen) return false;
  seen = 1;
  auto& arrived = (fwd ? fwd_arrived_ : bwd_arrived_)[chunk];
  arrived.insert(mb);
  promote(arrived, (fwd ? fwd_ready_ : bwd_ready_)[chunk], (fwd ? fwd_next_ : bwd_next_)[chunk]);
  return true;
}

void ready_board::fire(op_id op) {
  if (!ready(op)) throw std::logic_error("ready_board: " + to_string(op) + " fired but not ready");
  const int c = op.chunk;
  switch (op.kind) {
    case op_kind::F:
      fwd_ready_[c].erase(op.mb);
      promote(fwd_arrived_[c], fwd_ready_[c], ++fwd_next_[c]);
      ++fwd_done_;
      break;
    case op_kind::B:
      bwd_ready_[c].erase(op.mb);
      promote(bwd_arrived_[c], bwd_ready_[c], ++bwd_next_[c]);
      if (split_) w_ready_[c].insert(op.mb);
      ++bwd_done_;
      break;
    case op_kind::W:
      w_ready_[c].erase(op.mb);
      ++w_done_;
      break;
  }
  if (c == 0) {
    if (op.kind == op_kind::F) ++open_;
    if (op.kind == (split_ ? op_kind::W : op_kind::B)) --open_;
  }
}

bool ready_board::ready(op_id op) const {
  if (!in_range(op.chunk, op.mb)) return false;
  const auto& sets = op.kind == op_kind::F ? fwd_ready_ : op.kind == op_kind::B ? bwd_ready_ : w_ready_;
  return sets[op.chunk].contains(op.mb);
}

bool ready_board::done() const {
  const int n = m_ * chunks_;
  return bwd_done_ == n && (!split_ || w_done_ == n);
}

stage_view ready_board::view(int rank, int stages, const double* measured) const {
  stage_view v;
  v.rank = rank;
  v.stages = stages;
  v.microbatches = m_;
  v.fwd_done = fwd_done_;
  v.bwd_done = bwd_done_;
  v.fwd_ready = fwd_ready_.data();
  v.bwd_ready = bwd_ready_.data();
  v.chunks = chunks_;
  v.w_ready = w_ready_.data();
  v.w_done = w_done_;
  v.open_microbatches = open_;
  v.measured = measured;
  return v;
}

int ready_board::first_missing(op_kind kind, int chunk) const {
  for (int i = 0; i < m_; ++i)
    if (!arrived(kind, chunk, i)) return i;
  return -1;
}

std::vector<op_id> ready_board::ready_ops() const {
  std::vector<op_id> out;
  for (int c = 0; c < chunks_; ++c)
    for (int i = 0; i < m_; ++i)
      for (op_kind k : {op_kind::F, op_kind::B, op_kind::W})
        if (ready({k, i, c})) out.push_back({k, i, c});
  return out;
}

std::vector<op_id> ready_board::queued_ops() const {
  std::vector<op_id> out;
  for (int c = 0; c < chunks_; ++c)
    for (int i = 0; i < m_; ++i) {
      if (fwd_arrived_[c].contains(i)) out.push_back({op_kind::F, i, c});
      if (bwd_arrived_[c].contains(i)) out.push_back({op_kind::B, i, c});
    }
  return out;
}

}  // namespace actorpipe
