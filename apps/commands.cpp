// The command dispatch and what each kind of failure exits with; the
// commands live in apps/*.cpp. apps/main.cpp runs it as the program.
#include "apps/commands.hpp"

#include <cstdio>
#include <exception>
#include <string>

#include "actors/process_run.hpp"
#include "apps/common.hpp"
#include "runtime/util/text.hpp"

namespace {

using namespace actorpipe;
using namespace actorpipe::app;

const char* main_help =
    "usage: actorpipe COMMAND [ARGS]\n"
    "\n"
    "Pipeline-parallel training on actors: each stage is an actor that fires\n"
    "its ready forward/backward ops under a schedule policy.\n"
    "\n"
    "commands:\n"
    "  train CONFIG     train the model a YAML config describes\n"
    "  compare CONFIG   train it under several schedules (the config's\n"
    "                   compare.schedules, else naive, gpipe, 1f1b); one table\n"
    "  bubble           print the analytic pipeline-bubble table\n"
    "  simulate [CONFIG] simulate a schedule's step on a cost model (no tensors)\n"
    "  launch CONFIG    train it as --nprocs N local processes (like torchrun)\n"
    "  generate CONFIG  continue a prompt with a trained GPT or LLaMA (--load STATE)\n"
    "  tokenize         a text file into a token file with a SentencePiece model\n"
    "  keys [PREFIX]    every config key with its type, default and meaning\n"
    "\n"
    "Run 'actorpipe COMMAND --help' for a command's options.\n";

}  // namespace

int run_command(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // progress lines reach pipes and logs at once
  std::string cmd = argc > 1 ? argv[1] : "";
  try {
    if (cmd.empty() || cmd == "--help" || cmd == "-h" || cmd == "help") {
      std::fputs(main_help, cmd.empty() ? stderr : stdout);
      return cmd.empty() ? exit_usage : exit_ok;
    }
    if (cmd == "train") return cmd_train(argc, argv);
    if (cmd == "compare") return cmd_compare(argc, argv);
    if (cmd == "bubble") return cmd_bubble(argc, argv);
    if (cmd == "simulate") return cmd_simulate(argc, argv);
    if (cmd == "launch") return cmd_launch(argc, argv);
    if (cmd == "generate") return cmd_generate(argc, argv);
    if (cmd == "keys") return cmd_keys(argc, argv);
    if (cmd == "tokenize") return cmd_tokenize(argc, argv);
    throw usage_error("unknown command " + quoted_input(cmd) +
                      " (train | compare | bubble | simulate | launch | generate | tokenize | keys; see --help)");
  } catch (const config_error& e) {
    // A rank other than 0 keeps quiet about what rank 0 says for every rank.
    const auto* rank_error = dynamic_cast<const rank_env_error*>(&e);
    if (!rank_error || !rank_error->quiet()) std::fprintf(stderr, "%s\n", e.what());
    return exit_usage;
  } catch (const usage_error& e) {
    std::fprintf(stderr, "actorpipe: %s\n", e.what());
    return exit_usage;
  } catch (const peer_stopped& e) {
    std::fprintf(stderr, "actorpipe: %s\n", e.what());
    return e.code();
  } catch (const run_error& e) {
    std::fputs(failure_line(e.code(), e.what()).c_str(), stderr);
    return exit_code_for(e.code());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "actorpipe: error: %s\n", e.what());
    return exit_failed;
  }
}
