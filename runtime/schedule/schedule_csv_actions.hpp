#pragma once
// Inside runtime/schedule/schedule_csv (not a public header): torch's actions
// as a row of its CSV holds them, shared by the export and the import.
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace actorpipe::schedule_csv_detail {

// torch's _ComputationType, as actions of a row.
enum class act { F, B, I, W, UNSHARD, RESHARD, REDUCE_GRAD, SEND_F, RECV_F, SEND_B, RECV_B, OVERLAP_F_B };

// Longest names first: a prefix match picks the whole name.
inline const std::pair<const char*, act> action_names[] = {
    {"REDUCE_GRAD", act::REDUCE_GRAD}, {"UNSHARD", act::UNSHARD}, {"RESHARD", act::RESHARD},
    {"SEND_F", act::SEND_F},           {"RECV_F", act::RECV_F},   {"SEND_B", act::SEND_B},
    {"RECV_B", act::RECV_B},           {"F", act::F},             {"B", act::B},
    {"I", act::I},                     {"W", act::W}};

inline const char* name_of(act a) {
  for (const auto& [name, kind] : action_names)
    if (kind == a) return name;
  return "OVERLAP_F_B";
}

inline bool is_compute(act a) { return a == act::F || a == act::B || a == act::I || a == act::W; }
inline bool takes_microbatch(act a) { return a != act::UNSHARD && a != act::RESHARD && a != act::REDUCE_GRAD; }

struct action {
  act type = act::F;
  int stage = -1;
  int mb = -1;              // -1: none (UNSHARD, RESHARD, REDUCE_GRAD, the compound)
  std::vector<action> sub;  // OVERLAP_F_B: the F, then the B or I
};

inline std::string text_of(const action& a) {
  if (a.type == act::OVERLAP_F_B) return "(" + text_of(a.sub[0]) + ";" + text_of(a.sub[1]) + ")OVERLAP_F_B";
  return std::to_string(a.stage) + name_of(a.type) + (a.mb >= 0 ? std::to_string(a.mb) : "");
}

using action_key = std::tuple<int, int, int>;  // type, stage, microbatch
inline action_key key_of(act type, int stage, int mb) { return {static_cast<int>(type), stage, mb}; }
inline action_key key_of(const action& a) { return key_of(a.type, a.stage, a.mb); }


}  // namespace actorpipe::schedule_csv_detail
