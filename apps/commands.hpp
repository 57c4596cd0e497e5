#pragma once
// The command line's dispatch, apart from the program's main so that a test
// can run a command in a forked process without loading the program again.

/// Runs `actorpipe ARGS` (argv[0] the program, argv[1] the command) and
/// returns its exit code: 2 for a bad config or usage, the failure's code
/// otherwise; every error is one line on stderr.
int run_command(int argc, char** argv);
