#include "runtime/dist/transport/state_transfer.hpp"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <atomic>
#include <future>
#include <limits>
#include <mutex>
#include <sstream>

#include "runtime/dist/transport/p2p_group.hpp"
#include "runtime/dist/transport/shared_segments.hpp"
#include "runtime/dist/transport/tensor_channel.hpp"

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
  bool v2 = false;       // v2 or v3: one packed buffer (`packed`, cut by `shapes`), not `wanted`
  remote_tensor packed;  // v2 (v3: its dtype and length only)
  std::string shared;    // v3: the segment that holds the packed buffer
  uint64_t shared_seq = 0;
  std::vector<std::pair<std::vector<int64_t>, at::Tensor*>> shapes;  // v2, in the buffer's order
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

// The element count of `shape`; -1 when it would overflow int64.
int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t x : shape) {
    if (x != 0 && n > std::numeric_limits<int64_t>::max() / x) return -1;
    n *= x;
  }
  return n;
}

// Reads send_snapshot's line into `a` (its targets), before any receive.
// v1: one transfer per tensor (`wanted`); v2: one flat transfer
// (`packed`), cut into the tensors (`shapes`, in order) once it is in.
void parse(const std::string& described, arrival& a) {
  std::istringstream is(described);
  std::string version;
  size_t weights = 0;
  auto bad = [&] {
    return transfer_error("a state transfer's description does not parse: '" + described.substr(0, 80) + "'");
  };
  if (!(is >> version) || (version != "v1" && version != "v2" && version != "v3")) throw bad();
  const bool v2 = a.v2 = version != "v1";
  if (version == "v2") a.packed = read_description(is);
  if (version == "v3") {
    int dtype = 0;
    int64_t total = 0;
    if (!(is >> a.shared >> a.shared_seq >> dtype >> total) || total < 0 || dtype < 0 ||
        dtype >= static_cast<int>(at::ScalarType::NumOptions))
      throw bad();
    a.packed.dtype = static_cast<int8_t>(dtype);
    a.packed.shape = {total};
  }
  // The tensor after a name or a "+": its transfer (v1) or its shape (v2).
  auto tensor = [&](at::Tensor* t) {
    if (!v2) return a.wanted.emplace_back(read_description(is), t), void();
    size_t ndim = 0;
    if (!(is >> ndim) || ndim > 16) throw bad();
    std::vector<int64_t> shape(ndim);
    for (auto& x : shape)
      if (!(is >> x) || x < 0) throw bad();
    a.shapes.emplace_back(std::move(shape), t);
  };
  if (!(is >> a.snap.rank >> weights) || weights > 100000) throw bad();
  a.snap.weights.resize(weights);
  for (auto& [name, t] : a.snap.weights) {
    if (!(is >> name)) throw bad();
    tensor(&t);
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
      if (mark == "+") tensor(&t);
    }
  }
  if (v2) {
    int64_t total = 0;
    for (const auto& [shape, t] : a.shapes) {
      const int64_t n = numel_of(shape);
      if (n < 0 || total > std::numeric_limits<int64_t>::max() - n) throw bad();
      total += n;
    }
    if (a.packed.shape.size() != 1 || a.packed.shape[0] != total) throw bad();
  }
}

// The optimizer's part of the line, after the weights' (the same in v1
// and v2 but for how a tensor is described).
template <class Describe>
void describe_optimizer(std::ostream& os, const stage_snapshot& s, Describe&& one) {
  const auto* opt = s.optimizer.get();
  os << ' ' << (opt ? opt->steps.size() : 0);
  if (!opt) return;
  for (size_t i = 0; i < opt->steps.size(); ++i) {
    os << ' ' << (i < opt->names.size() ? opt->names[i] : "-") << ' ' << opt->steps[i] << ' '
       << opt->tensors.at(i).size();
    for (const auto& t : opt->tensors[i]) {
      if (!t.defined()) {
        os << " -";
        continue;
      }
      os << " +";
      one(t);
    }
  }
}

// v2 and v3 after the packed buffer: each tensor's shape, in its order.
void describe_shapes(std::ostream& os, const stage_snapshot& s) {
  auto shape = [&os](const at::Tensor& t) {
    os << ' ' << t.dim();
    for (int64_t x : t.sizes()) os << ' ' << x;
  };
  os << ' ' << s.rank << ' ' << s.weights.size();
  for (const auto& [name, t] : s.weights) {
    os << ' ' << name;
    shape(t);
  }
  describe_optimizer(os, s, shape);
}

// v2: the packed buffer as one transfer, then each tensor's shape.
std::string send_packed(tensor_channel& channel, const stage_snapshot& s, int to) {
  std::ostringstream os;
  os << "v2";
  describe(os, channel.post(s.flat, to));
  describe_shapes(os, s);
  return os.str();
}

// The packed buffer's views, into the snapshot's tensors (checked when the
// line was read).
void cut(arrival& a, at::Tensor flat) {
  int64_t at = 0;
  for (auto& [shape, target] : a.shapes) {
    const int64_t n = numel_of(shape);
    *target = flat.narrow(0, at, n).view(shape);
    at += n;
  }
  a.snap.flat = std::move(flat);
}

// Every tensor of a snapshot in the order a packed buffer holds them and
// its line names them: the weights, then each parameter's defined
// optimizer tensors. Const in, pointers to const out.
template <class Weights, class State>
auto packed_order(Weights& weights, State* opt) {
  std::vector<decltype(&weights.front().second)> out;
  for (auto& [name, t] : weights) out.push_back(&t);
  if (opt)
    for (auto& fields : opt->tensors)
      for (auto& t : fields)
        if (t.defined()) out.push_back(&t);
  return out;
}

