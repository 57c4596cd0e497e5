#pragma once
// Rank 0's generations of a multi-process run, for the supervisor actor
// (actors/attempt/generation_host.hpp). A generation is every rank's: each joins
// the rendezvous and builds its own stages (actors/process/process_context.hpp); rank
// 0 then runs the driver over all of them. After a failure it finds the
// processes that are gone, asks the others what they hold, and heals from
// their memory (or disk) with the launcher starting the dead again, or
// gives up; at the end it tells every rank the exit code.
#include <functional>
#include <memory>

#include "actors/attempt/generation_host.hpp"
#include "actors/process/process_context.hpp"

namespace actorpipe::rank_detail {


/// Built on the supervisor's own thread (it makes a scoped actor there).
std::unique_ptr<generation_host> make_multi_process_host(process_runtime& rt, process_start start);

}  // namespace actorpipe::rank_detail
