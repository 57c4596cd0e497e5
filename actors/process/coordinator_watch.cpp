// A rank other than 0 that loses its coordinator (actors/process/coordinator_watch.hpp).
#include "actors/process/coordinator_watch.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <thread>

#include "actors/process/links.hpp"
#include "runtime/dist/launch/join.hpp"
#include "runtime/dist/transport/net_address.hpp"
#include "runtime/dist/transport/rendezvous.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe::rank_detail {

// Rank 0's process (the supervisor and the store) went down, or stopped
// answering for supervision.heartbeat_timeout_s: nothing can command this
// rank any more, and it trains on alone for no one. It stops (exit 5);
// the checkpoints on disk are whole (each written to a temporary name,
// then renamed).
run_error coordinator_lost(const std::string& where, const std::string& dir, const std::string& at,
                           const std::string& why, bool apart) {
  return run_error(run_failure{
      run_errc::coordinator_lost, -1, -1, -1,
      where + (apart ? " lost the coordinator (its process apart: the supervisor and the store) at "
                     : " lost rank 0 (the coordinator: the supervisor and the store) at ") +
          at + " (" + why + "); stopped. " +
          (dir.empty() ? std::string("If the run ended, it starts over (no checkpoint.dir)")
                       : "If the run ended, the same command with --resume " + dir +
                             " goes on from the newest checkpoint")});
}

run_error coordinator_lost(const process_context& cx, const std::string& at, const std::string& why) {
  return coordinator_lost(cx.where, cx.cfg.checkpoint.dir, at, why, cx.opts.ranks.apart);
}

coordinator_watch::coordinator_watch(const process_context& cx, bool standby) {
  const rank_env& env = cx.env;
  if (env.rank == 0 || env.master_addr.empty() || env.master_port <= 0) return;
  const std::string host = env.master_addr;
  const auto port = static_cast<uint16_t>(env.master_port);
  const std::string line =
      failure_line(run_errc::coordinator_lost,
                   coordinator_lost(cx, host + ":" + std::to_string(port), "its store: @, while a generation formed")
                       .what());
  // At least 1 s: the config's checks bound the key to [1, 86400].
  const auto answer_within =
      std::chrono::milliseconds(static_cast<int64_t>(cx.cfg.supervision.heartbeat_timeout_s * 1000));
  // The probe is a beat of this process's count alive/<RANK>
  // (runtime/dist/launch/join.hpp), read back: a get of it answers at once from
  // a store that runs (a check or an add, unlike a get, waits for the
  // answer without end), and rank 0 sees a process that joins go on
  // beating while a generation forms (actors/process/forming.cpp).
  const std::string prefix = env.store_prefix;
  const int home = cx.home >= 0 ? cx.home : cx.opts.ranks.rank;
  // A process started for a later generation (a replacement) was asked
  // for while the store listened: a refusal is its loss from the first
  // probe on (its rendezvous would otherwise retry the connect until
  // supervision.connect_timeout_s).
  const bool asked_for = start_generation() > 0;
  std::thread([done = done_, lost = lost_, host, port, line, answer_within, prefix, home, standby, asked_for] {
    const auto lose = [&](const std::string& why) {
      if (standby) {  // every wait on the store ends; the agent waits for a takeover
        lost->store(true);
        cut_connections_to(host, port);
        done->store(true);
        return;
      }
      std::string text = line;
      text.replace(text.find('@'), 1, why);
      std::fputs(text.c_str(), stderr);
      std::fflush(nullptr);
      std::_Exit(exit_code_for(run_errc::coordinator_lost));
    };
    bool seen = asked_for;
    int refused = 0;
    kv_store_ptr probe;  // a connection of this thread's own, once the store accepted one
    while (!done->load()) {
      const std::string why = try_connect(host, port, std::chrono::milliseconds(300));
      if (done->load()) return;
      if (why.empty()) {
        seen = true, refused = 0;
        const auto asked = std::chrono::steady_clock::now();
        try {
          if (!probe) probe = open_client_store(host, port, answer_within);
          beat(*probe, prefix, home);
          probe->get(alive_key(prefix, home));  // bounded by answer_within, unlike a check or an add
        } catch (const std::exception&) {
          probe.reset();  // a refused one is seen by the next connect
          if (done->load()) return;
          if (std::chrono::steady_clock::now() - asked >= answer_within * 9 / 10)
            lose("no answer within " + describe_timeout(answer_within) +
                 " (supervision.heartbeat_timeout_s), though it accepts connections: stopped or hung");
        }
      } else if (seen && ++refused >= 2) {
        lose(why);
      }
      for (int i = 0; i < 10 && !done->load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }).detach();
}

namespace {

// as_coordinator_loss without asking whether the store was reached.
std::exception_ptr probed_loss(const rank_env& env, const std::string& where, const std::string& checkpoint_dir,
                               std::exception_ptr e) {
  if (!e || env.rank == 0 || env.master_addr.empty() || env.master_port <= 0) return e;
  std::string first;
  try {
    std::rethrow_exception(e);
  } catch (const run_error&) {
    return e;  // the run's own verdict, or the loss already named
  } catch (const peer_stopped&) {
    return e;
  } catch (const config_error&) {
    return e;
  } catch (const not_taken_in&) {
    return e;  // the run's answer to a joiner, read before its store went
  } catch (const std::exception& x) {
    first = x.what();
  } catch (...) {
    first = "unknown error";
  }
  // A process killed a moment ago may still accept on its listening
  // socket while its others are reset: a few probes, 50 ms apart.
  std::string why;
  for (int probe = 0; probe < 5 && why.empty(); ++probe) {
    if (probe > 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    why = try_connect(env.master_addr, static_cast<uint16_t>(env.master_port), std::chrono::milliseconds(300));
  }
  if (why.empty()) return e;
  return std::make_exception_ptr(coordinator_lost(where, checkpoint_dir,
                                                  env.master_addr + ":" + std::to_string(env.master_port),
                                                  "its store: " + why + "; " + first, env.apart));
}

struct lost_store_context {
  rank_env env;
  std::string where, dir;
  std::terminate_handler before = nullptr;
};

lost_store_context& lost_store() {
  static lost_store_context c;
  return c;
}

[[noreturn]] void on_terminate() {
  auto& c = lost_store();
  if (std::exception_ptr e = std::current_exception()) {
    std::exception_ptr lost = probed_loss(c.env, c.where, c.dir, e);
    if (lost != e) {
      try {
        std::rethrow_exception(lost);
      } catch (const run_error& x) {
        std::fputs(failure_line(x.code(), x.what()).c_str(), stderr);
      } catch (...) {
      }
      std::fflush(nullptr);
      std::_Exit(exit_code_for(run_errc::coordinator_lost));
    }
  }
  if (c.before) c.before();
  std::abort();
}

}  // namespace

std::exception_ptr as_coordinator_loss(const process_runtime& rt, const rank_env& env, const std::string& where,
                                       const std::string& checkpoint_dir, std::exception_ptr e) {
  if (!rt.store && start_generation() == 0) return e;
  return probed_loss(env, where, checkpoint_dir, std::move(e));
}

void exit_5_on_a_lost_store(const rank_env& env, const std::string& where, const std::string& checkpoint_dir) {
  auto& c = lost_store();
  c.env = env;
  c.where = where;
  c.dir = checkpoint_dir;
  std::terminate_handler was = std::set_terminate(on_terminate);
  if (was != on_terminate) c.before = was;
}

}  // namespace actorpipe::rank_detail
