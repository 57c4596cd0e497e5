#include "runtime/transport/state_transfer.hpp"

#include <ATen/ATen.h>

#include <atomic>
#include <future>
#include <mutex>
#include <sstream>

#include "runtime/transport/p2p_group.hpp"
#include "runtime/transport/tensor_channel.hpp"

namespace actorpipe {

namespace {

// "from tag dtype ndim d0 d1 ..." for a tensor, "-" for none.
void describe(std::ostream& os, const remote_tensor& d) {
  os << ' ' << d.from << ' ' << d.tag << ' ' << static_cast<int>(d.dtype) << ' ' << d.shape.size();
  for (int64_t x : d.shape) os << ' ' << x;
}

remote_tensor read_description(std::istream& is) {
  remote_tensor d;
  int dtype = 0;
  size_t ndim = 0;
  if (!(is >> d.from >> d.tag >> dtype >> ndim) || ndim > 16)
    throw transfer_error("a state transfer's description does not parse");
  d.dtype = static_cast<int8_t>(dtype);
  d.shape.resize(ndim);
  for (auto& x : d.shape)
    if (!(is >> x)) throw transfer_error("a state transfer's description does not parse");
  return d;
}

// One snapshot on its way in: the tensors land in `snap` (whose vectors
// are sized before the first receive starts, so the targets stay put);
// the last receive to end calls back, once.
struct arrival {
  stage_snapshot snap;
  std::shared_ptr<optimizer_state_copy> opt = std::make_shared<optimizer_state_copy>();
  std::vector<std::pair<remote_tensor, at::Tensor*>> wanted;
  std::atomic<size_t> left{0};
  std::mutex mutex;
  std::string failure;  // the first
  std::function<void(stage_snapshot)> done;
  std::function<void(const std::string&)> failed;

  void one_ended() {
    if (left.fetch_sub(1) != 1) return;
    if (!failure.empty()) return failed(failure);
    snap.optimizer = std::move(opt);
    done(std::move(snap));
  }
};

// Reads send_snapshot's line into `a` (its targets), before any receive.
void parse(const std::string& described, arrival& a) {
  std::istringstream is(described);
  std::string version;
  size_t weights = 0;
  auto bad = [&] {
    return transfer_error("a state transfer's description does not parse: '" + described.substr(0, 80) + "'");
  };
  if (!(is >> version >> a.snap.rank >> weights) || version != "v1" || weights > 100000) throw bad();
  a.snap.weights.resize(weights);
  for (auto& [name, t] : a.snap.weights) {
    if (!(is >> name)) throw bad();
    a.wanted.emplace_back(read_description(is), &t);
  }
  auto& opt = *a.opt;
  size_t params = 0;
  if (!(is >> params) || params > 100000) throw bad();
  opt.names.resize(params);
  opt.steps.resize(params);
  opt.tensors.resize(params);
  for (size_t i = 0; i < params; ++i) {
    size_t fields = 0;
    if (!(is >> opt.names[i] >> opt.steps[i] >> fields) || fields > 8) throw bad();
    opt.tensors[i].resize(fields);
    for (auto& t : opt.tensors[i]) {
      std::string mark;
      if (!(is >> mark) || (mark != "-" && mark != "+")) throw bad();
      if (mark == "+") a.wanted.emplace_back(read_description(is), &t);
    }
  }
}

}  // namespace

std::string send_snapshot(tensor_channel& channel, const stage_snapshot& s, int to) {
  std::ostringstream os;
  os << "v1 " << s.rank << ' ' << s.weights.size();
  for (const auto& [name, t] : s.weights) {
    os << ' ' << name;
    describe(os, channel.post(t, to));
  }
  const auto* opt = s.optimizer.get();
  os << ' ' << (opt ? opt->steps.size() : 0);
  if (opt)
    for (size_t i = 0; i < opt->steps.size(); ++i) {
      os << ' ' << (i < opt->names.size() ? opt->names[i] : "-") << ' ' << opt->steps[i] << ' '
         << opt->tensors.at(i).size();
      for (const auto& t : opt->tensors[i]) {
        if (!t.defined()) {
          os << " -";
          continue;
        }
        os << " +";
        describe(os, channel.post(t, to));
      }
    }
  return os.str();
}

void receive_snapshot_async(tensor_channel& channel, const std::string& described,
                            std::function<void(stage_snapshot)> done,
                            std::function<void(const std::string&)> failed) {
  auto a = std::make_shared<arrival>();
  parse(described, *a);
  a->done = std::move(done);
  a->failed = std::move(failed);
  // One more than the receives: the last one to end cannot be a receive
  // that ends before the others have started.
  a->left = a->wanted.size() + 1;
  for (auto& [d, where] : a->wanted) {
    at::Tensor* target = where;
    channel.fetch(
        d,
        [a, target](at::Tensor t) {
          *target = std::move(t);
          a->one_ended();
        },
        [a](const std::string& why) {
          {
            std::lock_guard<std::mutex> lock(a->mutex);
            if (a->failure.empty()) a->failure = why;
          }
          a->one_ended();
        });
  }
  a->one_ended();
}

stage_snapshot receive_snapshot(tensor_channel& channel, const std::string& described) {
  auto got = std::make_shared<std::promise<stage_snapshot>>();
  auto arrived = got->get_future();
  receive_snapshot_async(
      channel, described, [got](stage_snapshot s) { got->set_value(std::move(s)); },
      [got](const std::string& why) { got->set_exception(std::make_exception_ptr(transfer_error(why))); });
  return arrived.get();
}

}  // namespace actorpipe
