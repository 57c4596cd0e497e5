#include "actors/process_run.hpp"

#include <caf/all.hpp>
#include <caf/io/all.hpp>

#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <optional>
#include <thread>

#include "actors/process/directory.hpp"
#include "actors/process/coordinator_watch.hpp"
#include "actors/process/links.hpp"
#include "actors/process/worker_agent.hpp"
#include "actors/supervisor/multi_process_host.hpp"
#include "actors/supervisor/supervisor_actor.hpp"
#include "messages/atoms.hpp"
#include "messages/errors.hpp"
#include "runtime/dist/coord/run_record.hpp"
#include "runtime/dist/launch/launcher.hpp"
#include "runtime/dist/transport/rendezvous.hpp"
#include <nlohmann/json.hpp>
#include "runtime/dist/launch/join.hpp"
#include "runtime/dist/transport/net_address.hpp"

namespace actorpipe {


namespace {

using namespace rank_detail;

// ACTORPIPE_JOIN (actorpipe launch --join): this process joins the running
// job whose store is at MASTER_ADDR:MASTER_PORT, once rank 0 has a place
// for it. Its rank_env until then is a stand-in (rank 1 of dp x pp).
struct joining {
  int home = -1;
  uint32_t generation = 0;
};

joining join_if_asked(process_runtime& rt, const config& cfg, train_options& opts) {
  const char* asked = std::getenv("ACTORPIPE_JOIN");
  if (!asked || !*asked) return {};
  rank_env& env = opts.ranks;
  const std::string at = env.master_addr + ":" + std::to_string(env.master_port);
  if (cfg.parallel.dp * cfg.pipeline.stages < 2)
    throw config_error("the run at " + at + " has one stage: a process that joins would have nothing to take");
  const auto timeout = milliseconds(static_cast<int64_t>(cfg.supervision.connect_timeout_s * 1000));
  rt.store = open_client_store(env.master_addr, static_cast<uint16_t>(env.master_port), timeout);
  const join_ticket t = join_running(*rt.store, env.store_prefix, opts.config_digest, at, opts.on_notice, timeout);
  env.apart = t.apart;
  env.world_size = cfg.parallel.dp * cfg.pipeline.stages + (t.apart ? 1 : 0);
  env.rank = 1;
  return {t.rank, t.generation};
}

// Rank 0 under `launch --coordinator etcd://...` (ACTORPIPE_ETCD, with
// ACTORPIPE_RUN_ID): the run taken in etcd, its record written from now
// on. A coordinator that loses its lease stops commanding: it says so and
// ends (exit 5; every worker sees the coordinator gone).
// A standby's coordinator (ACTORPIPE_TAKEOVER) that another standby beat
// to the run stands down.
std::shared_ptr<run_record> take_run_record(const config& cfg, const rank_env& env, const std::string& host,
                                            bool standby) {
  const char* url = std::getenv("ACTORPIPE_ETCD");
  if (!url || !*url) return nullptr;
  const char* run = std::getenv("ACTORPIPE_RUN_ID");
  const std::string holder = host + ":" + std::to_string(env.master_port) + " pid " + std::to_string(::getpid());
  const int64_t ttl = std::max<int64_t>(1, static_cast<int64_t>(cfg.supervision.heartbeat_timeout_s + 0.5));
  try {
    return std::make_shared<run_record>(url, run && *run ? run : "actorpipe", holder, ttl, [url](const std::string& why) {
      std::fprintf(stderr,
                   "actorpipe: error: the coordinator lost its lease in etcd at %s (%s): it stops commanding; every "
                   "worker stops by itself (exit 5)\n",
                   url, why.c_str());
      std::fflush(stderr);
      std::_Exit(exit_code_for(run_errc::coordinator_lost));
    });
  } catch (const run_record::run_taken& e) {
    if (!standby) throw config_error(std::string("--coordinator etcd://: ") + e.what());
    std::fprintf(stderr, "actorpipe: a standby lost the election in etcd: %s; it stands down\n", e.what());
    std::fflush(stderr);
    std::_Exit(standby_lost_exit);
  } catch (const std::exception& e) {
    throw config_error(std::string("--coordinator etcd://: ") + e.what());
  }
}

std::chrono::system_clock::time_point wall_from_env(const char* name) {
  const char* v = std::getenv(name);
  const auto now = std::chrono::system_clock::now();
  if (!v || !*v) return now;
  return std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(std::chrono::nanoseconds(std::atoll(v))));
}

// ACTORPIPE_TAKEOVER (a standby's launcher started this coordinator once
// the one before was lost and its lease expired): the election won, the
// record as the one before left it, and a fresh store of this process's
// own on MASTER_PORT for the generations from here.
takeover_start take_over_the_run(process_runtime& rt, const rank_env& env, milliseconds timeout) {
  takeover_start t;
  t.expired = wall_from_env("ACTORPIPE_EXPIRED_AT_NS");
  // A coordinator stopped or cut off is seen when its lease expires.
  t.lost = std::getenv("ACTORPIPE_LOST_AT_NS") ? wall_from_env("ACTORPIPE_LOST_AT_NS") : t.expired;
  t.revoked = std::getenv("ACTORPIPE_LEASE_REVOKED") != nullptr;
  t.elected = std::chrono::system_clock::now();
  const char* url = std::getenv("ACTORPIPE_ETCD");
  const char* run = std::getenv("ACTORPIPE_RUN_ID");
  etcd_client c(parse_etcd_url(url));
  t.record = c.get(run_key(run && *run ? run : "actorpipe", "record")).value_or("{}");
  try {
    const auto r = nlohmann::json::parse(t.record);
    t.epoch = nlohmann::json::parse(r.at("takeover").get<std::string>()).at("epoch").get<uint32_t>() + 1;
  } catch (const std::exception&) {
    t.epoch = 1;  // take_over says what is missing
  }
  rt.store = host_store(static_cast<uint16_t>(env.master_port), timeout);
  t.stored = std::chrono::system_clock::now();
  return t;
}

train_output run_rank_in(process_runtime& rt, const config& cfg, const train_options& given) {
  train_options opts = given;
  const joining joined = join_if_asked(rt, cfg, opts);
  const rank_env& env = opts.ranks;
  const auto timeout = milliseconds(static_cast<int64_t>(cfg.supervision.connect_timeout_s * 1000));
  // A process started again beats before its data loads (runtime/dist/launch/join.hpp).
  // ACTORPIPE_TEST_STOP_BEFORE_BEAT=G stops the one started for generation
  // G here, before its first beat (tests/apps/multi_process_test.cpp).
  std::optional<early_beats> beats;
  if (const uint32_t g = start_generation(); g > 0 && env.rank != 0 && joined.home < 0 && env.master_port > 0) {
    if (const char* stop = std::getenv("ACTORPIPE_TEST_STOP_BEFORE_BEAT"); stop && std::strtoul(stop, nullptr, 10) == g)
      ::raise(SIGSTOP);
    beats.emplace(env.master_addr, static_cast<uint16_t>(env.master_port), env.store_prefix, env.rank,
                  milliseconds(200));
  }
  attempt_plan plan = plan_attempt(cfg, opts);
  plan.pol = policy_for(cfg, opts);
  plan.plc = plan.pol->layout(plan.stages);
  std::string host;
  try {
    host = local_address_toward(env.master_addr, env.master_port);
  } catch (const std::exception& e) {
    throw rendezvous_error(where_of(env) + ": cannot reach the master at " + env.master_addr + ":" +
                           std::to_string(env.master_port) + ": " + e.what());
  }
  configure(rt.sc, milliseconds(static_cast<int64_t>(cfg.supervision.heartbeat_timeout_s * 1000)));
  rt.sys = std::make_unique<caf::actor_system>(rt.sc);
  caf::actor_system& sys = *rt.sys;
  const bool supervised = cfg.supervision.max_restarts > 0;
  // dp > 1: the boundary is the live state, forgotten before each update
  // (two only where a skipped step keeps the same tensors twice); at
  // dp = 1 the keepers' copies can lag (runtime/dist/placement/boundary_memory.hpp).
  auto boundary = supervised ? std::make_shared<boundary_memory>(live_boundaries(cfg.parallel.dp) ? 2 : 4) : nullptr;
  process_start start{cfg, opts, env, timeout, std::move(plan), host, caf::actor{}, 0, boundary, joined.home,
                   joined.generation};
  if (beats) start.beating = [&beats] { beats.reset(); };
  if (env.rank != 0) {
    run_agent(rt, start);  // publishes its directory itself
    return {};
  }
  // Rank 0 runs the supervisor, on a host that sees every process.
  caf::scoped_actor self{sys};
  start.dir = spawn_directory(sys, caf::actor{self}, boundary);
  struct dir_stopper {
    caf::scoped_actor& self;
    caf::actor dir;
    ~dir_stopper() { self->send_exit(dir, caf::exit_reason::user_shutdown); }
  } stop_dir{self, start.dir};
  auto published = sys.middleman().publish(start.dir, 0, nullptr, true);
  if (!published) throw rendezvous_error(where_of(env) + ": cannot publish its stages: " + sys.render(published.error()));
  start.port = *published;
  const char* takeover = std::getenv("ACTORPIPE_TAKEOVER");
  const bool standby = takeover && *takeover;
  start.record = take_run_record(cfg, env, host, standby);
  if (standby) start.takeover = take_over_the_run(rt, env, timeout);
  // The record's end is written here, before the process may leave
  // without running destructors (run_rank's bounded teardown).
  struct record_closer {
    std::shared_ptr<run_record> record;
    ~record_closer() {
      if (record) record->close();
    }
  } close_record{start.record};
  return supervise(sys, [&rt, &start] { return make_multi_process_host(rt, start); }, opts);
}

}  // namespace

