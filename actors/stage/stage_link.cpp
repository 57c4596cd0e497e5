#include "actors/stage/stage_link.hpp"

#include <caf/all.hpp>
#include <torch/torch.h>

#include <cmath>
#include <optional>

#include "messages/atoms.hpp"
#include "runtime/model/device_stream.hpp"
#include "runtime/dist/transport/data_plane.hpp"

namespace actorpipe {

namespace {

using std::chrono::microseconds;

// The stage `me` goes down with `why`, as a link's exit would take it.
void fail_stage(const caf::actor_addr& me, const std::string& why) {
  if (auto a = caf::actor_cast<caf::actor>(me))
    caf::anon_send(a, caf::exit_msg{caf::actor_addr{}, caf::make_error(caf::sec::runtime_error, why)});
}

// What the plane's reader thread does with a record for this stage: the
// width checked, the tensor moved to the stage's device, the message put
// in the stage's mailbox.
struct record_taker {
  caf::actor_addr me;
  int rank = 0;
  std::string device;
  std::vector<int64_t> in_width, out_width;

  void operator()(op_record r) const {
    auto stage = caf::actor_cast<caf::actor>(me);
    if (!stage) return;
    const bool fwd = r.kind == 0;
    const std::string wrong = record_mismatch(r, rank, in_width, out_width);
    if (!wrong.empty()) {
      fail_stage(me, wrong);
      return;
    }
    at::Tensor t = r.tensors.empty() ? at::Tensor() : r.tensors[0];
    if (device != "cpu" && t.defined()) t = t.to(torch::Device(device));
    const msg_header h{r.epoch, r.step, r.mb, r.chunk, r.round};
    if (fwd)
      caf::anon_send(stage, fwd_atom::value, activation_msg{h, std::move(t), r.tensors.size() > 1 ? r.tensors[1] : at::Tensor(), nullptr});
    else
      caf::anon_send(stage, bwd_atom::value, gradient_msg{h, std::move(t), nullptr});
  }
};

class local_link final : public stage_link {
public:
  local_link(caf::event_based_actor* self, link_setup setup) : self_(self), s_(std::move(setup)) {
    if (s_.epoch > 0) stale_from_ = s_.faults.stale_copy_from();
  }

  void wire(std::vector<caf::actor> ranks) override {
    ranks_ = std::move(ranks);
    if (!s_.plane) return;
    const caf::actor_addr me = self_->address();
    s_.plane->attach(plane_slot(s_.rank),
                     {record_inbox(me, s_.rank, s_.device, s_.in_width, s_.out_width),
                      [me](const std::string& why) { fail_stage(me, "stage: " + why); }});
  }

  void begin_step() override {
    const size_t slots = static_cast<size_t>(s_.microbatches) * s_.chunks;
    sent_fwd_.assign(slots, activation_msg{});
    sent_bwd_.assign(slots, gradient_msg{});
  }

  void send_activation(int chunk, activation_msg msg) override {
    const int k = s_.plc.virtual_stage(s_.rank, chunk) + 1;
    prepare(msg.h, k, msg.x, msg.ready);
    sent_fwd_[slot(chunk, msg.h.mb)] = msg;
    deliver(k, fwd_atom::value, std::move(msg));
  }

  void send_gradient(int chunk, gradient_msg msg) override {
    const int k = s_.plc.virtual_stage(s_.rank, chunk) - 1;
    prepare(msg.h, k, msg.g, msg.ready);
    sent_bwd_[slot(chunk, msg.h.mb)] = msg;
    deliver(k, bwd_atom::value, std::move(msg));
  }

  void send_eval(int chunk, eval_msg msg) override {
    const int k = s_.plc.virtual_stage(s_.rank, chunk) + 1;
    const int r = s_.plc.rank_of(k);
    msg.chunk = s_.plc.chunk_of(k);
    if (remote(r)) {
      // Evaluation is rare: its batch goes through CAF as one byte blob.
      msg.x = msg.x.to(torch::kCPU);
    } else {
      msg.x = msg.x.to(torch::Device(s_.devices[r]));
      if (s_.queue) msg.ready = s_.queue->mark(msg.x);
    }
    self_->send(ranks_[r], eval_atom::value, std::move(msg));
  }

