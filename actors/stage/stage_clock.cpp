#include "actors/stage/stage_clock.hpp"

#include <caf/all.hpp>

#include "messages/atoms.hpp"

namespace actorpipe {

namespace {

class ticking_clock final : public stage_clock {
public:
  explicit ticking_clock(caf::event_based_actor* self) : self_(self) {}
  int64_t round() const override { return 0; }
  bool take_now(activation_msg&) override { return true; }
  bool take_now(gradient_msg&) override { return true; }
  void poke() override {
    if (pending_) return;
    pending_ = true;
    self_->send(self_, tick_atom::value);
  }
  void ticked() override { pending_ = false; }
  bool rechecks() const override { return true; }
  void begin_round(int64_t, std::vector<activation_msg>&, std::vector<gradient_msg>&) override {}

private:
  caf::event_based_actor* self_;
  bool pending_ = false;
};

// What was sent before `round` goes out to `out`; the rest stays held.
template <class Msg>
void release(std::vector<Msg>& held, int64_t round, std::vector<Msg>& out) {
  std::vector<Msg> keep;
  for (auto& m : held) {
    if (m.h.round < round)
      out.push_back(std::move(m));
    else
      keep.push_back(std::move(m));
  }
  held = std::move(keep);
}

class lockstep_clock final : public stage_clock {
public:
  int64_t round() const override { return round_; }
  // A message sent in this round (its sender may already have fired) waits
  // for the next one.
  bool take_now(activation_msg& m) override { return hold(m, fwd_); }
  bool take_now(gradient_msg& m) override { return hold(m, bwd_); }
  void poke() override {}
  bool rechecks() const override { return false; }
  void begin_round(int64_t round, std::vector<activation_msg>& fwd, std::vector<gradient_msg>& bwd) override {
    round_ = round;
    release(fwd_, round, fwd);
    release(bwd_, round, bwd);
  }

private:
  template <class Msg>
  bool hold(Msg& m, std::vector<Msg>& held) {
    if (m.h.round < round_) return true;
    held.push_back(std::move(m));
    return false;
  }
  int64_t round_ = 0;
  std::vector<activation_msg> fwd_;  // sent in the current round or later
  std::vector<gradient_msg> bwd_;
};

}  // namespace

std::unique_ptr<stage_clock> make_ticking_clock(caf::event_based_actor* self) {
  return std::make_unique<ticking_clock>(self);
}

std::unique_ptr<stage_clock> make_lockstep_clock() { return std::make_unique<lockstep_clock>(); }

}  // namespace actorpipe
