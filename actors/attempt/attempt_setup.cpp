#include "actors/attempt/attempt_setup.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>

#include <caf/all.hpp>

#include "actors/driver/driver_actor.hpp"
#include "messages/errors.hpp"
#include "runtime/schedule/policies/fixed_order.hpp"

namespace actorpipe {

// A torn or corrupted newer checkpoint is named and skipped.
resume_point find_resume(const train_options& opts, const checkpoint* from) {
  resume_point rp;
  rp.dir = opts.resume_dir;
  rp.from_disk = !from && !opts.resume_dir.empty();
  if (from) {
    rp.ckpt = *from;
  } else if (rp.from_disk) {
    std::vector<std::string> problems;
    try {
      rp.ckpt = load_latest_checkpoint(opts.resume_dir, &problems);
    } catch (const std::runtime_error& e) {
      throw config_error(e.what());
    }
    for (const auto& p : problems)
      if (opts.on_notice) opts.on_notice("note: skipped " + p);
    if (opts.on_notice)
      opts.on_notice("note: resuming after step " + std::to_string(rp.ckpt.step) + " from " + opts.resume_dir + " (" +
                     std::filesystem::path(rp.ckpt.path).filename().string() + ": " +
                     std::to_string(rp.ckpt.step + 1) + " steps done)");
  }
  return rp;
}

// The checkpoint's weights into freshly built layers, by global name.
void load_resumed(const resume_point& rp, std::vector<layer>& ls) {
  if (rp.ckpt.step < 0) return;
  std::map<std::string, at::Tensor> by_name(rp.ckpt.weights.begin(), rp.ckpt.weights.end());
  size_t count = 0;
  torch::NoGradGuard no_grad;
  for (auto& l : ls)
    for (auto& [name, t] : l.parameters()) {
      const std::string key = std::to_string(l.index()) + "." + name;
      auto it = by_name.find(key);
      if (it == by_name.end() || !it->second.sizes().equals(t.sizes()))
        throw rp.unfit("the checkpoint has no " + key + " of shape " + c10::str(t.sizes()) +
                       "; it was written for another model");
      if (rp.from_disk && !at::isfinite(it->second).all().item<bool>())
        throw rp.unfit("the checkpoint's " + key + " holds a NaN or an infinity");
      t.copy_(it->second);
      ++count;
    }
  if (count != by_name.size())
    throw rp.unfit("the checkpoint holds " + std::to_string(by_name.size()) + " parameters, the model " +
                   std::to_string(count) + "; it was written for another model");
}

std::shared_ptr<const policy> policy_for(const config& cfg, const train_options& opts) {
  const int chunks = cfg.pipeline.virtual_stages;
  std::shared_ptr<const policy> pol;
  if (!opts.fixed_order.empty())
    pol = std::make_shared<fixed_order_policy>(opts.fixed_order, opts.fixed_placement, opts.fixed_overlap);
  else
    pol = make_policy(cfg.pipeline.schedule, policy_options{chunks, cfg.pipeline.max_inflight});
  if (!pol) throw std::invalid_argument("unknown schedule " + cfg.pipeline.schedule);
  if (pol->chunks() != chunks)
    throw std::invalid_argument("schedule " + pol->name() + " runs " + std::to_string(pol->chunks()) +
                                " chunks per stage; the config has virtual_stages " + std::to_string(chunks));
  return pol;
}

attempt_plan plan_attempt(const config& cfg, const train_options& opts) {
  attempt_plan p;
  p.data = std::make_shared<const dataset>(load_dataset(cfg));
  p.stages = cfg.pipeline.stages;
  p.microbatches = static_cast<int>(chunk_count(cfg.train.batch_size, cfg.pipeline.microbatches));
  p.chunks = cfg.pipeline.virtual_stages;
  p.parts = partition_for(cfg);
  p.dp = cfg.parallel.dp;
  // Every (replica, stage)'s device; a config built in code may give only
  // pipeline.devices, which then holds for every replica.
  p.replica_devices = cfg.replica_devices;
  if (static_cast<int>(p.replica_devices.size()) != p.dp) p.replica_devices.assign(p.dp, cfg.pipeline.devices);
  p.threads = cfg.pipeline.intra_op_threads;
  if (p.threads <= 0)
    p.threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / (p.stages * p.dp));
  return p;
}

std::pair<int, int> tied_stages(const config& cfg, const attempt_plan& p) {
  const auto& m = cfg.model;
  if (m.tie_head < 0) return {-1, -1};
  auto stage_of = [&](int layer) {
    for (int k = 0; k < static_cast<int>(p.parts.size()); ++k)
      if (p.parts[k].first <= layer && layer <= p.parts[k].second) return p.plc.rank_of(k);
    throw std::logic_error("layer " + std::to_string(layer) + " is in no partition range");
  };
  return {stage_of(m.tie_embedding), stage_of(m.tie_head)};
}

