#include "actors/trainer.hpp"

#include <caf/all.hpp>

#include <unistd.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <climits>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>

#include "actors/process_run.hpp"
#include "actors/supervisor/local_host.hpp"
#include "messages/errors.hpp"
#include "runtime/files/checkpoint.hpp"
#include "runtime/files/file_io.hpp"
#include "runtime/model/lr.hpp"
#include "runtime/model/model.hpp"

namespace actorpipe {

namespace {

// Before the first step: the checkpoint directory exists and takes files,
// and what an interrupted write left in it goes, named.
void prepare_checkpoint_dir(const config& cfg, const train_options& opts) {
  const auto& cc = cfg.checkpoint;
  if (cc.every <= 0) return;
  std::error_code ec;
  if (std::filesystem::exists(cc.dir, ec) && !std::filesystem::is_directory(cc.dir, ec))
    throw cfg.error_at("checkpoint.dir", cc.dir + ": is a file, not a directory");
  std::filesystem::create_directories(cc.dir, ec);
  if (ec) throw cfg.error_at("checkpoint.dir", cc.dir + ": cannot create the directory: " + ec.message());
  if (::access(cc.dir.c_str(), W_OK | X_OK) != 0)
    throw cfg.error_at("checkpoint.dir", cc.dir + ": cannot write in it: " + std::strerror(errno));
  for (const auto& torn : torn_temporaries(cc.dir, "step_")) {
    std::filesystem::remove(torn, ec);
    if (opts.on_notice)
      opts.on_notice("note: removed " + torn + ", a checkpoint whose write was interrupted" +
                     (ec ? " (failed: " + ec.message() + ")" : ""));
  }
}

// glibc hands a freed block of more than 128 KiB back to the kernel (munmap,
// or trimming the top of an arena), and the next tensor of that size is
// fresh pages that fault in and are zeroed one by one. A stage frees and
// reallocates such tensors every op (each microbatch's weight gradients,
// 16 MiB for a 2048 x 2048 layer) and the optimizer's temporaries every
// step: on the seed MLP (bench/peers.sh) that was 40 000 page faults and
// 17 % of the CPU time a step (docs/benchmarks/processes.md, "Peers"). Keeping freed
// memory in the process instead (blocks up to 32 MiB from the arenas, no
// trimming) takes them to about 400; the weights come out bitwise the same.
// A MALLOC_* or GLIBC_TUNABLES setting of the user's is left as it is.
void keep_freed_memory() {
#if defined(__GLIBC__)
  static std::once_flag once;
  std::call_once(once, [] {
    for (const char* own : {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "GLIBC_TUNABLES"})
      if (std::getenv(own)) return;
    mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's largest (HEAP_MAX_SIZE / 2)
    mallopt(M_TRIM_THRESHOLD, INT_MAX);
    // A thread's arena (a stage's) is a chain of 64 MiB heaps, and a heap
    // left empty is unmapped whatever the trim threshold says unless the
    // top pad asks for that much to stay.
    mallopt(M_TOP_PAD, 64 << 20);
  });
#endif
}

}  // namespace

train_output run_training(const config& cfg, const train_options& opts) {
  // Foreseeable from the config (and --steps): refused before any work,
  // naming the key that grows the rate.
  check_rates(cfg);
  keep_freed_memory();
  if (opts.ranks.rank == 0) prepare_checkpoint_dir(cfg, opts);  // rank 0 writes the checkpoints
  if (opts.ranks.multi_process()) return run_rank(cfg, opts);
  return run_supervised(cfg, opts);
}

}  // namespace actorpipe
