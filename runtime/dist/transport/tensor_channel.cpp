#include "runtime/dist/transport/tensor_channel.hpp"

#include <ATen/ATen.h>

#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace actorpipe {

namespace {

// A thread that runs queued jobs in order until it is stopped.
class job_thread {
public:
  job_thread() : thread_([this] { run(); }) {}
  ~job_thread() {
    {
      std::lock_guard<std::mutex> lock(m_);
      stop_ = true;
    }
    cv_.notify_one();
    thread_.join();
  }
  void push(std::function<void()> job) {
    {
      std::lock_guard<std::mutex> lock(m_);
      jobs_.push_back(std::move(job));
    }
    cv_.notify_one();
  }

private:
  void run() {
    for (;;) {
      std::function<void()> job;
      {
        std::unique_lock<std::mutex> lock(m_);
        cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopped, and nothing left
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      job();
    }
  }

  std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

class tensor_channel::impl {
public:
  explicit impl(p2p_group g) : group(std::move(g)) {}

  p2p_group group;
  std::mutex m;
  std::map<int, uint32_t> next_tag;  // by destination
  std::string send_failure;
  // Declared last: destroyed first, so their threads finish what is queued
  // while the group still exists.
  std::map<int, std::unique_ptr<job_thread>> receivers;  // by source
  std::unique_ptr<job_thread> reaper = std::make_unique<job_thread>();

  job_thread& receiver(int from) {
    std::lock_guard<std::mutex> lock(m);
    auto& t = receivers[from];
    if (!t) t = std::make_unique<job_thread>();
    return *t;
  }
};

tensor_channel::tensor_channel(p2p_group group) : impl_(std::make_unique<impl>(std::move(group))) {}

tensor_channel::~tensor_channel() {
  // Receivers first (they may wait for bytes that never come: bounded by the
  // group's timeout), then the sends.
  impl_->receivers.clear();
  impl_->reaper.reset();
}

int tensor_channel::rank() const { return impl_->group.rank(); }

remote_tensor tensor_channel::post(const at::Tensor& t, int to) {
  at::Tensor cpu = t.device().is_cpu() ? t.contiguous() : t.to(at::kCPU).contiguous();
  remote_tensor d;
  d.from = impl_->group.rank();
  d.dtype = static_cast<int8_t>(cpu.scalar_type());
  d.shape = cpu.sizes().vec();
  {
    std::lock_guard<std::mutex> lock(impl_->m);
    uint32_t& n = impl_->next_tag[to];
    d.tag = n;
    n = n == max_transfer_tag ? 0 : n + 1;
  }
  auto handle = std::make_shared<transfer_handle>(impl_->group.send(cpu, to, d.tag));
  impl* self = impl_.get();
  impl_->reaper->push([self, handle] {
    try {
      handle->wait();
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(self->m);
      if (self->send_failure.empty()) self->send_failure = e.what();
    }
  });
  return d;
}

void tensor_channel::wait_sent() {
  // The reaper runs its jobs in order and drops each before the next.
  auto reached = std::make_shared<std::promise<void>>();
  auto future = reached->get_future();
  impl_->reaper->push([reached] { reached->set_value(); });
  future.wait();
}

void tensor_channel::fetch(const remote_tensor& d, std::function<void(at::Tensor)> done,
                           std::function<void(const std::string&)> failed, buffer_for into) {
  impl* self = impl_.get();
  self->receiver(d.from).push([self, d, done = std::move(done), failed = std::move(failed), into = std::move(into)] {
    at::Tensor buffer;
    try {
      const auto dtype = static_cast<at::ScalarType>(d.dtype);
      buffer = into ? into(d.shape, dtype) : at::empty(d.shape, at::TensorOptions().dtype(dtype));
      self->group.recv_into(buffer, d.from, d.tag).wait();
    } catch (const std::exception& e) {
      failed(e.what());
      return;
    }
    done(std::move(buffer));
  });
}

std::string tensor_channel::send_failure() const {
  std::lock_guard<std::mutex> lock(impl_->m);
  return impl_->send_failure;
}

}  // namespace actorpipe
