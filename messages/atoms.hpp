#pragma once
// Atoms that name every message kind. CAF 0.17: at most 10 characters.
#include <caf/atom.hpp>

namespace actorpipe {

/// driver -> stage: neighbours and the driver (once, before the first step).
using wire_atom = caf::atom_constant<caf::atom("wire")>;
/// activation of (step, mb) travelling downstream.
using fwd_atom = caf::atom_constant<caf::atom("fwd")>;
/// gradient of (step, mb) travelling upstream.
using bwd_atom = caf::atom_constant<caf::atom("bwd")>;
/// stage -> itself: fire the next ready op after the mailbox drained.
using tick_atom = caf::atom_constant<caf::atom("tick")>;
/// lock-step clock (driver) -> stage: fire at most one op; and the reply.
using round_atom = caf::atom_constant<caf::atom("round")>;
using round_done_atom = caf::atom_constant<caf::atom("roundDone")>;
/// stage -> driver: every backward of the step is done.
using grads_atom = caf::atom_constant<caf::atom("grads")>;
/// driver -> stage: clip and take the optimizer step.
using apply_atom = caf::atom_constant<caf::atom("apply")>;
/// stage -> driver: optimizer step taken, and the tensor it left with a
/// NaN or an infinity ("" when none).
using applied_atom = caf::atom_constant<caf::atom("applied")>;
/// driver -> stage: every stage's update of the step is judged: keep it, or
/// undo it (one of them was not finite); the next step begins.
using close_atom = caf::atom_constant<caf::atom("close")>;
/// driver -> stage 0 -> ... -> last: no-grad forward on held-out data.
using eval_atom = caf::atom_constant<caf::atom("eval")>;
/// last stage -> driver: held-out loss and accuracy.
using evaluated_atom = caf::atom_constant<caf::atom("evaluated")>;
/// requester -> driver: train; also requester -> stage: hand over weights.
using run_atom = caf::atom_constant<caf::atom("run")>;
using weights_atom = caf::atom_constant<caf::atom("weights")>;
/// driver -> driver: time to look for a hang; driver -> stage: your state.
using watchdog_atom = caf::atom_constant<caf::atom("watchdog")>;
using status_atom = caf::atom_constant<caf::atom("status")>;
/// stage -> stage: an input it waited op_timeout for; send it again.
using resend_atom = caf::atom_constant<caf::atom("resend")>;
/// stage -> itself: look for a missing input (a dropped message).
using recheck_atom = caf::atom_constant<caf::atom("recheck")>;
/// driver -> stage: hand over weights and optimizer state for a checkpoint.
using ckpt_atom = caf::atom_constant<caf::atom("ckpt")>;
/// Multi-process: any rank -> a rank's directory: its stage actors; rank 0
/// -> every other rank's directory: the run is over (with its exit code).
using stages_atom = caf::atom_constant<caf::atom("stages")>;
using stop_atom = caf::atom_constant<caf::atom("stop")>;
/// Multi-process healing: rank 0 -> every surviving rank's directory: start
/// generation g (the plan is in the store).
using heal_atom = caf::atom_constant<caf::atom("heal")>;
/// Healing at dp = 1: a stage -> its keeper (a stage in another process):
/// a copy of its boundary state after a step is on the way over the tensor
/// channel (asked with a request at wiring, answered once it is in); the
/// keeper -> itself: that copy arrived or failed.
using keep_atom = caf::atom_constant<caf::atom("keep")>;
using kept_atom = caf::atom_constant<caf::atom("kept")>;
/// Healing: rank 0 -> a rank's directory: the steps after which its
/// process holds a boundary copy of a slot.
using held_atom = caf::atom_constant<caf::atom("held")>;
/// Healing: rank 0 -> a rank's directory: the processes whose boundary
/// copies its process is receiving now (a copy on its way may still
/// arrive; with none, nothing more will).
using arriving_atom = caf::atom_constant<caf::atom("arriving")>;
/// Re-placing: rank 0 -> a rank's directory: the bytes its process can
/// still take (runtime/util/host_memory).
using room_atom = caf::atom_constant<caf::atom("room")>;
/// A takeover (launch --coordinator etcd://): the coordinator that won the
/// election -> every worker's directory: (epoch, the new store's host and
/// port, its directory) the run is this coordinator's from now on, answered
/// with the epoch; a worker -> itself: (epoch) no coordinator took over in
/// time.
using takeover_atom = caf::atom_constant<caf::atom("takeover")>;

}  // namespace actorpipe