// Per replica, the two-rank group of a tie split over two stages.
void make_tie_groups(const config& cfg, const attempt_plan& p, replica_groups& out) {
  const auto [e, h] = tied_stages(cfg, p);
  if (e == h) return;
  for (int d = 0; d < p.dp; ++d) {
    const auto& devs = p.replica_devices.at(d);
    const std::vector<std::string> pair{devs.at(e), devs.at(h)};
    const std::string name = "tie replica " + std::to_string(d);
    allreduce_groups made;
    try {
      made = make_allreduce_groups(cfg.parallel.allreduce == "gloo" ? "gloo" : "auto", pair, name);
    } catch (const collective_error&) {
      made = make_allreduce_groups("gloo", {"cpu", "cpu"}, name);
    }
    out.ties.push_back({std::shared_ptr<allreduce_group>(std::move(made[0])),
                        std::shared_ptr<allreduce_group>(std::move(made[1]))});
  }
}

// One allreduce group per stage rank, over that rank's replicas.
replica_groups make_replica_groups(const config& cfg, const train_options& opts, const attempt_plan& p) {
  replica_groups out;
  out.groups.resize(p.stages);
  if (!is_measuring_device(p.replica_devices.at(0).at(0))) make_tie_groups(cfg, p, out);
  if (p.dp <= 1) return out;
  for (int r = 0; r < p.stages; ++r) {
    std::vector<std::string> devs;
    for (int d = 0; d < p.dp; ++d) devs.push_back(p.replica_devices.at(d).at(r));
    allreduce_groups made;
    try {
      made = make_allreduce_groups(cfg.parallel.allreduce, devs, "stage " + std::to_string(r));
    } catch (const collective_error& e) {
      if (cfg.parallel.allreduce != "nccl") throw;
      // NCCL refuses two ranks on one device (or finds no GPU): Gloo works
      // everywhere, through host copies.
      if (opts.on_notice) opts.on_notice("note: stage " + std::to_string(r) + ": " + e.what() + "; using gloo");
      made = make_allreduce_groups("gloo", std::vector<std::string>(devs.size(), "cpu"), "stage " + std::to_string(r));
    }
    for (auto& g : made) out.groups[r].push_back(std::shared_ptr<allreduce_group>(std::move(g)));
    out.backend = out.groups[r].front()->backend();
    // auto on GPUs that replicas share: NCCL would refuse, so Gloo it is;
    // say so once, as the explicit nccl fallback above does. (On distinct
    // GPUs, Gloo under auto means NCCL is missing, which is another story.)
    const bool all_cuda = std::all_of(devs.begin(), devs.end(), [](const std::string& d) { return d.rfind("cuda", 0) == 0; });
    const bool shared = std::set<std::string>(devs.begin(), devs.end()).size() < devs.size();
    if (r == 0 && out.backend == "gloo" && cfg.parallel.allreduce == "auto" && all_cuda && shared && opts.on_notice)
      opts.on_notice("note: allreduce auto: replicas share a GPU (" + devs.front() +
                     "), and NCCL refuses two ranks on one device; using gloo");
  }
  return out;
}

// The null and sim devices run nothing: the layers and the tensors stay on
// the CPU, and an op takes the configured time (sim) or none (null).
namespace {

void set_measuring_device(stage_setup& st, const config& cfg, const policy& pol) {
  st.work = st.device == "null" ? stage_setup::work_kind::none : stage_setup::work_kind::timed;
  const auto& pc = cfg.pipeline;
  st.sim_ms[0] = pc.sim_f_ms;
  st.sim_ms[1] = pol.splits_backward() ? pc.sim_b_ms : pc.sim_b_ms + pc.sim_w_ms;
  st.sim_ms[2] = pc.sim_w_ms;
  st.device = "cpu";
  st.devices.assign(st.devices.size(), "cpu");
  st.shared_thread = pc.threads == "shared";
}

}  // namespace

