#pragma once
// The named cross-section checks, one function each; cross_checks() in
// cross_checks.cpp lists them in the order they run. Each fails at the key
// its rule is about, through the marks the section readers recorded.
#include "runtime/config/reader.hpp"

namespace actorpipe::config_detail {

// cross_checks.cpp: data vs model, parallel vs train, what a schedule
// without a flush cannot do, faults vs pipeline and parallel, rebalancing
// vs supervision.
void text_data_matches_the_model(const reader& r);
void synthetic_features_match_the_model(const reader& r);
void synthetic_classes_fit_the_model(const reader& r);
void replicas_fit_the_batch(const reader& r);
void replicas_need_a_flush(const reader& r);
void clipping_needs_a_flush(const reader& r);
void tie_needs_a_flush(const reader& r);
void checkpoints_need_a_flush(const reader& r);
void rebalance_needs_a_flush(const reader& r);
void fault_stages_exist(const reader& r);
void fault_replicas_exist(const reader& r);
void fault_microbatches_exist(const reader& r);
void rebalance_needs_restarts(const reader& r);
void eval_needs_a_held_out_split(const reader& r);
void eval_needs_a_model_that_computes(const reader& r);

// pipeline_checks.cpp: the partition and stages vs the model, the
// microbatches vs the batch, the replicas and the final stage count,
// rebalancing vs the stages.
void partition_ranges_cover_the_layers(const reader& r);
void stages_match_the_partition(const reader& r);
void stages_fit_the_layers(const reader& r);
void microbatches_fit_the_batch(const reader& r);
void microbatches_fill_two_weight_versions(const reader& r);
void stream_fits_an_int(const reader& r);
void microbatches_in_stage_groups(const reader& r);
void schedule_shape_fits(const reader& r);
void replica_shares_split_into_microbatches(const reader& r);
void rebalance_runs_one_chunk_per_stage(const reader& r);
void rebalance_needs_two_stages(const reader& r);

// device_checks.cpp: devices, threads and recomputation vs the final stage
// count and the replicas.
void device_lists_match_the_replicas(const reader& r);
void devices_match_the_stages(const reader& r);
void measuring_devices_run_every_stage(const reader& r);
void auto_device_fits_the_local_rank(const reader& r);
void sim_times_need_the_sim_device(const reader& r);
void shared_threads_need_the_null_device(const reader& r);
void shared_threads_run_one_replica(const reader& r);
void replacements_need_restarts(const reader& r);
void nccl_needs_cuda_stages(const reader& r);
void recompute_matches_the_stages(const reader& r);

}  // namespace actorpipe::config_detail
