"""Running an actorpipe command that writes `--results R`, for the benchmark scripts.

A launched worker may hang on its way out after rank 0 has written the
results (seen: rank 1 waiting in ~actor_system for a detached actor). Then
the command is stopped (SIGTERM, which `launch` forwards; it SIGKILLs after
5 s) `grace_s` after the results appeared, and the run's steps are kept."""
import json
import os
import subprocess
import time


def results_complete(path):
    try:
        with open(path) as f:
            json.load(f)
        return True
    except (OSError, ValueError):
        return False


def run_until_results(cmd, results, timeout_s, grace_s, poll_s=0.1):
    """Runs `cmd`, stopping it `grace_s` after `results` is complete or at
    `timeout_s`. Returns (exit code, whether results appeared while it ran,
    whether it was stopped, its output)."""
    if os.path.exists(results):
        os.remove(results)
    with open(results + ".log", "w") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline, seen, stopped = time.time() + timeout_s, None, False
        while p.poll() is None:
            time.sleep(poll_s)
            if seen is None and results_complete(results):
                seen = time.time()
            if (seen is not None and time.time() - seen > grace_s) or time.time() > deadline:
                stopped = True
                p.terminate()
                try:
                    p.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
                break
    with open(results + ".log") as f:
        return p.returncode, seen is not None, stopped, f.read()
