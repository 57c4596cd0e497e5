// Gloo groups (c10d::ProcessGroupGloo, one per rank, all in this process),
// the backend choice, and the NCCL stubs for builds without NCCL.
#include "runtime/dist/collectives/collectives.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <exception>
#include <functional>
#include <set>
#include <thread>

#include "runtime/dist/transport/kv_store_impl.hpp"
#include "runtime/dist/transport/tcp_store.hpp"

namespace actorpipe {

namespace {

std::string rank_where(const std::string& backend, const std::string& name, int rank, int size) {
  return backend + " group '" + name + "' rank " + std::to_string(rank) + "/" + std::to_string(size);
}

class gloo_work : public allreduce_work {
public:
  gloo_work(std::vector<c10::intrusive_ptr<c10d::Work>> works, std::string where)
    : works_(std::move(works)), where_(std::move(where)) {}

  void wait() override {
    // Every part is waited for, even after one failed, so that no part still
    // writes into the tensors once wait() has returned or thrown.
    std::string failure;
    for (auto& w : works_) {
      try {
        w->wait();
      } catch (const std::exception& e) {
        if (failure.empty()) failure = e.what();
      }
    }
    works_.clear();
    if (!failure.empty()) throw collective_error(where_ + ": allreduce failed: " + failure);
  }

  bool ready() override {
    for (auto& w : works_)
      if (!w->isCompleted()) return false;
    return true;
  }

private:
  std::vector<c10::intrusive_ptr<c10d::Work>> works_;
  std::string where_;
};

class gloo_group : public allreduce_group {
public:
  gloo_group(c10::intrusive_ptr<c10d::ProcessGroupGloo> pg, std::string name, int rank, int size)
    : pg_(std::move(pg)), where_(rank_where("gloo", name, rank, size)), rank_(rank), size_(size) {}

  std::unique_ptr<allreduce_work> allreduce_sum_async(std::vector<at::Tensor>& tensors, void* /*after*/) override {
    // allreduce() wants tensors of one shape (they are per-device copies of
    // one tensor); allreduce_coalesced() takes any shapes of one dtype. So:
    // one coalesced allreduce per dtype, in order of first appearance, which
    // is the same on every rank.
    std::vector<std::vector<at::Tensor>> buckets;
    for (size_t i = 0; i < tensors.size(); ++i) {
      const auto& t = tensors[i];
      if (!t.defined()) throw collective_error(where_ + ": tensor " + std::to_string(i) + " is undefined");
      if (!t.device().is_cpu())
        throw collective_error(where_ + ": tensor " + std::to_string(i) + " is on " + t.device().str() +
                               "; this Gloo sums CPU tensors only (copy to the CPU, or use nccl)");
      auto it = std::find_if(buckets.begin(), buckets.end(),
                             [&](const auto& b) { return b.front().scalar_type() == t.scalar_type(); });
      if (it == buckets.end())
        buckets.push_back({t});
      else
        it->push_back(t);
    }
    std::vector<c10::intrusive_ptr<c10d::Work>> works;
    for (auto& b : buckets) {
      try {
        works.push_back(pg_->allreduce_coalesced(b));
      } catch (const std::exception& e) {
        // Already started parts must finish before the caller sees the error.
        gloo_work started(std::move(works), where_);
        try {
          started.wait();
        } catch (const collective_error&) {
        }
        throw collective_error(where_ + ": cannot start allreduce of " + c10::toString(b.front().scalar_type()) +
                               " tensors: " + e.what());
      }
    }
    return std::make_unique<gloo_work>(std::move(works), where_);
  }

  std::string backend() const override { return "gloo"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

private:
  c10::intrusive_ptr<c10d::ProcessGroupGloo> pg_;
  std::string where_;
  int rank_;
  int size_;
};

}  // namespace

namespace {

// Ranks `ranks` of a `size`-rank group meeting through `store`, built
// concurrently (each constructor blocks until every rank has connected).
using store_for = std::function<c10::intrusive_ptr<c10d::Store>(size_t member)>;

allreduce_groups build_gloo(const store_for& store, const std::string& name, const std::vector<int>& ranks, int size,
                            const std::string& hostname, std::chrono::milliseconds timeout) {
  if (size < 1) throw collective_error("gloo group '" + name + "': size must be >= 1, got " + std::to_string(size));
  std::vector<c10::intrusive_ptr<c10d::ProcessGroupGloo>> pgs(ranks.size());
  std::vector<std::string> errors(ranks.size());
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        auto options = c10d::ProcessGroupGloo::Options::create(timeout);
        options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(hostname));
        pgs[i] = c10::make_intrusive<c10d::ProcessGroupGloo>(store(i), ranks[i], size, options);
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 0; i < ranks.size(); ++i)
    if (!errors[i].empty())
      throw collective_error(rank_where("gloo", name, ranks[i], size) + ": cannot connect: " + errors[i]);
  allreduce_groups out;
  for (size_t i = 0; i < ranks.size(); ++i)
    out.push_back(std::make_unique<gloo_group>(std::move(pgs[i]), name, ranks[i], size));
  return out;
}

}  // namespace