  void ask_resend(op_kind kind, int chunk, int64_t step, int mb) override {
    const bool fwd = kind == op_kind::F;
    const int k = s_.plc.virtual_stage(s_.rank, chunk) + (fwd ? -1 : 1);
    self_->send(ranks_[s_.plc.rank_of(k)], resend_atom::value, int32_t{fwd ? 0 : 1}, step, int32_t{mb},
                int32_t{s_.plc.chunk_of(k)});
    ++s_.stats->resend_requests;
  }

  void resend(op_kind kind, int chunk, int64_t step, int mb) override {
    if (step != *s_.step || mb < 0 || mb >= s_.microbatches || chunk < 0 || chunk >= s_.chunks) return;
    const int k = s_.plc.virtual_stage(s_.rank, chunk);
    if (kind == op_kind::F && sent_fwd_[slot(chunk, mb)].x.defined()) {
      post(s_.plc.rank_of(k + 1), fwd_atom::value, sent_fwd_[slot(chunk, mb)]);
      ++s_.stats->retransmits;
    } else if (kind == op_kind::B && sent_bwd_[slot(chunk, mb)].g.defined()) {
      post(s_.plc.rank_of(k - 1), bwd_atom::value, sent_bwd_[slot(chunk, mb)]);
      ++s_.stats->retransmits;
    }
  }

  uint32_t epoch() const override { return s_.epoch; }

private:
  // The data plane's name for stage `rank` of this replica.
  int plane_slot(int rank) const { return s_.replica * s_.plc.stages + rank; }

  bool remote(int to_rank) const {
    return !s_.process_of.empty() && s_.process_of[static_cast<size_t>(to_rank)] != s_.process;
  }

  // To rank `to_rank`: a stage of this process gets the message (and the
  // tensor's handle); one in another process gets it as a record on the
  // data plane, no earlier than `delay` from now.
  template <class Atom, class Msg>
  void post(int to_rank, Atom atom, Msg msg, microseconds delay = microseconds(0)) {
    if (remote(to_rank)) {
      const auto not_before = delay.count() > 0 ? data_plane::clock::now() + delay : data_plane::clock::time_point{};
      s_.plane->post(s_.process_of[static_cast<size_t>(to_rank)], record_of(to_rank, msg), not_before);
    } else if (delay.count() > 0) {
      self_->delayed_send(ranks_[to_rank], delay, atom, std::move(msg));
    } else {
      self_->send(ranks_[to_rank], atom, std::move(msg));
    }
  }

  op_record record_of(int to_rank, const activation_msg& m) const { return record(0, to_rank, m.h, {m.x, m.y}); }
  op_record record_of(int to_rank, const gradient_msg& m) const { return record(1, to_rank, m.h, {m.g}); }
  op_record record(int kind, int to_rank, const msg_header& h, std::vector<at::Tensor> tensors) const {
    op_record r;
    r.kind = kind;
    r.to = plane_slot(to_rank);
    r.from = s_.rank;
    r.epoch = h.epoch;
    r.step = h.step;
    r.mb = h.mb;
    r.chunk = h.chunk;
    r.round = h.round;
    r.tensors = std::move(tensors);
    return r;
  }

  int slot(int chunk, int mb) const { return chunk * s_.microbatches + mb; }

  // Addressed to virtual stage k: its chunk there, this link's epoch, the
  // tensor on its device and, on CUDA, the mark after which it is written.
  void prepare(msg_header& h, int k, at::Tensor& t, device_mark_ptr& ready) {
    h.epoch = s_.epoch;
    h.chunk = s_.plc.chunk_of(k);
    if (remote(s_.plc.rank_of(k))) return;  // the record copies it to the host
    const std::string& to_device = s_.devices[s_.plc.rank_of(k)];
    if (to_device != s_.device) t = t.to(torch::Device(to_device));
    if (s_.queue) ready = s_.queue->mark(t);
  }

