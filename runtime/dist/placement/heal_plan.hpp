#pragma once
// Healing a multi-process run: what rank 0's supervisor decides for the
// next generation (the plan every process reads from the store), where a
// lost stage's live copy is, and which step boundary every stage rolls back
// to. Pure decisions over the rank placement; the actors and the transfers
// are in actors/process_run.cpp.
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "runtime/dist/placement/rank_placement.hpp"

namespace actorpipe {

/// Where a live copy of slot (d, r) is for a process started again: the
/// rank, and the slot under which its boundary memory holds the copy.
struct donor {
  int rank = -1;  ///< -1: none
  int index = -1;
};

/// Layers [first, last] of a re-cut's new stage, taken from the boundary
/// copy of old slot `from` (index replica * old stages + stage) that process
/// `holder` keeps in its memory: the slot's own process, its keeper's
/// (dp 1), or another replica's. holder -1: nobody alive keeps it (from
/// disk). recut_placement names holders by their rank in the generation
/// before; a heal plan by their rank in the next.
struct recut_piece {
  int from = -1;
  int first = 0;
  int last = -1;
  int holder = -1;
  bool operator==(const recut_piece& o) const {
    return from == o.from && first == o.first && last == o.last && holder == o.holder;
  }
};

/// What rank 0's supervisor decided for the next generation, in the store
/// under <prefix>/actorpipe/heal/gen_<g>, where a process started again
/// reads it.
struct heal_plan {
  uint32_t generation = 0;
  int64_t resume_after = -1;    ///< every slot restarts from the boundary after this step
  bool from_disk = false;       ///< from the newest checkpoint (no live copy of a lost stage)
  int64_t fired_through = -1;   ///< the faults that end a stage, up to this step, have fired
  std::vector<int> replaced;    ///< ranks started again
  /// A re-placement over fewer processes (shrink_placement): the processes
  /// of the next generation by their rank in it, each named by the RANK it
  /// was started with. Empty: the same processes as the generation before.
  std::vector<int> members;
  /// Slots that start from a copy their new process keeps under another
  /// slot (a replica's): slot index -> the index it is kept under.
  std::map<int, int> sources;
  /// Slots handed to a process that joined: slot index -> the process
  /// (rank in the next generation) that sends its copy, and the slot its
  /// memory keeps it under. Where a slot is not named, donor_of decides.
  std::map<int, donor> donors;
  /// The layers' partition this generation runs (one inclusive range per
  /// stage; empty: the config's). Where it differs from the generation
  /// before's, the layers move (pipeline.rebalance): each stage's state is
  /// put together from the slots that held its layers.
  std::vector<std::pair<int, int>> parts;
  /// A re-cut (runtime/dist/placement/recut.hpp: the stage count follows
  /// the processes): new slot index -> where each piece of its layers comes
  /// from, holders as ranks of the next generation. Empty: none.
  std::map<int, std::vector<recut_piece>> pieces;

  /// One line of text, and back; decode throws rendezvous_error for a line
  /// that does not parse.
  std::string encode() const;
  static heal_plan decode(const std::string& text);
  bool was_replaced(int rank) const;
  /// Whether this generation hands state over the tensor channel: a heal
  /// from memory that started processes again (their stages come from
  /// their donors).
  bool hands_over() const { return generation > 0 && !from_disk && !replaced.empty(); }
};

/// The same stage of the first other replica whose rank was not replaced
/// (its own slot); at dp = 1, the keeper's process (rank_placement::keeper),
/// unless it was replaced too (the slot's own copy there).
donor donor_of(const rank_placement& places, const heal_plan& hp, int d, int r);

/// The next generation's placement when the processes `gone` (ranks of
/// `places`) are not replaced: the survivors, renumbered 0 .. n-1 in rank
/// order, keep their stages, and each lost stage goes to the process that
/// holds its copy (donor_of with `gone` as replaced), so that nothing
/// travels; without a copy (from disk), to the survivor with the fewest
/// stages. Throws std::invalid_argument when nobody survives.
struct shrunk {
  rank_placement places;
  std::vector<int> kept;        ///< the old rank of each new one
  std::map<int, int> sources;   ///< as heal_plan::sources
  std::map<int, int> from;      ///< lost slot index -> the old rank whose memory it starts from (-1: disk)
};
/// Throws too when only a rank 0 that holds no stage (a coordinator apart)
/// is left.
shrunk shrink_placement(const rank_placement& places, const std::vector<int>& gone, bool from_disk);

/// The next generation's placement when `joining` processes join (grow):
/// they become ranks world .. world + joining - 1, in order, and each
/// takes the highest slot of the process holding the most slots (the
/// lowest such rank), while that process holds more than one. The others
/// keep their rank and their other slots; a moved slot starts from its old
/// process's own copy (`donors`).
struct grown {
  rank_placement places;
  int taken = 0;                ///< the joiners that got a slot (the first `taken`)
  std::map<int, donor> donors;  ///< as heal_plan::donors
  std::map<int, int> from;      ///< moved slot index -> its old process
};
grown grow_placement(const rank_placement& places, int joining);

/// "0 | 1 2 | 3": each process's stages (replica r's as r.s at dp > 1).
std::string describe_placement(const rank_placement& places);

/// After which steps a rank's process holds a boundary copy of a slot.
using held_steps = std::function<std::vector<int64_t>(int rank, int slot)>;

/// Which boundaries a stage keeps (and at dp = 1 copies to its keeper),
/// the lasting ones: after every `every`-th step (steps every-1,
/// 2 every-1, ...) and at its generation's start.
struct copy_rule {
  int every = 1;      ///< supervision.copy_every
  int64_t start = -1; ///< the generation's start (resumed after this step)
  bool lasting(int64_t step) const { return step == start || (step + 1) % every == 0; }
  /// The newest lasting boundary at or before `step` (at most `every`
  /// steps back, or the start).
  int64_t newest_lasting(int64_t step) const;
  /// The lasting boundary before lasting boundary `step`; before the
  /// generation's start, by the period (what the generation before kept);
  /// below -1 when there is none.
  int64_t lasting_before(int64_t step) const;
};

/// The newest boundary from which every slot of the next generation can
/// start from memory: a survivor's own copy, a lost slot's donor's copy
/// (nullopt: some slot has neither). Only the three newest lasting ones up
/// to `upto` (the last step done) are candidates: copies still on their way
/// (at most up to the next lasting step) land after this choice, and with
/// four kept per slot (boundary_memory) they never push out the third.
std::optional<int64_t> newest_common_boundary(const rank_placement& places, const heal_plan& hp, int64_t upto,
                                              const held_steps& held, const copy_rule& copies = {});

}  // namespace actorpipe
