#pragma once
// One training run, the entry point a command calls: build the model,
// place the stages, spawn the actors, train, evaluate, collect the weights,
// shut everything down (in one process, or as one process of many).
#include "actors/attempt/run_options.hpp"

namespace actorpipe {

/// Runs cfg to completion. Throws config_error for bad input found while
/// loading (data, init_from) and a run_error if the run fails. With
/// opts.ranks.world_size > 1 this process is one rank of a multi-process run
/// (actors/process_run.hpp): rank 0 returns the run's output, the others
/// an empty one once rank 0 is done.
train_output run_training(const config& cfg, const train_options& opts = {});

}  // namespace actorpipe
