#pragma once
// Polling the store (or an actor) for something another process does.
#include <algorithm>
#include <chrono>
#include <thread>

namespace actorpipe {

/// The pause between two polls: 0.5 ms at first, doubling up
/// to `cap`. A wait that ends at once (a rendezvous of processes already
/// there, a barrier the last rank just reached) costs well under a
/// millisecond, and a long one polls no more often than every `cap`.
class poll_backoff {
public:
  explicit poll_backoff(std::chrono::milliseconds cap) : cap_(cap) {}
  void pause() {
    std::this_thread::sleep_for(next_);
    next_ = std::min<std::chrono::microseconds>(cap_, next_ * 2);
  }

private:
  std::chrono::microseconds cap_;
  std::chrono::microseconds next_{500};
};

}  // namespace actorpipe
