#include "runtime/dist/launch/join.hpp"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "runtime/dist/transport/poll_backoff.hpp"
#include "runtime/dist/transport/rendezvous.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe {

namespace {

std::string key(const std::string& prefix, const std::string& what) { return prefix + "/actorpipe/join/" + what; }

// Until rank 0 places RANK t.rank in a generation other than
// `not_in` (0: any):
// that generation (beats meanwhile).
uint32_t wait_placed(const kv_store& store, const std::string& store_prefix, const join_ticket& t, uint32_t not_in,
                     const std::string& at, const std::string& rank) {
  const std::string placed = key(store_prefix, "placed/" + std::to_string(t.rank));
  const std::string stale = std::to_string(not_in), ended = key(store_prefix, "ended");
  poll_backoff wait(std::chrono::milliseconds(20));
  std::string answer;
  try {
    // A ticket taken after rank 0 counted them at the run's end is in
    // none of its answers: the run's end says it.
    while (!store.has(placed) || (not_in > 0 && store.get(placed) == stale)) {
      if (store.has(ended)) {
        answer = "no " + store.get(ended);
        break;
      }
      beat(store, store_prefix, t.rank);
      wait.pause();
    }
    if (answer.empty()) answer = store.get(placed);
  } catch (const std::exception& e) {
    throw rendezvous_error(rank + " lost the running job's store at " + at + " while waiting to join: " + e.what());
  }
  if (answer.rfind("no ", 0) == 0) {
    try {
      store.set(key(store_prefix, "told/" + std::to_string(t.rank)), "1");  // rank 0 may close the store now
    } catch (const std::exception&) {
    }
    throw not_taken_in(rank + " was not taken in: " + answer.substr(3));
  }
  return static_cast<uint32_t>(std::stoul(answer));
}

}  // namespace

void open_for_joiners(const kv_store& store, const std::string& store_prefix, const std::string& config_digest,
                      int world_size, bool apart) {
  store.set(key(store_prefix, "world"), std::to_string(world_size));
  store.set(key(store_prefix, "apart"), apart ? "1" : "0");
  store.set(key(store_prefix, "digest"), config_digest);  // last: a joiner that sees it sees the world too
}

int joiners_so_far(const kv_store& store, const std::string& store_prefix) {
  return static_cast<int>(store.add(key(store_prefix, "tickets"), 0));
}

int joiner_rank(int world_size, int ticket) { return world_size + ticket - 1; }

void place_joiner(const kv_store& store, const std::string& store_prefix, int rank, uint32_t generation,
                  const std::string& why) {
  store.set(key(store_prefix, "placed/" + std::to_string(rank)), why.empty() ? std::to_string(generation) : "no " + why);
}

void close_to_joiners(const kv_store& store, const std::string& store_prefix, const std::string& why) {
  store.set(key(store_prefix, "ended"), why);
}

void turn_away_joiners(const kv_store& store, const std::string& store_prefix, const std::vector<int>& ranks,
                       const std::string& why, std::chrono::milliseconds within) {
  for (int r : ranks) place_joiner(store, store_prefix, r, 0, why);
  const auto until = std::chrono::steady_clock::now() + within;
  poll_backoff wait(std::chrono::milliseconds(10));
  for (int r : ranks)
    while (!store.has(key(store_prefix, "told/" + std::to_string(r))) && std::chrono::steady_clock::now() < until)
      wait.pause();
}

std::string alive_key(const std::string& store_prefix, int rank) {
  return key(store_prefix, "alive/" + std::to_string(rank));
}

// A set, not an add: c10d's add waits for its answer without end, and a
// stopped store never gives one (a set waits for none).
void beat(const kv_store& store, const std::string& store_prefix, int rank) {
  static std::atomic<int64_t> beats{0};
  store.set(alive_key(store_prefix, rank), std::to_string(++beats));
}

