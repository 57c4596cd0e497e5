#include "actors/stage_link.hpp"

#include <caf/all.hpp>
#include <torch/torch.h>

#include <cmath>
#include <optional>

#include "messages/atoms.hpp"
#include "runtime/model/device_stream.hpp"
#include "runtime/dist/transport/tensor_channel.hpp"

namespace actorpipe {

namespace {

class local_link final : public stage_link {
public:
  local_link(caf::event_based_actor* self, link_setup setup) : self_(self), s_(std::move(setup)) {
    if (s_.epoch > 0) stale_from_ = s_.faults.stale_copy_from();
  }

  void wire(std::vector<caf::actor> ranks) override { ranks_ = std::move(ranks); }

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

  bool fetch(activation_msg& m) override { return fetch_far(m, fwd_atom::value); }
  bool fetch(gradient_msg& m) override { return fetch_far(m, bwd_atom::value); }

  uint32_t epoch() const override { return s_.epoch; }

private:
  bool remote(int to_rank) const {
    return !s_.process_of.empty() && s_.process_of[static_cast<size_t>(to_rank)] != s_.process;
  }

  // The tensor comes over the channel; then the message, whole, comes back
  // to this stage. A transfer that fails takes the stage down with why.
  template <class Msg, class Atom>
  bool fetch_far(Msg& m, Atom atom) {
    if (!m.far.pending()) return false;
    if (!s_.channel) throw std::logic_error("a message from another process, but this stage has no tensor channel");
    auto me = caf::actor_cast<caf::actor>(self_);
    std::string device = s_.device;
    Msg msg = std::move(m);
    const remote_tensor far = msg.far;
    msg.far = remote_tensor{};
    s_.channel->fetch(
        far,
        [me, device, msg = std::move(msg), atom](at::Tensor t) mutable {
          if (device != "cpu") t = t.to(torch::Device(device));
          tensor_of(msg) = std::move(t);
          caf::anon_send(me, atom, std::move(msg));
        },
        [me](const std::string& why) {
          // As a link's exit would: the stage goes down with why.
          caf::anon_send(me, caf::exit_msg{caf::actor_addr{}, caf::make_error(caf::sec::runtime_error, "stage: " + why)});
        });
    return true;
  }

  static at::Tensor& tensor_of(activation_msg& m) { return m.x; }
  static at::Tensor& tensor_of(gradient_msg& m) { return m.g; }

  // To rank `to_rank`: a stage of this process gets the message (and the
  // tensor's handle); one in another process gets the message without the
  // tensor, whose bytes go over the channel. Returns what the message
  // carries in the tensor's place (nothing when it carries the tensor).
  template <class Atom, class Msg>
  remote_tensor post(int to_rank, Atom atom, Msg msg, std::chrono::microseconds delay = std::chrono::microseconds(0)) {
    if (remote(to_rank)) {
      at::Tensor& t = tensor_of(msg);
      msg.far = s_.channel->post(t, s_.process_of[static_cast<size_t>(to_rank)]);
      t = at::Tensor();
      msg.ready = nullptr;
    }
    remote_tensor far = msg.far;
    if (delay.count() > 0)
      self_->delayed_send(ranks_[to_rank], delay, atom, std::move(msg));
    else
      self_->send(ranks_[to_rank], atom, std::move(msg));
    return far;
  }

  int slot(int chunk, int mb) const { return chunk * s_.microbatches + mb; }

  // Addressed to virtual stage k: its chunk there, this link's epoch, the
  // tensor on its device and, on CUDA, the mark after which it is written.
  void prepare(msg_header& h, int k, at::Tensor& t, device_mark_ptr& ready) {
    h.epoch = s_.epoch;
    h.chunk = s_.plc.chunk_of(k);
    if (remote(s_.plc.rank_of(k))) return;  // the channel copies it to the host
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
    const auto verdict = s_.faults.on_send(h.step, op_id{kind, h.mb, h.chunk}, to_rank);
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
    const remote_tensor far =
        post(to_rank, atom, std::move(msg), std::chrono::microseconds(static_cast<int64_t>(delay_ms * 1000)));
    if (stale) send_stale(to_rank, atom, std::move(*stale), far);
  }

  // A stale_message fault: `msg` again, under the attempt before's epoch,
  // as a late message of that attempt. Across processes its bytes went
  // over that attempt's channel, whose tags count from 0 as this one's
  // do: it names the transfer just posted for the real message (`far`).
  // A receiver that fetched it before looking at its epoch would take
  // those bytes, and the real message would wait for them forever.
  template <class Atom, class Msg>
  void send_stale(int to_rank, Atom atom, Msg msg, const remote_tensor& far) {
    msg.h.epoch = s_.epoch - 1;
    if (far.pending()) {
      tensor_of(msg) = at::Tensor();
      msg.far = far;
      msg.ready = nullptr;
    }
    self_->send(ranks_[to_rank], atom, std::move(msg));
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

std::unique_ptr<stage_link> make_local_link(caf::event_based_actor* self, link_setup setup) {
  return std::make_unique<local_link>(self, std::move(setup));
}

}  // namespace actorpipe
