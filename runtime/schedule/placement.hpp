#pragma once
// Where each virtual stage (model chunk) lives. Virtual stage k runs layers
// in model order; rank r holds `chunks` of them.
//   round-robin (interleaved): chunk c of rank r is k = c*S + r.
//   V (zb-v): chunk 0 goes down the ranks, chunk 1 comes back up, so rank
//   S-1 holds k = S-1 and S, and rank 0 holds the first and the last.
namespace actorpipe {

enum class placement_kind { round_robin, v_shape };

struct placement {
  placement_kind kind = placement_kind::round_robin;
  int stages = 1;
  int chunks = 1;

  int count() const { return stages * chunks; }
  /// Virtual stage of chunk `chunk` on `rank`.
  int virtual_stage(int rank, int chunk) const {
    if (kind == placement_kind::v_shape && chunk % 2 == 1) return chunk * stages + stages - 1 - rank;
    return chunk * stages + rank;
  }
  int rank_of(int k) const {
    const int c = k / stages, i = k % stages;
    return kind == placement_kind::v_shape && c % 2 == 1 ? stages - 1 - i : i;
  }
  int chunk_of(int k) const { return k / stages; }
  bool first(int rank, int chunk) const { return virtual_stage(rank, chunk) == 0; }
  bool last(int rank, int chunk) const { return virtual_stage(rank, chunk) == count() - 1; }
};

}  // namespace actorpipe
