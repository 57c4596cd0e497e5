// The devices' cross-section checks: one device per stage of the final
// stage count, one list per replica, auto's GPU for this rank, and what the
// devices allow (sim times, shared threads, NCCL); then recompute's one
// value per stage.
#include "runtime/config/checks.hpp"
#include "runtime/config/sections.hpp"

#include <cstdlib>
#include <string>

namespace actorpipe::config_detail {

void device_lists_match_the_replicas(const reader& r) {
  const auto& lists = r.cfg().replica_devices;
  const int dp = r.cfg().parallel.dp;
  if (!lists.empty() && static_cast<int>(lists.size()) != dp)
    r.fail_key("pipeline.devices", std::to_string(lists.size()) + " device lists for parallel.dp " + std::to_string(dp) +
                                       "; give one list per replica (or one flat list for all)");
}

void devices_match_the_stages(const reader& r) {
  const std::string path = "pipeline.devices";
  const auto& p = r.cfg().pipeline;
  const auto& lists = r.cfg().replica_devices;
  for (size_t i = 0; i < lists.size(); ++i)
    if (static_cast<int>(lists[i].size()) != p.stages)
      r.fail_key(item(path, i), "expected a list of " + std::to_string(p.stages) +
                                    " devices (one per stage), found a list of length " + std::to_string(lists[i].size()));
  if (r.facts().device_list && static_cast<int>(p.devices.size()) != p.stages)
    r.fail_key(path, std::to_string(p.devices.size()) + " devices for " + std::to_string(p.stages) +
                         " stages; give one per stage");
}

void measuring_devices_run_every_stage(const reader& r) {
  // A measuring device stands for every stage: a real stage next to one
  // would get empty activations.
  const config& cfg = r.cfg();
  if (cfg.replica_devices.empty() && !r.facts().device_list) return;  // auto
  const auto given = cfg.replica_devices.empty() ? std::vector<std::vector<std::string>>{cfg.pipeline.devices}
                                                 : cfg.replica_devices;
  const std::string& first = given.front().front();
  for (const auto& replica : given)
    for (const auto& d : replica)
      if ((is_measuring_device(d) || is_measuring_device(first)) && d != first)
        r.fail_key("pipeline.devices", "the " + (is_measuring_device(d) ? d : first) +
                                           " device runs every stage or none; found " + first + " next to " + d);
}

// One process per GPU: rank k's stages go on cuda:LOCAL_RANK, which must exist.
void auto_device_fits_the_local_rank(const reader& r) {
  const load_env& env = r.env();
  if (!devices_auto(r.cfg(), r.facts()) || !env.local_rank || env.cuda_devices <= 0 || *env.local_rank < env.cuda_devices) return;
  const std::string local = std::to_string(*env.local_rank);
  r.fail_key("pipeline.devices", "auto puts rank " + std::to_string(env.rank) + " (" + env.local_rank_variable + " " +
                                     local + ") on cuda:" + local + ", but this machine has " +
                                     std::to_string(env.cuda_devices) + " CUDA device" +
                                     (env.cuda_devices == 1 ? "" : "s"));
}

void sim_times_need_the_sim_device(const reader& r) {
  const std::string device = first_device(r.cfg(), r.env());
  if (r.cfg().marks.count("pipeline.sim_ms") && device != "sim")
    r.fail_key("pipeline.sim_ms", "only the sim device takes op times; pipeline.devices is " + device);
}

void shared_threads_need_the_null_device(const reader& r) {
  const std::string device = first_device(r.cfg(), r.env());
  if (r.cfg().pipeline.threads == "shared" && device != "null")
    r.fail_key("pipeline.threads", "shared runs the stages on CAF's scheduler, which only the null device's ops "
                                   "never block; a stage on " + device + " needs its own thread (dedicated)");
}

void shared_threads_run_one_replica(const reader& r) {
  const int dp = r.cfg().parallel.dp;
  if (r.cfg().pipeline.threads == "shared" && dp > 1)
    r.fail_key("pipeline.threads", "shared: the allreduce over parallel.dp " + std::to_string(dp) +
                                       " replicas blocks a stage's thread until its peers join; use dedicated");
}

void nccl_needs_cuda_stages(const reader& r) {
  if (r.cfg().parallel.allreduce != "nccl") return;
  // Across processes NCCL's groups are built (actors/process/links.cpp), but
  // they have not run on a GPU yet: refused, unless the GPU check of
  // docs/GPUS.md asks for them (ACTORPIPE_NCCL_ACROSS_PROCESSES=1).
  const char* asked = std::getenv("ACTORPIPE_NCCL_ACROSS_PROCESSES");
  if (r.env().local_rank && r.cfg().parallel.dp > 1 && !(asked && std::string(asked) == "1"))
    r.fail_key("parallel.allreduce", "nccl across processes has not run on a GPU yet; use gloo (or auto, which takes "
                                     "gloo across processes, the gradients of CUDA stages staged through the host)");
  for (const auto& replica : planned_devices(r.cfg(), r.env()))
    for (const auto& d : replica)
      if (d.rfind("cuda:", 0) != 0)
        r.fail_key("parallel.allreduce", "nccl sums CUDA tensors only, but a stage is on " + d + "; use gloo or auto");
}

void recompute_matches_the_stages(const reader& r) {
  const auto& p = r.cfg().pipeline;
  if (r.facts().recompute_list && static_cast<int>(p.recompute.size()) != p.stages)
    r.fail_key("pipeline.recompute", std::to_string(p.recompute.size()) + " values for " + std::to_string(p.stages) +
                                         " stages; give one true/false per stage, or all / none");
}

}  // namespace actorpipe::config_detail
