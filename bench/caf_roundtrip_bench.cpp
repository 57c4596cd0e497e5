// A CAF message round trip between two OS processes through the middleman
// (loopback TCP), the floor under a control message that `actorpipe launch`
// sends from one rank to another. An event-based ping actor in this process
// sends (ping, i) to a pong actor in a child process, which answers
// (pong, i); the next ping goes out when the answer arrives. Both sides run
// CAF's `sharing` scheduler policy, as the ranks do.
//
//   build/caf_roundtrip_bench [round trips, default 20000]
//
// Prints one line: the median, mean and 10th/90th percentile round trip in
// microseconds (after 1000 untimed round trips). The benchmark re-executes
// itself (ACTORPIPE_CAF_RT_CHILD=1) as the pong side, which publishes its
// actor on port 0 and prints the port on stdout.
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <numeric>
#include <thread>
#include <string>
#include <vector>

namespace {

using ping_atom = caf::atom_constant<caf::atom("ping")>;
using pong_atom = caf::atom_constant<caf::atom("pong")>;
using done_atom = caf::atom_constant<caf::atom("done")>;
using clock_type = std::chrono::steady_clock;

caf::actor_system_config& configure(caf::actor_system_config& cfg) {
  cfg.set("scheduler.policy", caf::atom("sharing"));
  cfg.load<caf::io::middleman>();
  return cfg;
}

caf::behavior pong(caf::event_based_actor* self) {
  return {
      [](ping_atom, int i) { return caf::make_message(pong_atom::value, i); },
      [self](done_atom) { self->quit(); },
  };
}

int run_child() {
  caf::actor_system_config cfg;
  caf::actor_system sys{configure(cfg)};
  auto p = sys.spawn(pong);
  auto port = sys.middleman().publish(p, 0, "127.0.0.1");
  if (!port) {
    std::fprintf(stderr, "publish failed: %s\n", sys.render(port.error()).c_str());
    return 1;
  }
  std::printf("%u\n", static_cast<unsigned>(*port));
  std::fflush(stdout);
  p = nullptr;
  sys.await_all_actors_done();
  return 0;
}

struct ping_state {
  std::shared_ptr<std::vector<double>> us;
  clock_type::time_point sent;
  int warmup = 0, timed = 0, next = 0;
};

caf::behavior ping(caf::stateful_actor<ping_state>* self, caf::actor other, int warmup, int timed,
                   std::shared_ptr<std::vector<double>> us) {
  auto& st = self->state;
  st.us = std::move(us);
  st.warmup = warmup;
  st.timed = timed;
  st.sent = clock_type::now();
  self->send(other, ping_atom::value, 0);
  return {
      [self, other](pong_atom, int i) {
        auto& s = self->state;
        const auto now = clock_type::now();
        if (i >= s.warmup) s.us->push_back(std::chrono::duration<double, std::micro>(now - s.sent).count());
        if (i + 1 >= s.warmup + s.timed) {
          self->quit();
          return;
        }
        s.sent = clock_type::now();
        self->send(other, ping_atom::value, i + 1);
      },
  };
}

}  // namespace

int main(int argc, char** argv) {
  if (std::getenv("ACTORPIPE_CAF_RT_CHILD")) return run_child();
  const int timed = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20000;
  const int warmup = 1000;

  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return 1;
  exe[n] = '\0';
  setenv("ACTORPIPE_CAF_RT_CHILD", "1", 1);
  FILE* child = popen((std::string("'") + exe + "'").c_str(), "r");
  unsetenv("ACTORPIPE_CAF_RT_CHILD");
  if (!child) return 1;
  unsigned port = 0;
  if (std::fscanf(child, "%u", &port) != 1 || port == 0) {
    std::fprintf(stderr, "the pong process gave no port\n");
    pclose(child);
    return 1;
  }

  auto us = std::make_shared<std::vector<double>>();
  {
    caf::actor_system_config cfg;
    caf::actor_system sys{configure(cfg)};
    auto other = sys.middleman().remote_actor("127.0.0.1", static_cast<uint16_t>(port));
    if (!other) {
      std::fprintf(stderr, "remote_actor failed: %s\n", sys.render(other.error()).c_str());
      pclose(child);
      return 1;
    }
    sys.spawn(ping, *other, warmup, timed, us);
    sys.await_all_actors_done();
    caf::anon_send(*other, done_atom::value);
    // Let the middleman flush the done message before the system goes away.
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  pclose(child);

  if (us->empty()) return 1;
  std::vector<double> v = *us;
  std::sort(v.begin(), v.end());
  auto pct = [&](double q) { return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))]; };
  const double mean = std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  std::printf("caf remote round trip: median %.1f us, mean %.1f us, p10 %.1f us, p90 %.1f us (%zu round trips)\n",
              pct(0.5), mean, pct(0.1), pct(0.9), v.size());
  return 0;
}
