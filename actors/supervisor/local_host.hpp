#pragma once
// A supervisor's generations in this process alone: every replica's stages
// and the driver spawned here, from the config (or --resume) at first and,
// supervised, from the step boundary the driver keeps in memory after each
// step; a restart after a stage died or threw, within supervision's
// max_restarts and window_steps (restart_ledger).
#include <memory>

#include "actors/attempt/generation_host.hpp"

namespace actorpipe {

std::unique_ptr<generation_host> make_local_host(const config& cfg, const train_options& opts);

/// Runs cfg in this process under a supervisor on a local host, in one
/// actor system for the whole run: what run_training returns for a run
/// whose stages all live here. Throws config_error for bad input (a fault
/// that needs processes among them) and a run_error when the run fails.
train_output run_supervised(const config& cfg, const train_options& opts);

}  // namespace actorpipe