// The element count of `tensors`, all of `dtype` (their first's); -1 where
// there are none or their dtypes differ.
template <class Ptr>
int64_t packed_numel(const std::vector<Ptr>& tensors, at::ScalarType& dtype) {
  if (tensors.empty()) return -1;
  dtype = tensors.front()->scalar_type();
  int64_t total = 0;
  for (const auto* t : tensors) {
    if (t->scalar_type() != dtype) return -1;
    total += t->numel();
  }
  return total;
}

// Copies `tensors` into `flat` in order; the views they went to.
template <class Ptr>
std::vector<at::Tensor> copy_packed(const std::vector<Ptr>& tensors, const at::Tensor& flat) {
  c10::NoGradGuard no_grad;
  std::vector<at::Tensor> views;
  int64_t at = 0;
  for (const auto* t : tensors) {
    const int64_t n = t->numel();
    views.push_back(flat.narrow(0, at, n).view(t->sizes()));
    views.back().copy_(t->detach());
    at += n;
  }
  return views;
}

}  // namespace

bool pack_snapshot(stage_snapshot& s) {
  // In a copy of the optimizer's state, which other snapshots may share.
  auto opt = s.optimizer ? std::make_shared<optimizer_state_copy>(*s.optimizer) : nullptr;
  const auto targets = packed_order(s.weights, opt.get());
  at::ScalarType dtype{};
  const int64_t total = packed_numel(targets, dtype);
  if (total < 0) return false;
  at::Tensor flat = at::empty({total}, at::TensorOptions().dtype(dtype));
  auto views = copy_packed(targets, flat);
  for (size_t i = 0; i < targets.size(); ++i) *targets[i] = std::move(views[i]);
  s.flat = flat;
  if (opt) s.optimizer = std::move(opt);
  return true;
}

std::string send_snapshot(tensor_channel& channel, const stage_snapshot& s, int to, bool pack) {
  if (s.flat.defined()) return send_packed(channel, s, to);
  if (stage_snapshot packed = s; pack && pack_snapshot(packed)) return send_packed(channel, packed, to);
  std::ostringstream os;
  os << "v1 " << s.rank << ' ' << s.weights.size();
  for (const auto& [name, t] : s.weights) {
    os << ' ' << name;
    describe(os, channel.post(t, to));
  }
  describe_optimizer(os, s, [&](const at::Tensor& t) { describe(os, channel.post(t, to)); });
  return os.str();
}

std::string write_shared(segment_ring& ring, const stage_snapshot& s, std::string* why) {
  auto refuse = [&](std::string text) {
    if (why) *why = std::move(text);
    return std::string();
  };
  const auto tensors = packed_order(s.weights, s.optimizer.get());
  at::ScalarType dtype{};
  const int64_t total = packed_numel(tensors, dtype);
  if (total < 0) return refuse(tensors.empty() ? "nothing to copy" : "its tensors have more than one dtype");
  auto lease = ring.take(static_cast<size_t>(total) * c10::elementSize(dtype), why);
  if (!lease) return {};
  if (lease->path.find_first_of(" \t\n") != std::string::npos) {
    ring.give_back(*lease);
    return refuse("its path has a space: " + lease->path);
  }
  copy_packed(tensors, at::from_blob(lease->data, {total}, at::TensorOptions().dtype(dtype)));
  ring.publish(*lease);
  std::ostringstream os;
  os << "v3 " << lease->path << ' ' << lease->seq << ' ' << static_cast<int>(dtype) << ' ' << total;
  describe_shapes(os, s);
  return os.str();
}

void receive_snapshot_async(tensor_channel& channel, const std::string& described,
                            std::function<void(stage_snapshot)> done,
                            std::function<void(const std::string&)> failed, tensor_channel::buffer_for into) {
  auto a = std::make_shared<arrival>();
  parse(described, *a);
  a->done = std::move(done);
  a->failed = std::move(failed);
  if (!a->shared.empty()) {
    // v3: in this machine's shared memory already, nothing to receive.
    at::Tensor flat;
    try {
      flat = map_segment(a->shared, a->shared_seq, static_cast<at::ScalarType>(a->packed.dtype), a->packed.shape[0]);
    } catch (const transfer_error& e) {
      return a->failed(e.what());
    }
    cut(*a, std::move(flat));
    a->snap.optimizer = std::move(a->opt);
    return a->done(std::move(a->snap));
  }
  // One more than the receives: the last one to end cannot be a receive
  // that ends before the others have started.
  a->left = a->wanted.size() + (a->v2 ? 1 : 0) + 1;
  auto one_failed = [a](const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(a->mutex);
      if (a->failure.empty()) a->failure = why;
    }
    a->one_ended();
  };
  if (a->v2) {
    // The tensors are views of the one buffer: nothing is copied again.
    channel.fetch(
        a->packed,
        [a](at::Tensor flat) {
          cut(*a, std::move(flat));
          a->one_ended();
        },
        one_failed);
  }
  for (auto& [d, where] : a->wanted) {
    at::Tensor* target = where;
    channel.fetch(
        d,
        [a, target](at::Tensor t) {
          *target = std::move(t);
          a->one_ended();
        },
        one_failed, into);
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
