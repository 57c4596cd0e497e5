#pragma once
// One rank of a multi-process run (train_options::ranks.world_size > 1).
//
// Rank 0 runs the supervisor actor (actors/supervisor/supervisor_actor.hpp) on a rank
// host (actors/supervisor/multi_process_host.hpp); every other rank runs an agent actor
// (actors/process/worker_agent.hpp). For each generation every rank joins the
// rendezvous (endpoints, config digests, the store), forms the data plane
// (activations and gradients: shared rings or TCP streams), the tensor
// channel (Gloo send/recv: state handed over in a heal) and the replicas'
// allreduce groups, builds its own stage actors (rank_placement gives it
// its slots) and connects to every other rank's directory, so that each
// pair of ranks has a direct CAF connection before the first message.
// Rank 0's supervisor then wires every stage (a remote stage gets the
// handles of its neighbours and the driver), runs the driver, collects the
// weights and tells every other rank to stop, with the run's exit code.
//
// Without supervision.max_restarts, a worker process that dies ends the
// run: its stages' proxies go down on rank 0, the driver fails the run
// naming the stage (exit 1), and rank 0 stops the others.
//
// With it, the supervisor heals the run in generations. Every stage keeps
// a copy of its weights and optimizer state at each step boundary in its
// process's boundary memory; at dp = 1 it also sends that copy, on a
// channel of its own, to its keeper (rank_placement::keeper). When a
// process dies, the rank host asks every surviving process which
// boundaries it holds, picks the newest that all slots can start from
// (runtime/dist/placement/heal_plan.hpp), writes the plan to the store, has the
// launcher start the dead rank again, and tells the survivors' agents to
// start the next generation. There, a lost stage's donor (a replica's
// process, or its keeper's) sends the copy over the new generation's
// tensor channel, and every other stage starts from its own.
//
// Each step of a generation is a unit of its own (actors/process/process_context.hpp
// lists them).
#include "actors/attempt/run_options.hpp"

namespace actorpipe {

/// Runs this process's rank of cfg. Rank 0 returns what run_training
/// returns; another rank returns an empty output once rank 0 is done, or
/// throws peer_stopped when rank 0 ended the run with a failure. Throws
/// rank_env_error (placement), rendezvous_mismatch_error (exit 2) and
/// rendezvous_error (exit 1) before anything trains.
train_output run_rank(const config& cfg, const train_options& opts);

/// True when a run_rank returned without its actor system shut down (it
/// waited 5 s for it): the process should end with _exit once its outputs
/// are written, since destructors would wait on that system.
bool teardown_left_behind();

}  // namespace actorpipe
