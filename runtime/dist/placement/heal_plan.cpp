#include "runtime/dist/placement/heal_plan.hpp"

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>

#include "runtime/dist/transport/rendezvous.hpp"  // rendezvous_error

namespace actorpipe {

// "g resume memory|disk fired replaced... [; members... ; slot:index... [; slot:rank:index...]]"
std::string heal_plan::encode() const {
  std::string s = std::to_string(generation) + " " + std::to_string(resume_after) + " " +
                  (from_disk ? "disk" : "memory") + " " + std::to_string(fired_through);
  for (int r : replaced) s += " " + std::to_string(r);
  if (members.empty() && sources.empty() && donors.empty() && parts.empty() && pieces.empty()) return s;
  s += " ;";
  for (int m : members) s += " " + std::to_string(m);
  s += " ;";
  for (const auto& [slot, index] : sources) s += " " + std::to_string(slot) + ":" + std::to_string(index);
  if (donors.empty() && parts.empty() && pieces.empty()) return s;
  s += " ;";
  for (const auto& [slot, d] : donors)
    s += " " + std::to_string(slot) + ":" + std::to_string(d.rank) + ":" + std::to_string(d.index);
  if (parts.empty() && pieces.empty()) return s;
  s += " ;";
  for (const auto& [first, last] : parts) s += " " + std::to_string(first) + "-" + std::to_string(last);
  if (pieces.empty()) return s;
  s += " ;";
  for (const auto& [slot, list] : pieces)
    for (const auto& p : list)
      s += " " + std::to_string(slot) + ":" + std::to_string(p.from) + ":" + std::to_string(p.first) + ":" +
           std::to_string(p.last) + ":" + std::to_string(p.holder);
  return s;
}

heal_plan heal_plan::decode(const std::string& text) {
  heal_plan p;
  const auto bad = [&] { return rendezvous_error("a heal plan in the store does not parse: '" + text + "'"); };
  std::vector<std::string> sections{""};
  for (char c : text)
    if (c == ';')
      sections.emplace_back();
    else
      sections.back() += c;
  if (sections.size() != 1 && (sections.size() < 3 || sections.size() > 6)) throw bad();
  std::istringstream is(sections[0]);
  std::string from;
  if (!(is >> p.generation >> p.resume_after >> from >> p.fired_through) || (from != "disk" && from != "memory"))
    throw bad();
  p.from_disk = from == "disk";
  for (int r; is >> r;) p.replaced.push_back(r);
  if (!is.eof()) throw bad();
  if (sections.size() == 1) return p;
  std::istringstream ms(sections[1]);
  for (int m; ms >> m;) p.members.push_back(m);
  if (!ms.eof()) throw bad();
  std::istringstream ss(sections[2]);
  for (std::string pair; ss >> pair;) {
    const size_t colon = pair.find(':');
    if (colon == std::string::npos) throw bad();
    try {
      p.sources[std::stoi(pair.substr(0, colon))] = std::stoi(pair.substr(colon + 1));
    } catch (const std::exception&) {
      throw bad();
    }
  }
  if (sections.size() == 3) return p;
  std::istringstream ds(sections[3]);
  for (std::string triple; ds >> triple;) {
    const size_t a = triple.find(':'), b = a == std::string::npos ? a : triple.find(':', a + 1);
    if (b == std::string::npos) throw bad();
    try {
      p.donors[std::stoi(triple.substr(0, a))] = {std::stoi(triple.substr(a + 1, b - a - 1)), std::stoi(triple.substr(b + 1))};
    } catch (const std::exception&) {
      throw bad();
    }
  }
  if (sections.size() == 4) return p;
  std::istringstream ps(sections[4]);
  for (std::string range; ps >> range;) {
    const size_t dash = range.find('-');
    if (dash == std::string::npos) throw bad();
    try {
      p.parts.emplace_back(std::stoi(range.substr(0, dash)), std::stoi(range.substr(dash + 1)));
    } catch (const std::exception&) {
      throw bad();
    }
  }
  if (sections.size() == 5) return p;
  std::istringstream rs(sections[5]);
  for (std::string five; rs >> five;) {
    std::vector<int> v;
    std::istringstream fs(five);
    for (std::string n; std::getline(fs, n, ':');) {
      size_t used = 0;
      try {
        v.push_back(std::stoi(n, &used));
      } catch (const std::exception&) {
        throw bad();
      }
      if (used != n.size()) throw bad();
    }
    if (v.size() != 5) throw bad();
    p.pieces[v[0]].push_back({v[1], v[2], v[3], v[4]});
  }
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

shrunk shrink_placement(const rank_placement& places, const std::vector<int>& gone, bool from_disk) {
  heal_plan lost;
  lost.replaced = gone;
  std::vector<int> renumbered(static_cast<size_t>(places.world()), -1);
  shrunk out{places, {}, {}, {}};
  for (int q = 0; q < places.world(); ++q)
    if (!lost.was_replaced(q)) {
      renumbered[static_cast<size_t>(q)] = static_cast<int>(out.kept.size());
      out.kept.push_back(q);
    }
  if (out.kept.empty()) throw std::invalid_argument("shrink_placement: no process is left");
  if (out.kept == std::vector<int>{0} && places.owned(0).empty())
    throw std::invalid_argument("shrink_placement: no worker is left (the coordinator apart holds no stage)");
  const int S = places.pp();
  std::vector<int> owners(static_cast<size_t>(places.dp() * S), -1);
  std::vector<int> load(out.kept.size(), 0);
  for (int i = 0; i < places.dp() * S; ++i) {
    const int q = places.owner(i / S, i % S);
    if (lost.was_replaced(q)) continue;
    owners[static_cast<size_t>(i)] = renumbered[static_cast<size_t>(q)];
    ++load[static_cast<size_t>(owners[static_cast<size_t>(i)])];
  }
  for (int i = 0; i < places.dp() * S; ++i) {
    if (owners[static_cast<size_t>(i)] >= 0) continue;
    const donor d = from_disk ? donor{} : donor_of(places, lost, i / S, i % S);
    int to = d.rank >= 0 ? renumbered[static_cast<size_t>(d.rank)] : -1;
    // A coordinator apart (rank 0 holding no stage) takes none.
    const auto first = load.begin() + (places.owned(0).empty() && load.size() > 1 ? 1 : 0);
    if (to < 0) to = static_cast<int>(std::min_element(first, load.end()) - load.begin());
    owners[static_cast<size_t>(i)] = to;
    ++load[static_cast<size_t>(to)];
    out.from[i] = d.rank;
    if (d.rank >= 0 && d.index != i) out.sources[i] = d.index;
  }
  out.places = rank_placement::of_owners(places.dp(), S, static_cast<int>(out.kept.size()), std::move(owners));
  return out;
}

grown grow_placement(const rank_placement& places, int joining) {
  const int S = places.pp();
  const int slots = places.dp() * S;
  std::vector<int> owners(static_cast<size_t>(slots));
  std::vector<int> load(static_cast<size_t>(places.world()), 0);
  for (int i = 0; i < slots; ++i) {
    owners[static_cast<size_t>(i)] = places.owner(i / S, i % S);
    ++load[static_cast<size_t>(owners[static_cast<size_t>(i)])];
  }
  grown out{places, 0, {}, {}};
  for (; out.taken < joining; ++out.taken) {
    const auto most = std::max_element(load.begin(), load.end());  // the first: the lowest rank
    if (*most <= 1) break;
    const int q = static_cast<int>(most - load.begin());
    int i = slots - 1;
    while (owners[static_cast<size_t>(i)] != q) --i;
    const int to = static_cast<int>(load.size());
    owners[static_cast<size_t>(i)] = to;
    load.push_back(1);
    --*(load.begin() + q);
    out.donors[i] = {q, i};
    out.from[i] = q;
  }
  out.places = rank_placement::of_owners(places.dp(), S, static_cast<int>(load.size()), std::move(owners));
  return out;
}

std::string describe_placement(const rank_placement& places) {
  std::string s;
  for (int q = 0; q < places.world(); ++q) {
    if (q > 0) s += " |";
    if (places.owned(q).empty()) s += " -";  // a coordinator apart
    for (const auto& slot : places.owned(q))
      s += " " + (places.dp() > 1 ? std::to_string(slot.replica) + "." : std::string()) + std::to_string(slot.stage);
  }
  return s.empty() ? s : s.substr(1);
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
