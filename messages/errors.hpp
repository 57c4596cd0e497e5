#pragma once
// Errors as values. What ends a run is a caf::error of the project's own
// category: the code says what happened, the context says where (step,
// replica, stage) and holds the text the user reads. The driver makes them,
// the trainer decides from the code and the fields (restart, give up), and
// exit_code_for() turns a code into the process's exit code.
//
// CAF 0.17 registers an error category as caf::sec does: an enum with a
// free make_error() found by argument-dependent lookup (which also lets a
// caf::error be constructed from the enum), an atom naming the category,
// and a renderer given to actor_system_config::add_error_category (the
// trainer's actor system has it, so actor_system::render() shows the text).
#include <caf/actor_system_config.hpp>
#include <caf/atom.hpp>
#include <caf/error.hpp>
#include <caf/make_message.hpp>
#include <caf/message.hpp>

#include <cstdint>
#include <string>

namespace actorpipe {

enum class run_errc : uint8_t {
  none = 0,           ///< CAF's convention: code 0 is no error
  stage_died,         ///< a stage actor went down (killed); supervision restarts it
  op_threw,           ///< an op threw inside a stage, which went down with it; restarted too
  hang,               ///< the watchdog saw no op fire for supervision.watchdog_s
  restart_limit,      ///< more restarts within supervision.window_steps than max_restarts
  nonfinite_stop,     ///< on_nonfinite: stop, or more steps skipped than max_skipped_fraction
  checkpoint_write,   ///< a checkpoint could not be written
  replicas_diverged,  ///< verify_replicas: weight checksums differ after a step
  bad_config,         ///< a bad config, argument or input file (found before training)
  deadlock,           ///< an op order that can never finish (simulate, a dry run of --import)
  failed,             ///< anything else, e.g. an error of another category
  regroup,            ///< rank 0 ended a generation at a step boundary to re-place its stages (a process joined)
  coordinator_lost,   ///< a rank lost rank 0's process (the supervisor and the store): killed, stopped or cut off
};

/// An error code enum's category atom. (CAF 0.17.6 itself has no such
/// trait: caf::sec names its atom inside make_error.)
template <class E>
struct error_category;

template <>
struct error_category<run_errc> {
  static constexpr caf::atom_value value = caf::atom("actorpipe");  // CAF 0.17: at most 10 characters
};

constexpr caf::atom_value run_error_category = error_category<run_errc>::value;

constexpr const char* to_string(run_errc code) {
  switch (code) {
    case run_errc::none: return "none";
    case run_errc::stage_died: return "stage_died";
    case run_errc::op_threw: return "op_threw";
    case run_errc::hang: return "hang";
    case run_errc::restart_limit: return "restart_limit";
    case run_errc::nonfinite_stop: return "nonfinite_stop";
    case run_errc::checkpoint_write: return "checkpoint_write";
    case run_errc::replicas_diverged: return "replicas_diverged";
    case run_errc::bad_config: return "bad_config";
    case run_errc::deadlock: return "deadlock";
    case run_errc::failed: return "failed";
    case run_errc::regroup: return "regroup";
    case run_errc::coordinator_lost: return "coordinator_lost";
  }
  return "failed";
}

/// The process's exit code for a run that ended with `code`: the one place
/// that decides it (docs/EXIT_CODES.md lists them).
constexpr int exit_code_for(run_errc code) {
  switch (code) {
    case run_errc::none: return 0;
    case run_errc::bad_config: return 2;
    case run_errc::hang:
    case run_errc::deadlock: return 3;
    case run_errc::restart_limit: return 4;
    case run_errc::coordinator_lost: return 5;
    case run_errc::stage_died:
    case run_errc::op_threw:
    case run_errc::nonfinite_stop:
    case run_errc::checkpoint_write:
    case run_errc::replicas_diverged:
    case run_errc::failed:
    case run_errc::regroup: return 1;
  }
  return 1;
}

/// Supervision restarts the run after these (from the last step boundary).
constexpr bool restartable(run_errc code) { return code == run_errc::stage_died || code == run_errc::op_threw; }

/// What a run error says, field by field (the caf::error's context).
struct run_failure {
  run_errc code = run_errc::failed;
  int64_t step = -1;     ///< the step the run was at (-1: none)
  int32_t replica = -1;  ///< -1: not one replica's
  int32_t stage = -1;    ///< -1: not one stage's
  std::string text;      ///< what the user reads, whole
};

/// The context of an error of this category: (step, replica, stage, text).
inline caf::message failure_context(int64_t step, int32_t replica, int32_t stage, std::string text) {
  return caf::make_message(step, replica, stage, std::move(text));
}

inline caf::error make_error(run_errc code) { return caf::error{static_cast<uint8_t>(code), run_error_category}; }

inline caf::error make_error(run_errc code, caf::message context) {
  return caf::error{static_cast<uint8_t>(code), run_error_category, std::move(context)};
}

inline caf::error to_error(const run_failure& f) {
  return make_error(f.code, failure_context(f.step, f.replica, f.stage, f.text));
}

/// Reads an error of this category back into its fields. False for another
/// category (or none), and `out` is left alone.
inline bool read_failure(const caf::error& err, run_failure& out) {
  if (!err || err.category() != run_error_category) return false;
  run_failure f;
  f.code = static_cast<run_errc>(err.code());
  const auto& ctx = err.context();
  if (ctx.match_elements<int64_t, int32_t, int32_t, std::string>()) {
    f.step = ctx.get_as<int64_t>(0);
    f.replica = ctx.get_as<int32_t>(1);
    f.stage = ctx.get_as<int32_t>(2);
    f.text = ctx.get_as<std::string>(3);
  } else {
    f.text = to_string(f.code);
  }
  out = std::move(f);
  return true;
}

/// actor_system::render() of an error of this category: its text.
inline std::string render_run_error(uint8_t code, caf::atom_value, const caf::message& ctx) {
  if (ctx.match_elements<int64_t, int32_t, int32_t, std::string>()) return ctx.get_as<std::string>(3);
  return std::string("actorpipe: ") + to_string(static_cast<run_errc>(code));
}

inline void add_run_error_category(caf::actor_system_config& cfg) {
  cfg.add_error_category(run_error_category, render_run_error);
}

/// What the command line prints on stderr for a run that ended with `code`
/// and text `what` (a hang's op grid ends with its own newline).
inline std::string failure_line(run_errc code, const std::string& what) {
  switch (code) {
    case run_errc::hang: return "actorpipe: " + what;
    case run_errc::restart_limit: return "actorpipe: gave up: " + what + "\n";
    default: return "actorpipe: error: " + what + "\n";
  }
}

}  // namespace actorpipe
