#include "runtime/dist/placement/recut.hpp"

#include <algorithm>
#include <stdexcept>

namespace actorpipe {

recut recut_placement(const rank_placement& places, const partition_t& parts, const std::vector<int>& gone,
                      const std::vector<int64_t>& costs, int max_stages, bool from_disk) {
  const int dp = places.dp(), S = places.pp();
  if (static_cast<int>(parts.size()) != S)
    throw std::invalid_argument("recut_placement: " + std::to_string(parts.size()) + " ranges for " +
                                std::to_string(S) + " stages");
  const int layers = parts.empty() ? 0 : parts.back().second + 1;
  if (static_cast<int>(costs.size()) != layers)
    throw std::invalid_argument("recut_placement: " + std::to_string(costs.size()) + " costs for " +
                                std::to_string(layers) + " layers");
  heal_plan lost;
  lost.replaced = gone;
  recut out;
  std::vector<int> workers;  // new ranks that may hold a stage
  const bool apart = places.owned(0).empty();
  for (int q = 0; q < places.world(); ++q) {
    if (lost.was_replaced(q)) continue;
    const int now = static_cast<int>(out.kept.size());
    out.kept.push_back(q);
    if (!(apart && q == 0)) workers.push_back(now);
  }
  if (out.kept.empty()) throw std::invalid_argument("recut_placement: no process is left");
  const int fits = static_cast<int>(workers.size()) / dp;
  const int stages = std::min({fits, max_stages, layers});
  if (fits < 1) {
    out.why_not = std::to_string(workers.size()) + " worker process" + (workers.size() == 1 ? " is" : "es are") +
                  " left for " + std::to_string(dp) + " replicas, which keep the same cut";
    return out;
  }
  if (stages == S) {
    out.why_not = "the processes left hold " + std::to_string(S) + " stages, one each, as before";
    return out;
  }
  std::vector<int> owners(static_cast<size_t>(dp * stages));
  for (size_t i = 0; i < owners.size(); ++i) owners[i] = workers[i];
  out.places = rank_placement::of_owners(dp, stages, static_cast<int>(out.kept.size()), std::move(owners));
  out.parts = balanced_partition(costs, stages);
  for (int d = 0; d < dp; ++d)
    for (int n = 0; n < stages; ++n) {
      auto& mine = out.pieces[d * stages + n];
      for (int o = 0; o < S; ++o) {
        const int first = std::max(out.parts[static_cast<size_t>(n)].first, parts[static_cast<size_t>(o)].first);
        const int last = std::min(out.parts[static_cast<size_t>(n)].second, parts[static_cast<size_t>(o)].second);
        if (first > last) continue;
        recut_piece p{d * S + o, first, last, -1};
        if (!from_disk) {
          const int q = places.owner(d, o);
          if (!lost.was_replaced(q)) {
            p.holder = q;
          } else if (const donor k = donor_of(places, lost, d, o); k.rank >= 0) {
            p.from = k.index;
            p.holder = k.rank;
          }
        }
        if (p.holder < 0) out.needs_disk = true;
        mine.push_back(p);
      }
    }
  return out;
}

std::string describe_pieces(const recut& r, const std::vector<int>& shown) {
  const auto rank_name = [&](int q) {
    return std::to_string(q >= 0 && q < static_cast<int>(shown.size()) ? shown[static_cast<size_t>(q)] : q);
  };
  const auto layer_range = [](int a, int b) {
    return a == b ? "layer " + std::to_string(a) : "layers " + std::to_string(a) + "-" + std::to_string(b);
  };
  const int S = r.places.pp();
  std::string out;
  for (const auto& [slot, pieces] : r.pieces) {
    out += out.empty() ? "" : "; ";
    out += "stage " + std::to_string(slot % S) + (r.places.dp() > 1 ? " of replica " + std::to_string(slot / S) : "");
    std::string from;
    for (const auto& p : pieces)
      from += (from.empty() ? " from " : ", ") +
              (p.holder < 0 ? std::string("disk") : "rank " + rank_name(p.holder) + "'s memory") + " (" +
              layer_range(p.first, p.last) + ")";
    out += from;
  }
  return out;
}

}  // namespace actorpipe
