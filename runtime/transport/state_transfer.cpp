#include "runtime/transport/state_transfer.hpp"

#include <ATen/ATen.h>

#include <future>
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

// The receives of one snapshot: started together, waited for together.
class receiver {
public:
  explicit receiver(tensor_channel& ch) : ch_(ch) {}
  /// Starts receiving `d`; `where` gets it in wait().
  void fetch(const remote_tensor& d, at::Tensor* where) {
    auto slot = std::make_shared<std::promise<at::Tensor>>();
    pending_.push_back(slot->get_future());
    targets_.push_back(where);
    ch_.fetch(
        d, [slot](at::Tensor t) { slot->set_value(std::move(t)); },
        [slot](const std::string& why) { slot->set_exception(std::make_exception_ptr(transfer_error(why))); });
  }
  void wait() {
    for (size_t i = 0; i < pending_.size(); ++i) *targets_[i] = pending_[i].get();
  }

private:
  tensor_channel& ch_;
  std::vector<std::future<at::Tensor>> pending_;
  std::vector<at::Tensor*> targets_;
};

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

stage_snapshot receive_snapshot(tensor_channel& channel, const std::string& described) {
  std::istringstream is(described);
  std::string version;
  stage_snapshot s;
  size_t weights = 0;
  if (!(is >> version >> s.rank >> weights) || version != "v1" || weights > 100000)
    throw transfer_error("a state transfer's description does not parse: '" + described.substr(0, 80) + "'");
  receiver r(channel);
  s.weights.resize(weights);
  for (auto& [name, t] : s.weights) {
    if (!(is >> name)) throw transfer_error("a state transfer's description does not parse");
    r.fetch(read_description(is), &t);
  }
  auto opt = std::make_shared<optimizer_state_copy>();
  size_t params = 0;
  if (!(is >> params) || params > 100000) throw transfer_error("a state transfer's description does not parse");
  opt->names.resize(params);
  opt->steps.resize(params);
  opt->tensors.resize(params);
  for (size_t i = 0; i < params; ++i) {
    size_t fields = 0;
    if (!(is >> opt->names[i] >> opt->steps[i] >> fields) || fields > 8)
      throw transfer_error("a state transfer's description does not parse");
    opt->tensors[i].resize(fields);
    for (auto& t : opt->tensors[i]) {
      std::string mark;
      if (!(is >> mark) || (mark != "-" && mark != "+"))
        throw transfer_error("a state transfer's description does not parse");
      if (mark == "-") continue;
      r.fetch(read_description(is), &t);
    }
  }
  r.wait();
  s.optimizer = std::move(opt);
  return s;
}

}  // namespace actorpipe