// Rank r's chunks take their layers out of `layers`, onto the stage's
// device; with a checkpoint, the optimizer state of those parameters.
void give_layers(stage_setup& st, const attempt_plan& p, std::vector<layer>& layers, const resume_point& rp,
                 const config& cfg) {
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (int c = 0; c < p.chunks; ++c) {
    const auto& range = p.layers_of(st.rank, c);
    std::vector<layer> mine;
    for (int i = range.first; i <= range.second; ++i) mine.push_back(std::move(layers[i]));
    st.layers.push_back(std::make_shared<layer_stack>(std::move(mine)));
    for (auto& named_param : st.layers.back()->named_parameters()) named.push_back(std::move(named_param));
    st.layers.back()->to(st.device, st.dtype);
  }
  // The tied copies among this stage's parameters (named in layer order,
  // every chunk's, as the stage lists them for its optimizer).
  const auto& m = cfg.model;
  if (m.tie_head >= 0)
    for (size_t i = 0; i < named.size(); ++i) {
      // GPT's embedding ties its wte.weight; a token_embedding its weight.
      const bool gpt = m.layers[static_cast<size_t>(m.tie_embedding)].type == "embedding";
      if (named[i].first == std::to_string(m.tie_embedding) + (gpt ? ".wte.weight" : ".weight"))
        st.tie_embedding_param = static_cast<int>(i);
      if (named[i].first == std::to_string(m.tie_head) + ".weight") st.tie_head_param = static_cast<int>(i);
    }
  if (rp.ckpt.step < 0) return;
  // By parameter name: a checkpoint resumes under any split into stages.
  try {
    st.optimizer_copy = optimizer_state_for(rp.ckpt, named, cfg.train.optimizer.type);
  } catch (const std::invalid_argument& e) {
    if (rp.from_disk) throw rp.unfit(e.what());
    throw std::runtime_error(e.what());
  }
}

// What the stage actor of replica d, rank r is spawned with.
stage_setup stage_setup_for(const config& cfg, const train_options& opts, const attempt_plan& p, int d, int r) {
  stage_setup st;
  st.rank = r;
  st.stages = p.stages;
  st.replica = d;
  st.epoch = opts.epoch;
  st.skip_allreduce = d == opts.skip_allreduce_replica;
  st.async = !p.pol->flushes();
  st.step_microbatches = p.microbatches;
  st.steps = cfg.train.steps;
  st.train = cfg.train;
  // Async: one stream over the whole run.
  st.microbatches =
      st.async ? static_cast<int>(p.microbatches * std::max<int64_t>(1, cfg.train.steps)) : p.microbatches;
  st.batch_size = cfg.train.batch_size;
  st.devices = p.replica_devices.at(d);
  st.device = st.devices[r];
  if (is_measuring_device(st.device)) set_measuring_device(st, cfg, *p.pol);
  st.intra_op_threads = p.threads;
  st.pace_ms = cfg.pipeline.pace_ms;
  st.recompute = r < static_cast<int>(cfg.pipeline.recompute.size()) && cfg.pipeline.recompute[r];
  st.lockstep = cfg.pipeline.lockstep;
  st.seed = cfg.train.seed;
  st.pol = p.pol;
  st.chunks = p.chunks;
  st.dtype = parameter_dtype(cfg.model);
  st.compute_dtype = cfg.model.mixed_precision == "bfloat16" ? at::kBFloat16 : st.dtype;
  st.eval = cfg.eval;
  st.optimizer = cfg.train.optimizer;
  for (const auto& f : cfg.faults.inject)
    if (info(f.kind).picks_messages || (f.stage == r && (f.replica < 0 || f.replica == d))) st.faults.push_back(f);
  st.fault_seed = cfg.faults.seed;
  st.op_timeout_ms = cfg.supervision.op_timeout_ms;
  st.check_updates = cfg.supervision.check_updates;
  return st;
}

caf::actor spawn_attempt_driver(caf::actor_system& sys, const config& cfg, const train_options& opts,
                                const attempt_plan& p, const std::vector<caf::actor>& stages, int64_t resumed_step,
                                std::shared_ptr<checkpoint> last_good, std::chrono::steady_clock::time_point origin) {
  config run_cfg = cfg;
  run_cfg.pipeline.partition = p.parts;
  driver_setup ds;
  ds.cfg = run_cfg;
  ds.data = p.data;
  ds.stages = stages;
  ds.dp = p.dp;
  ds.verify_replicas = opts.verify_replicas;
  ds.microbatches = p.microbatches;
  ds.epoch = opts.epoch;
  ds.origin = origin;
  ds.on_step = opts.on_step;
  ds.on_eval = opts.on_eval;
  ds.on_decided = opts.on_decided;
  ds.regroup = opts.regroup;
  ds.plc = p.plc;
  ds.async = !p.pol->flushes();
  ds.first_step = resumed_step + 1;
  ds.skip_steps = opts.skip_steps;
  ds.last_good = std::move(last_good);
  return spawn_driver(sys, std::move(ds));
}

// An error as a run failure: ours by code and fields; another category's
// (a stage's own error carries one readable string) as `failed`, with its
// string or CAF's rendering.
run_failure failure_of(const caf::actor_system& sys, const caf::error& err) {
  run_failure f;
  if (read_failure(err, f)) return f;
  f.code = run_errc::failed;
  const auto& ctx = err.context();
  f.text = ctx.match_elements<std::string>() ? ctx.get_as<std::string>(0) : sys.render(err);
  return f;
}

void throw_run_error(run_failure f) {
  switch (f.code) {
    case run_errc::hang: throw stuck_error(std::move(f));
    case run_errc::restart_limit: throw restart_limit_error(std::move(f));
    default: throw run_error(std::move(f));
  }
}

}  // namespace actorpipe
