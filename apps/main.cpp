// actorpipe: train | compare | bubble | simulate | launch | generate | keys.
// The program around run_command (apps/commands.cpp): a worker's tie to its
// launcher, and an exit that waits for no actor system left behind.
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "actors/process_run.hpp"
#include "apps/commands.hpp"
#include "apps/common.hpp"

using namespace actorpipe::app;

// A worker of `actorpipe launch` dies with it, however the launcher ends
// (a SIGKILL gives it no chance to stop its workers).
void die_with_launcher() {
  const char* launcher = std::getenv("ACTORPIPE_LAUNCHER_PID");
  if (!launcher) return;
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (std::to_string(getppid()) != launcher) std::_Exit(exit_failed);  // it is gone already
}

int main(int argc, char** argv) {
  die_with_launcher();
  const int rc = run_command(argc, argv);
  if (actorpipe::teardown_left_behind()) {
    // A rank's actor system did not shut down (see actors/process_run.hpp);
    // everything is written, so leave without waiting for it.
    std::fflush(stdout);
    std::fflush(stderr);
    std::_Exit(rc);
  }
  return rc;
}