std::atomic<bool>& left_behind() {
  static std::atomic<bool> flag{false};
  return flag;
}

bool teardown_left_behind() { return left_behind().load(); }

train_output run_rank(const config& cfg, const train_options& opts) {
  // A peer that dies leaves sockets whose writes would raise SIGPIPE here;
  // the write's error says it instead, and the supervisor heals.
  std::signal(SIGPIPE, SIG_IGN);
  auto rt = std::make_shared<process_runtime>();
  if (opts.ranks.rank != 0) rank_detail::exit_5_on_a_lost_store(opts.ranks, where_of(opts.ranks), cfg.checkpoint.dir);
  train_output out;
  std::exception_ptr failed;
  try {
    out = run_rank_in(*rt, cfg, opts);
  } catch (...) {
    failed = std::current_exception();
    // Whatever broke first on a rank that had reached rank 0's store: if
    // that store no longer answers, the coordinator is gone.
    failed = rank_detail::as_coordinator_loss(*rt, opts.ranks, where_of(opts.ranks), cfg.checkpoint.dir, failed);
  }
  // The actor system waits for every actor it ran to be destroyed. A
  // detached actor referenced after its peers went away holds that wait
  // for good: now and then a stage, and on rank 0 two actors in every run
  // (a run's end waited the whole bound, 5 s until now). The results are in
  // already: the wait is bounded (half a second), and the process then
  // ends without running destructors (apps/main.cpp asks
  // teardown_left_behind()).
  auto gone = std::make_shared<std::promise<void>>();
  auto waited = gone->get_future();
  std::thread([rt = std::move(rt), gone]() mutable {
    rt.reset();
    gone->set_value();
  }).detach();
  // Without its coordinator this rank's stages may wait on peers that are
  // gone: nothing of the run is left to finish, so no wait.
  bool lost = false;
  try {
    if (failed) std::rethrow_exception(failed);
  } catch (const run_error& e) {
    lost = e.code() == run_errc::coordinator_lost;
  } catch (...) {
  }
  if (waited.wait_for(lost ? std::chrono::milliseconds(0) : std::chrono::milliseconds(500)) != std::future_status::ready)
    left_behind().store(true);
  if (failed) std::rethrow_exception(failed);
  return out;
}

}  // namespace actorpipe