early_beats::early_beats(std::string host, uint16_t port, std::string store_prefix, int rank,
                         std::chrono::milliseconds every)
    : thread_([this, host = std::move(host), port, prefix = std::move(store_prefix), rank, every] {
        kv_store_ptr store;
        while (!stop_.load()) {
          try {
            if (!store) store = open_client_store(host, port, std::chrono::milliseconds(1000));
            beat(*store, prefix, rank);
          } catch (const std::exception&) {
            store.reset();  // not listening yet, or gone: the agent's own watch judges a store lost
          }
          for (auto slept = std::chrono::milliseconds(0); slept < every && !stop_.load();
               slept += std::chrono::milliseconds(10))
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
      }) {}

early_beats::~early_beats() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

std::string exited_key(const std::string& store_prefix, int rank) {
  return key(store_prefix, "exited/" + std::to_string(rank));
}

void tell_exited(const std::string& host, uint16_t port, const std::string& store_prefix, int rank,
                 uint32_t generation, const std::string& how) {
  const std::string k = exited_key(store_prefix, rank), v = std::to_string(generation) + " " + how;
  const auto tell = [&] {
    try {
      open_client_store(host, port, std::chrono::milliseconds(3000))->set(k, v);
    } catch (const std::exception&) {
      // The coordinator is gone too: its own loss is handled apart.
    }
  };
  // A c10d 1.13 client starts a listener thread that throws when the
  // store resets its socket, and a throw out of a thread ends the process.
  // make_tcp_store quiets that thread, but only once connected: a store
  // that closes in between (the coordinator's, as its run ends, which is
  // when a worker here exits) ended the launcher with exit 134. So a child
  // tells the store, and the launcher only waits for the child.
  std::fflush(nullptr);
  const pid_t child = ::fork();
  if (child < 0) {
    tell();
    return;
  }
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // The launcher's handlers write to its signal pipe: not from here.
    for (int signo : {SIGINT, SIGTERM, SIGCHLD, SIGHUP}) ::signal(signo, SIG_DFL);
    ::signal(SIGPIPE, SIG_IGN);
    tell();
    std::_Exit(0);  // the launcher's statics are not this child's to destroy
  }
  // The connect gives up after 3 s; a child past 5 s is stuck.
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  poll_backoff wait(std::chrono::milliseconds(2));
  for (pid_t r; (r = ::waitpid(child, nullptr, WNOHANG)) == 0 || (r < 0 && errno == EINTR);) {
    if (std::chrono::steady_clock::now() >= until) {
      ::kill(child, SIGKILL);
      ::waitpid(child, nullptr, 0);
      return;
    }
    wait.pause();
  }
}

std::string exited_in(const kv_store& store, const std::string& store_prefix, int rank, uint32_t generation) {
  const std::string k = exited_key(store_prefix, rank);
  if (!store.has(k)) return "";
  const std::string v = store.get(k);
  const size_t space = v.find(' ');
  if (space == std::string::npos || v.compare(0, space, std::to_string(generation)) != 0) return "";
  return v.substr(space + 1);
}

void refuse_joiners(const kv_store& store, const std::string& store_prefix, const std::string& why) {
  store.set(key(store_prefix, "refused"), why);
}

join_ticket join_running(const kv_store& store, const std::string& store_prefix, const std::string& config_digest,
                         const std::string& at, const std::function<void(const std::string&)>& waiting,
                         std::chrono::milliseconds opening) {
  // A coordinator opens for joiners once its first generation formed (a
  // standby's just after a takeover): until it says yes or no, wait.
  const auto until = std::chrono::steady_clock::now() + opening;
  poll_backoff wait(std::chrono::milliseconds(20));
  for (bool said = false; !store.has(key(store_prefix, "digest"));) {
    if (store.has(key(store_prefix, "refused")))
      throw config_error("the run at " + at + " takes no processes that join: " + store.get(key(store_prefix, "refused")));
    if (std::chrono::steady_clock::now() >= until)
      throw config_error("the run at " + at + " takes no processes that join (it did not open for them within " +
                         describe_timeout(opening) + ": it has not started, or its config does not set "
                         "supervision.replace_timeout_s)");
    if (!said && waiting) waiting("the run at " + at + " has not opened for processes that join yet; waiting for it");
    said = true;
    wait.pause();
  }
  const std::string theirs = store.get(key(store_prefix, "digest"));
  if (theirs != config_digest)
    throw rendezvous_mismatch_error("this process's config differs from the running job's at " + at + " (digest " +
                                    quoted_input(config_digest, "'", 16) + " against " +
                                    quoted_input(theirs, "'", 16) + "): a process joins with the same config");
  const int world = std::stoi(store.get(key(store_prefix, "world")));
  join_ticket t;
  t.apart = store.has(key(store_prefix, "apart")) && store.get(key(store_prefix, "apart")) == "1";
  t.rank = joiner_rank(world, static_cast<int>(store.add(key(store_prefix, "tickets"), 1)));
  const std::string rank = "RANK " + std::to_string(t.rank - (t.apart ? 1 : 0));
  if (waiting) waiting("joining the run at " + at + " as " + rank + "; waiting for a step boundary");
  t.generation = wait_placed(store, store_prefix, t, 0, at, rank);
  return t;
}

uint32_t wait_placed_again(const kv_store& store, const std::string& store_prefix, const join_ticket& t,
                           uint32_t called_off, const std::string& at) {
  return wait_placed(store, store_prefix, t, called_off, at, "RANK " + std::to_string(t.rank - (t.apart ? 1 : 0)));
}

}  // namespace actorpipe
