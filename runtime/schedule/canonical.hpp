#pragma once
// Textbook per-stage op orders, written as plain loops from the papers
// (GPipe; PipeDream-flush / Megatron 1F1B). Tests hold the emergent order
// of the policies against these.
#include <string>
#include <vector>

#include "messages/ops.hpp"

namespace actorpipe {

/// One stage's order of one step, per schedule (the registry points at
/// these): S stages, M microbatches, v chunks.
namespace canonical {
std::vector<op_id> gpipe_stage(int m);
std::vector<op_id> one_f_one_b_stage(int s, int rank, int m);
std::vector<op_id> zb_h1_stage(int s, int rank, int m);
std::vector<op_id> interleaved_stage(int s, int rank, int m, int v);
std::vector<op_id> zb_v_stage(int s, int rank, int m);

/// A rank's ops with the OVERLAP_F_B pairs marked: overlap[i] set means
/// ops[i] (an F) and ops[i + 1] (a B) fire as one action.
struct stage_program {
  std::vector<op_id> ops;
  std::vector<char> overlap;
};
/// DeepSeek's DualPipeV (the cut-in-half DualPipe) on S ranks (S even,
/// M >= 2S): chunk 0 goes down the V, chunk 1 comes back. Its eight
/// phases, from the reference step(); a full backward is written as the
/// input gradient (B) and at once its W, a zero-bubble one defers the W to
/// a FIFO that the W slots drain. Throws std::invalid_argument otherwise.
stage_program dualpipev_program(int s, int rank, int m);
std::vector<op_id> dualpipev_stage(int s, int rank, int m);
/// "" when DualPipeV runs S ranks and M microbatches, else why not.
std::string dualpipev_shape_error(int s, int m);
}  // namespace canonical

/// Per-stage order of one step; `chunks` is the interleaved schedule's v.
/// Throws std::invalid_argument for an unknown schedule or an interleaved
/// shape Megatron does not define (M not a multiple of S).
std::vector<std::vector<op_id>> canonical_order(const std::string& schedule, int stages,
                                                int microbatches, int chunks = 1);

/// Analytic bubble: idle time as a fraction of the step, (S-1)/(M+S-1), for
/// gpipe and 1f1b with equal F and B costs; naive is that with M = 1;
/// interleaved (S-1)/(vM+S-1); zb-h1 (S-1)/(3M+S-1), its idle time being a
/// third of 1F1B's when F = B = W.
/// async 0 (no flush; one fill and drain per run, not per step);
/// zb-v (S-1)/(6M+S-1) with F = I = W per chunk, NaN for M < 2S-1 where
/// the paper's order has no closed form. Other names get 1F1B's.
double analytic_bubble(const std::string& schedule, int stages, int microbatches, int chunks = 1);
/// The formula analytic_bubble uses, for labels.
std::string analytic_formula(const std::string& schedule);

}  // namespace actorpipe
