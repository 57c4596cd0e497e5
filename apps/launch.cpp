// actorpipe launch: `actorpipe train CONFIG ...` as N local processes with
// torchrun's environment (its standalone mode), run by runtime/dist/launcher.
#include <unistd.h>

#include <cctype>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "apps/commands.hpp"
#include "apps/common.hpp"
#include "messages/errors.hpp"
#include "runtime/dist/coord/etcd_client.hpp"
#include "runtime/dist/coord/run_record.hpp"
#include "runtime/dist/launch/launcher.hpp"
#include "runtime/dist/launch/rank_env.hpp"  // default_master_port
#include "runtime/util/text.hpp"

namespace actorpipe::app {

namespace {

static_assert(coordinator_lost_exit == exit_code_for(run_errc::coordinator_lost),
              "the launcher knows a lost coordinator by the workers' exit code");

const command_spec launch_spec = {
    "usage: actorpipe launch --nprocs N [--nnodes K --node-rank I] [--master-addr HOST] [--master-port PORT]\n"
    "                        [--coordinator process|rank0|etcd://HOST:PORT[,...] [--run-id ID]]\n"
    "                        CONFIG [train options]\n"
    "       actorpipe launch --join HOST:PORT|etcd://HOST:PORT[,...] [--run-id ID] [--nprocs N]\n"
    "                        CONFIG [train options]",
    "Runs `actorpipe train CONFIG [train options]` as N processes on this machine,\n"
    "each with torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,\n"
    "MASTER_PORT, ...), like `torchrun --standalone --nproc-per-node N`. Everything\n"
    "after CONFIG goes to every worker unchanged. Progress and the files asked for\n"
    "(--save, --results, ...) come from the coordinator; all share this terminal.\n"
    "Ctrl-C or SIGTERM is forwarded to every worker; when one worker fails the\n"
    "others get SIGTERM, then SIGKILL after 5 s.\n"
    "\n"
    "The supervisor and the store run in a coordinator, a process of their own on\n"
    "node 0 that holds no stage, beside the workers (RANK 0 .. K*N-1, WORLD_SIZE\n"
    "K*N): any worker, RANK 0 included, is healed from its peers' memory like any\n"
    "other; only the coordinator's death (or node 0's launcher's) ends the run, and\n"
    "then every worker stops by itself (exit 5). With --coordinator rank0, worker\n"
    "RANK 0 holds them beside its stage, as under torchrun, Slurm or mpirun: one\n"
    "process fewer, and RANK 0's loss ends the run.\n"
    "\n"
    "On K hosts, run it once on each with --nnodes K, its own --node-rank and the\n"
    "same --master-addr (node 0's address) and --master-port, like torchrun's\n"
    "static rendezvous: node I runs ranks I*N .. I*N+N-1. With\n"
    "supervision.max_restarts, node 0 replaces a dead or cut-off rank of any node\n"
    "by starting it on node 0.\n"
    "\n"
    "Every node names the same --coordinator. With --coordinator etcd://HOST:PORT[,...]\n"
    "the coordinator keeps the run's record in that etcd cluster\n"
    "(generation, members, placement, the last decided step) under a lease on the\n"
    "name --run-id: a second live run of that name is refused, and a coordinator\n"
    "that loses its lease stops. Every node's launcher stands by: when the\n"
    "coordinator is lost (killed, stopped, or its host cut off), one of them wins\n"
    "the election in etcd and starts a coordinator that takes the run over, each\n"
    "stage from the workers' memory; the workers wait for it.\n"
    "\n"
    "With --join, the N processes join a running job instead (its config must set\n"
    "supervision.replace_timeout_s; its coordinator prints HOST:PORT). At its next step\n"
    "boundary the job's supervisor gives each a stage of a process that holds\n"
    "several, with that stage's state from memory. CONFIG must be the job's own.\n"
    "One of them that dies leaves the others be: the run they joined goes on.\n"
    "With --join etcd://HOST:PORT[,...] the address is the live coordinator's in\n"
    "the run's record (--run-id, as at its start): a coordinator that took the run\n"
    "over is found too, and the processes that join wait for a later takeover.\n",
    {{"--nprocs", "N", "worker processes on this machine (required without --join, >= 1)"},
     {"--nproc-per-node", "N", "the same as --nprocs (torchrun's name)"},
     {"--nnodes", "K", "machines in the run, one launch on each (default 1)"},
     {"--node-rank", "I", "this machine's place, 0 .. K-1 (default 0; node 0 runs rank 0)"},
     {"--master-addr", "HOST", "where rank 0's store listens (default 127.0.0.1)"},
     {"--master-port", "PORT", "its port (default 0: a free port picked here; 29500 with --nnodes > 1)"},
     {"--join", "WHERE", "HOST:PORT: join the running job whose store is there (default --nprocs 1); "
                         "etcd://HOST:PORT[,...]: the one --run-id names there"},
     {"--coordinator", "WHERE", "process (default: a process apart that holds no stage), rank0 (worker RANK 0 "
                                "supervises), or etcd://HOST:PORT[,...] (apart, its record in etcd)"},
     {"--run-id", "ID", "the run's name in etcd (default: the config file's name without .yaml)"}},
    "exit codes: 0 every worker exited 0; otherwise the first failing worker's exit\n"
    "code (1 if it was killed by a signal; see `actorpipe train --help`); 130 or 143\n"
    "after Ctrl-C or SIGTERM; 2 bad arguments or a missing CONFIG (no worker started);\n"
    "5 the coordinator (or RANK 0 under rank0) was lost: every worker stops, and the same command\n"
    "with --resume goes on from the newest checkpoint\n",
    22};

// Flags before CONFIG are launch's; the first other word is CONFIG and the
// rest belongs to train, even names launch also has.
int config_index(int argc, char** argv) {
  int i = 2;
  while (i < argc) {
    const std::string w = argv[i];
    bool takes_value = false;
    for (const auto& f : launch_spec.flags) takes_value = takes_value || (w == f.names && !f.value.empty());
    if (takes_value)
      i += 2;
    else if (w.rfind("-", 0) == 0)
      ++i;  // --help, --name=value, or one parse() names as unknown
    else
      break;
  }
  return i < argc ? i : argc;
}

// `flag`: what the user wrote the port in, for the error.
uint16_t parse_port(const std::string& v, const std::string& flag = "--master-port") {
  char* end = nullptr;
  const long n = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || n < 0 || n > 65535)
    throw usage_error(flag + " expects a port number 0..65535, got " + quoted_input(v));
  return static_cast<uint16_t>(n);
}

// The run's name in etcd: --run-id, or the config file's name without
// .yaml.
std::string run_name(const args& a, const std::string& config) {
  std::string run = a.has("--run-id") ? a.options.at("--run-id") : "";
  if (run.empty()) {
    run = std::filesystem::path(config).stem().string();
    if (run.empty()) run = "actorpipe";
  }
  for (char c : run)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.')
      throw usage_error("--run-id expects letters, digits, '-', '_' and '.', got " + quoted_input(run));
  return run;
}

std::vector<etcd_endpoint> etcd_members(const std::string& url, const std::string& flag) {
  try {
    return parse_etcd_url(url);
  } catch (const std::invalid_argument& e) {
    throw usage_error(flag + ": " + e.what());
  }
}

// --join HOST:PORT (or etcd://...): the store of the job these workers join.
void join_options(const args& a, launch_options& o, const std::string& config) {
  for (const char* f : {"--nnodes", "--node-rank", "--master-addr", "--master-port"})
    if (a.has(f)) throw usage_error(std::string("--join takes the job's address from HOST:PORT; drop ") + f);
  std::string v = a.options.at("--join");
  if (v.rfind("etcd://", 0) == 0) {  // the live coordinator's, from the run's record
    o.etcd = v;
    o.run_id = run_name(a, config);
    std::optional<std::string> holder;
    try {
      holder = etcd_client(etcd_members(v, "--join")).get(run_key(o.run_id, "coordinator"));
    } catch (const etcd_error& e) {
      throw usage_error(std::string("--join: ") + e.what());
    }
    if (!holder)
      throw usage_error("--join: no live coordinator holds run '" + o.run_id + "' in etcd at " + v.substr(7) +
                        " (a run started with --coordinator " + v + " --run-id " + o.run_id + "): nothing to join");
    v = holder->substr(0, holder->find(' '));  // "HOST:PORT pid N"
  }
  const size_t colon = v.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == v.size())
    throw usage_error("--join expects HOST:PORT (the address rank 0 prints), got " + quoted_input(v));
  o.master_addr = v.substr(0, colon);
  const std::string port = v.substr(colon + 1);
  o.master_port = parse_port(port, "--join's PORT");
  if (o.master_port == 0) throw usage_error("--join expects a port above 0, got " + quoted_input(port));
  o.join = true;
}

