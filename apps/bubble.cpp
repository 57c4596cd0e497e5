// actorpipe bubble: the analytic pipeline-bubble table.
#include <cstdio>

#include "apps/common.hpp"
#include "runtime/observe/report.hpp"

namespace actorpipe::app {

namespace {

const command_spec bubble_spec = {
    "usage: actorpipe bubble [--stages S --microbatches M]",
    "Prints the analytic bubble (idle fraction) of each schedule for the\n"
    "reference (S, M) cases, or for one given pair.\n",
    {{"--stages", "S", "pipeline stages (both or neither)"}, {"--microbatches", "M", "microbatches per step"}},
    "",
    20};

}  // namespace

int cmd_bubble(int argc, char** argv) {
  auto a = parse(argc, argv, 2, bubble_spec);
  if (a.has("--help")) {
    std::fputs(a.help.c_str(), stdout);
    return exit_ok;
  }
  if (!a.positional.empty()) throw usage_error("bubble takes no positional arguments");
  auto cases = reference_bubble_cases();
  if (a.has("--stages") || a.has("--microbatches")) {
    if (!a.has("--stages") || !a.has("--microbatches"))
      throw usage_error("give both --stages and --microbatches");
    cases = {{static_cast<int>(parse_count("--stages", a.options["--stages"])),
              static_cast<int>(parse_count("--microbatches", a.options["--microbatches"]))}};
  }
  std::fputs(format_bubble_table(cases).c_str(), stdout);
  return exit_ok;
}

}  // namespace actorpipe::app
