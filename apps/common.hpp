#pragma once
// What the actorpipe commands share: exit codes, the flag parser, loading a
// config and overriding its schedule, a training run with progress lines,
// and writing the output files a command was asked for. Argument handling
// only; the work lives in runtime/ and actors/.
#include <cstdint>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "actors/trainer.hpp"
#include "apps/progress.hpp"
#include "runtime/dist/launch/rank_env.hpp"
#include "messages/errors.hpp"
#include "runtime/config/config.hpp"
#include "runtime/observe/metrics.hpp"
#include "runtime/schedule/schedule_csv.hpp"

namespace actorpipe::app {

// Exit codes come from messages/errors.hpp's exit_code_for(), the one
// place that decides them (docs/EXIT_CODES.md).
constexpr int exit_ok = exit_code_for(run_errc::none);
constexpr int exit_failed = exit_code_for(run_errc::failed);
constexpr int exit_usage = exit_code_for(run_errc::bad_config);
constexpr int exit_stuck = exit_code_for(run_errc::deadlock);

/// A bad command line: main prints "actorpipe: WHAT" and exits 2.
struct usage_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// One flag of a command: its names ("--steps", "-h,--help"), the value it
/// takes as --help shows it ("N"; empty: a flag without a value), and its
/// help (lines after the first are indented under it).
struct flag_spec {
  std::string names;
  std::string value;
  std::string help;
};

/// A command's command line as CLI11 parses it and its --help shows it.
struct command_spec {
  std::string usage;        ///< the help's first line, "usage: actorpipe ..."
  std::string description;  ///< paragraphs between the usage and the options
  std::vector<flag_spec> flags;
  std::string footer;       ///< after the options (exit codes)
  size_t column = 20;       ///< where the flags' help starts
};

/// What the command line held: positional arguments, and each flag given
/// by its long name ("--steps") with its value (the last one when repeated;
/// "" for a flag without a value). --help given: has("--help") and `help`.
struct args {
  std::vector<std::string> positional;
  std::map<std::string, std::string> options;
  std::string help;
  bool has(const std::string& k) const { return options.count(k) > 0; }
};

/// argv[first..] under `spec` (CLI11): a flag CLI11 refuses, or one the
/// spec does not have, is a usage_error naming it.
args parse(int argc, char** argv, int first, const command_spec& spec);

/// The registered schedules' names ("naive | gpipe | ..."), the trainable
/// ones or every one, broken into lines of at most `width` characters (the
/// first `first_width`) for a help text: help lists cannot drift from the
/// registry.
std::string schedule_names(bool trainable_only, size_t first_width, size_t width);

/// `v` as an integer in 1..INT_MAX, or a usage_error naming `flag`.
int64_t parse_count(const std::string& flag, const std::string& v);

/// The config at `path`, checked against this machine's CUDA devices; in
/// a multi-process run `ranks` puts `auto`'s stages on cuda:LOCAL_RANK.
config load(const std::string& path, const rank_env& ranks = {});

/// --schedule NAME (or one of compare's NAMEs, NAME+recompute too) over the
/// config's pipeline section, with the chunk and microbatch rules it needs.
void set_schedule(config& cfg, std::string name);

/// async streams the whole run as one step, its microbatches counted in an
/// int; the config checks its own steps, --steps comes after.
void check_async_stream(const config& cfg);

/// The run's first line, and with dp > 1 the device map; in a
/// multi-process run (`ranks`) as device_label names what other ranks run.
void print_plan(const config& cfg, const rank_env& ranks = {});

/// run_training, reporting as `progress` says (apps/progress.hpp): lines,
/// evaluations, TensorBoard; the result's throughput figures set.
train_output train_one(const config& cfg, const progress_options& progress,
                       std::vector<std::vector<op_id>> fixed_order = {},
                       placement_kind fixed_placement = placement_kind::round_robin, bool verify_replicas = false,
                       const std::string& resume = {}, const rank_env& ranks = {}, const std::string& digest = {},
                       std::vector<std::vector<char>> fixed_overlap = {});

/// The whole file, or a usage_error.
std::string read_file(const std::string& path);

/// --import PATH: the schedule CSV for `stages` and `microbatches`, or a
/// usage_error naming the cell. With `speaks`, what the import did with
/// torch's other actions goes to stderr, once per kind.
imported_schedule read_import(const std::string& path, int stages, int microbatches, bool speaks = true);

/// Before any work: every output path given can be written (its directory
/// exists and takes files; it is not a directory, a device or a FIFO).
void check_outputs(const args& a, const std::vector<std::string>& flags);

/// Writes the outputs asked for, each atomically; a failure is named and
/// the others are still written. Returns false if any failed.
class output_writer {
public:
  explicit output_writer(const args& a) : a_(a) {}

  void write(const char* flag, const std::function<std::string()>& text, const char* what);
  /// `save(path)` writes the output of `flag` itself.
  void save(const char* flag, const std::function<void(const std::string&)>& save);
  bool ok() const { return ok_; }

private:
  const args& a_;
  bool ok_ = true;
};

/// --timeline, --memory, --results (one run) and --report (any number).
void write_outputs(output_writer& out, const config& cfg, const std::vector<train_result>& runs);

/// The commands: argv[1] is the command's name, its arguments follow.
int cmd_train(int argc, char** argv);
int cmd_compare(int argc, char** argv);
int cmd_bubble(int argc, char** argv);
int cmd_simulate(int argc, char** argv);
int cmd_launch(int argc, char** argv);
int cmd_generate(int argc, char** argv);
int cmd_keys(int argc, char** argv);
int cmd_tokenize(int argc, char** argv);

}  // namespace actorpipe::app
