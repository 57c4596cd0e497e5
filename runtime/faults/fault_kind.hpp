#pragma once
// The kinds of injected fault, typed once at config load. Names are what a
// config writes (`faults.inject[i].kind`); nothing past the config reader
// compares them as strings.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace actorpipe {

enum class fault_kind { nonfinite, duplicate, delay, slow_stage, kill_stage, throw_in_op, drop, kill_process, stop_process,
                        stale_message };

/// Where a `nonfinite` fault puts its NaN: a microbatch's gradient or
/// activation, or (update) the stage's first parameter right after its
/// optimizer step, as a faulty optimizer or memory would.
enum class nonfinite_site { grad, activation, update };

struct fault_kind_info {
  fault_kind kind;
  const char* name;        ///< the config's spelling
  const char* op_key;      ///< the key naming its op ("after_op", "op"), or null
  bool picks_messages;     ///< acts on messages of every replica, not on one stage
  bool ends_stage;         ///< the stage dies of it (a restart re-runs the step without it)
};

/// Every kind, in the order errors list them.
inline const std::array<fault_kind_info, 10>& fault_kinds() {
  static const std::array<fault_kind_info, 10> kinds = {{
      {fault_kind::nonfinite, "nonfinite", nullptr, false, false},
      {fault_kind::duplicate, "duplicate", nullptr, true, false},
      {fault_kind::delay, "delay", nullptr, true, false},
      {fault_kind::slow_stage, "slow_stage", nullptr, false, false},
      {fault_kind::kill_stage, "kill_stage", "after_op", false, true},
      {fault_kind::throw_in_op, "throw", "op", false, true},
      {fault_kind::drop, "drop", "op", true, false},
      // The stage's whole process raises SIGKILL on itself (launch only).
      {fault_kind::kill_process, "kill_process", "after_op", false, true},
      // The stage's whole process stops itself (SIGSTOP): a hang, or a host
      // that is gone without closing its connections (launch only).
      {fault_kind::stop_process, "stop_process", "after_op", false, true},
      // In every attempt after the first (a restart, or a heal's next
      // generation), the first message the stage sends at or after `step`
      // is followed by a copy of it under the attempt before's epoch: a
      // message of the dead attempt that arrives late. Its receiver drops
      // it, before it touches the tensor channel, and counts it.
      {fault_kind::stale_message, "stale_message", nullptr, false, false},
  }};
  return kinds;
}

inline const fault_kind_info& info(fault_kind k) { return fault_kinds()[static_cast<size_t>(k)]; }
inline std::string to_string(fault_kind k) { return info(k).name; }
inline std::optional<fault_kind> fault_kind_named(std::string_view name) {
  for (const auto& i : fault_kinds())
    if (name == i.name) return i.kind;
  return std::nullopt;
}

/// One injected fault.
struct fault_spec {
  fault_kind kind = fault_kind::nonfinite;
  int stage = 0;     ///< nonfinite, slow_stage, kill_stage, throw
  int64_t step = 0;
  int microbatch = 0;
  nonfinite_site where = nonfinite_site::grad;
  int from = -1, to = -1;      ///< delay: messages from stage `from` to stage `to` (-1: any)
  double probability = 0.0;    ///< duplicate, delay: per message, drawn from faults.seed
  double ms = 0.0;             ///< delay
  double factor = 1.0;         ///< slow_stage: every op takes this many times as long
  std::string op;              ///< kill_stage: after firing this op ("F5"); throw: inside it
  int replica = -1;  ///< a stage's faults with parallel.dp > 1: only this replica's (-1: every replica's)
};

}  // namespace actorpipe