// --coordinator etcd://...: before any process starts, the cluster
// answers and no live run holds the name (the coordinator then takes it,
// and is refused the same way if another took it in between). A node
// other than 0 starts no coordinator: the live one at its own master
// ("HOST:PORT pid N") is its run's, started on node 0 a moment before.
void check_etcd(launch_options& o, const std::string& run) {
  o.run_id = run;
  const std::vector<etcd_endpoint> members = etcd_members(o.etcd, "--coordinator");
  try {
    etcd_client c(members);
    if (auto holder = c.get(run_key(run, "coordinator"))) {
      const std::string master = o.master_addr + ":" + std::to_string(o.master_port);
      if (o.node_rank == 0 || holder->substr(0, holder->find(' ')) != master)
        throw usage_error(run_held_line(run, *holder, o.etcd.substr(7)));
    }
  } catch (const etcd_error& e) {
    throw usage_error(std::string("--coordinator: ") + e.what());
  }
}

std::string self_exe() {
  std::vector<char> buf(PATH_MAX + 1);
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  if (n <= 0) throw std::runtime_error("cannot resolve /proc/self/exe");
  return std::string(buf.data(), static_cast<size_t>(n));
}

}  // namespace

int cmd_launch(int argc, char** argv) {
  const int cfg_at = config_index(argc, argv);
  auto a = parse(cfg_at, argv, 2, launch_spec);
  if (a.has("--help")) {
    std::fputs(a.help.c_str(), stdout);
    return exit_ok;
  }
  if (a.has("--nprocs") && a.has("--nproc-per-node"))
    throw usage_error("--nprocs and --nproc-per-node are the same option; give one");
  const std::string nprocs_flag = a.has("--nproc-per-node") ? "--nproc-per-node" : "--nprocs";
  if (!a.has(nprocs_flag) && !a.has("--join")) throw usage_error("launch needs --nprocs N (see --help)");
  launch_options o;
  if (a.has(nprocs_flag)) o.nprocs = static_cast<int>(parse_count(nprocs_flag, a.options[nprocs_flag]));

  if (a.has("--nnodes")) o.nnodes = static_cast<int>(parse_count("--nnodes", a.options["--nnodes"]));
  if (a.has("--node-rank")) {
    const std::string v = a.options["--node-rank"];
    char* end = nullptr;
    const long n = std::strtol(v.c_str(), &end, 10);
    if (v.empty() || *end != '\0' || n < 0 || n >= o.nnodes)
      throw usage_error("--node-rank expects 0 .. " + std::to_string(o.nnodes - 1) + " (--nnodes " +
                        std::to_string(o.nnodes) + "), got " + quoted_input(v));
    o.node_rank = static_cast<int>(n);
  }
  if (static_cast<int64_t>(o.nnodes) * o.nprocs > 1000000)
    throw usage_error("--nnodes times --nprocs is more than 1,000,000 workers");
  if (a.has("--master-addr")) o.master_addr = a.options["--master-addr"];
  if (a.has("--master-port")) o.master_port = parse_port(a.options["--master-port"]);
  if (o.nnodes > 1) {
    // Every node must name the same port: none can pick a free one alone.
    if (!a.has("--master-port")) o.master_port = static_cast<uint16_t>(default_master_port);
    if (o.master_port == 0)
      throw usage_error("--master-port 0 (a free port) works with one node only; with --nnodes " +
                        std::to_string(o.nnodes) + " every node must name the same port");
  }
  // A coordinator apart by default: no worker's loss ends the run (as
  // torchrun's agent, not a worker, hosts its store).
  o.apart = !a.has("--join");
  if (a.has("--coordinator")) {
    const std::string v = a.options["--coordinator"];
    const bool etcd = v.rfind("etcd://", 0) == 0;
    if (v != "rank0" && v != "process" && !etcd)
      throw usage_error("--coordinator expects rank0, process or etcd://HOST:PORT[,...], got " + quoted_input(v));
    o.apart = v == "process" || etcd;
    if (etcd) o.etcd = v;
  }
  if (cfg_at >= argc) throw usage_error("launch takes a CONFIG after its options (see --help)");
  const std::string config = argv[cfg_at];
  if (a.has("--join")) {
    if (a.has("--coordinator"))
      throw usage_error("--join takes its coordinator from the running job; drop --coordinator");
    join_options(a, o, config);
  }
  if (a.has("--run-id") && o.etcd.empty())
    throw usage_error("--run-id names a run in etcd: give --coordinator etcd://... (or --join etcd://...)");
  // Before any worker starts: N copies of the same error help nobody.
  std::error_code ec;
  if (!std::filesystem::exists(config, ec)) throw usage_error(config + ": no such file");
  if (std::filesystem::is_directory(config, ec)) throw usage_error(config + ": is a directory, not a config");
  if (!o.etcd.empty() && !o.join) check_etcd(o, run_name(a, config));
  o.exe = self_exe();
  o.worker_args = {"train"};
  for (int i = cfg_at; i < argc; ++i) o.worker_args.emplace_back(argv[i]);
  o.on_notice = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  // Every worker (the first ones, and each that replaces a dead one) is
  // forked from this process, which has LibTorch loaded already: about
  // 0.4 s of CPU less each, and a replacement rendezvouses sooner.
  o.in_process = [](int n, char** args) { return ::run_command(n, args); };
  return run_workers(o);
}

}  // namespace actorpipe::app