allreduce_groups make_gloo_groups(int size, const std::string& name, std::chrono::milliseconds timeout) {
  // One store per group: groups never see each other's keys.
  auto store = c10::make_intrusive<c10d::HashStore>();
  store->setTimeout(timeout);
  std::vector<int> all;
  for (int r = 0; r < size; ++r) all.push_back(r);
  // Loopback: the ranks share this host, and the hostname may not resolve.
  return build_gloo([&store](size_t) { return store; }, name, all, size, "127.0.0.1", timeout);
}

allreduce_groups join_gloo_groups(const kv_store_ptr& store, const std::string& name, const std::vector<int>& ranks,
                                  int size, const std::string& hostname, std::chrono::milliseconds timeout) {
  if (!store) throw collective_error("gloo group '" + name + "': no store to meet through");
  auto base = store->get().store;
  // Members in one process (a process holding two replicas of a stage,
  // after a re-placement) form at once, each over a connection of its own:
  // two threads' waits on one TCPStore client read each other's replies.
  // Those connections are called off with the store's own (kv_store::arm).
  auto* wrapped = dynamic_cast<abortable_store*>(base.get());
  auto* tcp = dynamic_cast<c10d::TCPStore*>(wrapped ? wrapped->inner().get() : base.get());
  std::vector<c10::intrusive_ptr<c10d::Store>> stores;
  for (size_t i = 0; i < ranks.size(); ++i) {
    c10::intrusive_ptr<c10d::Store> s = base;
    if (i > 0 && tcp) {
      c10d::TCPStoreOptions so;
      so.port = tcp->getPort();
      so.waitWorkers = false;
      so.timeout = timeout;
      try {
        s = make_tcp_store(tcp->getHost(), so);
      } catch (const std::exception& e) {
        throw collective_error("gloo group '" + name + "': cannot reach the store: " + e.what());
      }
      if (wrapped) s = c10::make_intrusive<abortable_store>(s, wrapped->switch_state());
    }
    stores.push_back(c10::make_intrusive<c10d::PrefixStore>(name, s));
  }
  return build_gloo([&stores](size_t i) { return stores[i]; }, name, ranks, size, hostname, timeout);
}

#if !ACTORPIPE_HAS_NCCL
bool nccl_available(std::string* reason) {
  if (reason) *reason = "built without NCCL (nccl.h, libnccl or libcudart not found when configured)";
  return false;
}

allreduce_groups make_nccl_groups(const std::vector<int>&, const std::string& name) {
  std::string why;
  nccl_available(&why);
  throw collective_error("nccl group '" + name + "': " + why + "; use gloo");
}

allreduce_groups join_nccl_groups(const kv_store_ptr&, const std::string& name, const std::vector<int>&, int,
                                  const std::vector<int>& devices, std::chrono::milliseconds) {
  return make_nccl_groups(devices, name);  // says why there is none
}
#endif

allreduce_groups make_allreduce_groups(const std::string& backend, const std::vector<std::string>& devices,
                                       const std::string& name) {
  if (backend != "auto" && backend != "gloo" && backend != "nccl")
    throw collective_error("group '" + name + "': unknown backend '" + backend + "' (expected auto, gloo or nccl)");
  std::vector<int> cuda;
  for (const auto& d : devices) {
    if (d.rfind("cuda:", 0) == 0) {
      try {
        size_t used = 0;
        int i = std::stoi(d.substr(5), &used);
        if (used == d.size() - 5 && i >= 0) {
          cuda.push_back(i);
          continue;
        }
      } catch (const std::exception&) {
      }
      throw collective_error("group '" + name + "': bad device '" + d + "' (expected cpu or cuda:N)");
    }
    if (d != "cpu") throw collective_error("group '" + name + "': bad device '" + d + "' (expected cpu or cuda:N)");
  }
  bool all_gpus = !devices.empty() && cuda.size() == devices.size();
  bool distinct = std::set<int>(cuda.begin(), cuda.end()).size() == cuda.size();
  bool use_nccl = backend == "nccl" || (backend == "auto" && all_gpus && distinct && nccl_available());
  if (use_nccl) {
    if (!all_gpus) throw collective_error("nccl group '" + name + "': every rank needs a cuda:N device");
    return make_nccl_groups(cuda, name);
  }
  return make_gloo_groups(static_cast<int>(devices.size()), name);
}

}  // namespace actorpipe