  // Through the injected faults: a message picked (by faults.seed and its
  // ids, never by timing) is dropped, sent twice, or held back. Receivers
  // drop the duplicate; the delay only moves time.
  template <class Atom, class Msg>
  void deliver(int k, Atom atom, Msg msg) {
    const int to_rank = s_.plc.rank_of(k);
    const auto& h = msg.h;
    const op_kind kind = std::is_same<Atom, fwd_atom>::value ? op_kind::F : op_kind::B;
    // Under async a fault names a step and a microbatch of it, as the
    // stream's microbatch h.mb is.
    const int per = s_.step_microbatches;
    const auto verdict = per > 0 ? s_.faults.on_send(h.mb / per, op_id{kind, h.mb % per, h.chunk}, to_rank)
                                 : s_.faults.on_send(h.step, op_id{kind, h.mb, h.chunk}, to_rank);
    if (verdict.drop) {
      ++s_.stats->injected_drops;
      return;
    }
    double delay_ms = verdict.delay_ms;
    if (s_.lockstep && delay_ms > 0) {
      // Lock-step: a round stands for one op, so the delay is counted in
      // rounds (ms rounded up): the receiver sees the message that much later.
      msg.h.round += static_cast<int64_t>(std::ceil(delay_ms));
      ++s_.stats->injected_delays;
      delay_ms = 0;
    }
    if (verdict.twice) {
      ++s_.stats->injected_duplicates;
      post(to_rank, atom, msg);
    }
    std::optional<Msg> stale;
    if (stale_from_ && h.step >= *stale_from_) {
      stale = msg;
      stale_from_.reset();
    }
    if (delay_ms > 0) ++s_.stats->injected_delays;
    post(to_rank, atom, std::move(msg), microseconds(static_cast<int64_t>(delay_ms * 1000)));
    if (stale) {
      // A stale_message fault: `msg` again, under the attempt before's
      // epoch, as a late message of that attempt; the receiver drops it.
      stale->h.epoch = s_.epoch - 1;
      post(to_rank, atom, std::move(*stale));
    }
  }

  caf::event_based_actor* self_;
  link_setup s_;
  std::vector<caf::actor> ranks_;
  // What this stage sent this step, by its own slot, to send again when a
  // receiver reports it missing (a dropped message).
  std::vector<activation_msg> sent_fwd_;
  std::vector<gradient_msg> sent_bwd_;
  // A stale_message fault, in an attempt after the first: from which step
  // on; once fired, nothing (it fires once per attempt).
  std::optional<int64_t> stale_from_;
};

}  // namespace

std::string record_mismatch(const op_record& r, int to_stage, const std::vector<int64_t>& in_width,
                            const std::vector<int64_t>& out_width) {
  const bool fwd = r.kind == 0;
  const auto& widths = fwd ? in_width : out_width;
  const int64_t want =
      r.chunk >= 0 && static_cast<size_t>(r.chunk) < widths.size() ? widths[static_cast<size_t>(r.chunk)] : 0;
  const at::Tensor t = r.tensors.empty() ? at::Tensor() : r.tensors[0];
  if (want <= 0 || !t.defined() || t.numel() == 0 || t.size(-1) == want) return "";
  auto got = t.sizes().vec();
  auto expected = got;
  expected.back() = want;
  return shape_mismatch(fwd ? "an activation" : "a gradient", r.from, to_stage, expected, got);
}

std::function<void(op_record)> record_inbox(const caf::actor_addr& stage, int rank, std::string device,
                                            std::vector<int64_t> in_width, std::vector<int64_t> out_width) {
  return record_taker{stage, rank, std::move(device), std::move(in_width), std::move(out_width)};
}

std::unique_ptr<stage_link> make_local_link(caf::event_based_actor* self, link_setup setup) {
  return std::make_unique<local_link>(self, std::move(setup));
}

}  // namespace actorpipe
