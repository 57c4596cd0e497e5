#pragma once
// When a stage fires. Self-ticking: after any change the stage sends itself
// a tick and fires what its policy chooses. Lock-step (the deterministic
// test device): the driver's round messages fire at most one op each, and
// what a stage sent in round r becomes visible to its receiver in round
// r + 1. The stage asks its clock; it never tests which one it has.
#include <caf/fwd.hpp>

#include <cstdint>
#include <memory>
#include <vector>

#include "messages/payloads.hpp"

namespace actorpipe {

class stage_clock {
public:
  virtual ~stage_clock() = default;
  /// The round stamped on what the stage sends (0 when self-ticking).
  virtual int64_t round() const = 0;
  /// An input arrived: true to take it now, false when the clock holds it
  /// back for a later round.
  virtual bool take_now(activation_msg& m) = 0;
  virtual bool take_now(gradient_msg& m) = 0;
  /// Something changed that may let an op fire.
  virtual void poke() = 0;
  /// The tick that poke() sent arrived.
  virtual void ticked() {}
  /// Idle with inputs missing, the stage asks their senders again (not in
  /// lock-step, where nothing is lost and time does not pass by itself).
  virtual bool rechecks() const = 0;
  /// Lock-step: round `round` begins; what became visible is handed out.
  virtual void begin_round(int64_t round, std::vector<activation_msg>& fwd, std::vector<gradient_msg>& bwd) = 0;
};

/// Ticks by sending `self` a tick message.
std::unique_ptr<stage_clock> make_ticking_clock(caf::event_based_actor* self);
std::unique_ptr<stage_clock> make_lockstep_clock();

}  // namespace actorpipe
