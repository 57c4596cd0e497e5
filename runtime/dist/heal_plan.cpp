#include "runtime/dist/heal_plan.hpp"

#include <algorithm>
#include <map>
#include <sstream>

#include "runtime/dist/transport/rendezvous.hpp"  // rendezvous_error

namespace actorpipe {

std::string heal_plan::encode() const {
  std::string s = std::to_string(generation) + " " + std::to_string(resume_after) + " " +
                  (from_disk ? "disk" : "memory") + " " + std::to_string(fired_through);
  for (int r : replaced) s += " " + std::to_string(r);
  return s;
}

heal_plan heal_plan::decode(const std::string& text) {
  heal_plan p;
  std::istringstream is(text);
  std::string from;
  if (!(is >> p.generation >> p.resume_after >> from >> p.fired_through) || (from != "disk" && from != "memory"))
    throw rendezvous_error("a heal plan in the store does not parse: '" + text + "'");
  p.from_disk = from == "disk";
  for (int r; is >> r;) p.replaced.push_back(r);
  return p;
}

bool heal_plan::was_replaced(int rank) const {
  return std::find(replaced.begin(), replaced.end(), rank) != replaced.end();
}

donor donor_of(const rank_placement& places, const heal_plan& hp, int d, int r) {
  for (int e = 0; e < places.dp(); ++e)
    if (e != d && !hp.was_replaced(places.owner(e, r))) return {places.owner(e, r), e * places.pp() + r};
  if (places.dp() == 1)
    if (const int k = places.keeper(d, r); k >= 0 && !hp.was_replaced(places.owner(d, k)))
      return {places.owner(d, k), d * places.pp() + r};
  return {};
}

namespace {
// The newest step s <= step, step >= -1, with (s + 1) a multiple of every.
int64_t by_period(int64_t step, int every) { return (step + 1) / every * every - 1; }
}  // namespace

int64_t copy_rule::newest_lasting(int64_t step) const {
  return step <= start ? step : std::max(start, by_period(step, every));
}

int64_t copy_rule::lasting_before(int64_t step) const {
  if (step > start) return newest_lasting(step - 1);
  return step < 0 ? int64_t{-2} : by_period(step - 1, every);
}

std::optional<int64_t> newest_common_boundary(const rank_placement& places, const heal_plan& hp, int64_t upto,
                                              const held_steps& held, const copy_rule& copies) {
  const int64_t last = copies.newest_lasting(upto);
  const int64_t before = copies.lasting_before(last), third = copies.lasting_before(before);
  const auto candidate = [&](int64_t step) { return step == last || step == before || step == third; };
  std::map<int64_t, int> holders;
  int slots = 0;
  for (int q = 0; q < places.world(); ++q)
    for (const auto& slot : places.owned(q)) {
      donor from{q, slot.replica * places.pp() + slot.stage};
      if (hp.was_replaced(q)) from = donor_of(places, hp, slot.replica, slot.stage);
      if (from.rank < 0) return std::nullopt;
      ++slots;
      for (int64_t step : held(from.rank, from.index))
        if (candidate(step)) ++holders[step];
    }
  for (auto it = holders.rbegin(); it != holders.rend(); ++it)
    if (it->second == slots) return it->first;
  return std::nullopt;
}

}  // namespace actorpipe
