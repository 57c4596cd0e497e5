#include "runtime/dist/coord/run_record.hpp"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace actorpipe {

namespace {
using clock_type = std::chrono::steady_clock;
using json = nlohmann::json;
}  // namespace

std::string run_key(const std::string& run, const std::string& what) { return "/actorpipe/runs/" + run + "/" + what; }

std::string run_held_line(const std::string& run, const std::string& holder, const std::string& members) {
  return "run '" + run + "' is held by a live coordinator (" + holder + ") in etcd at " + members +
         ": give this run another --run-id, or wait until that one ends";
}

run_record::run_record(const std::string& url, const std::string& run, const std::string& holder, int64_t ttl_s,
                       std::function<void(const std::string&)> lost, std::chrono::milliseconds decided_every)
    : client_(parse_etcd_url(url)),
      run_(run),
      holder_(holder),
      ttl_s_(ttl_s < 1 ? 1 : ttl_s),
      lost_(std::move(lost)),
      decided_every_(decided_every) {
  granted_at_ = clock_type::now();
  lease_ = client_.grant(ttl_s_);
  std::string other;
  if (!client_.create(run_key(run_, "coordinator"), holder_, lease_, &other)) {
    try {
      client_.revoke(lease_);
    } catch (const etcd_error&) {
    }
    throw run_taken(run_held_line(run_, other, url.rfind("etcd://", 0) == 0 ? url.substr(7) : url));
  }
  thread_ = std::thread([this] { loop(); });
}

run_record::~run_record() { close(); }

void run_record::close() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void run_record::close_out(std::string text) {
  const auto bound = clock_type::now() + std::chrono::milliseconds(ttl_s_ * 1000 + 3000);
  std::string why;
  for (;;) {
    try {
      // Only while etcd keeps the lease: once it expired a standby may
      // hold the run, and its record is not this coordinator's to write.
      if (client_.keep_alive(lease_) <= 0) {
        why = "its lease " + std::to_string(lease_) + " expired";
        break;
      }
      if (!text.empty()) client_.put(run_key(run_, "record"), text);
      text.clear();
      client_.revoke(lease_);
      return;
    } catch (const std::exception& e) {
      why = e.what();
    }
    if (clock_type::now() + std::chrono::milliseconds(100) >= bound) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (!text.empty())
    std::fprintf(stderr, "actorpipe: note: the run's last record (%s) was not written to etcd: %s\n", text.c_str(),
                 why.c_str());
}

void run_record::generation(uint32_t number, const std::string& members, const std::string& placement,
                            const std::string& parts, int64_t resumed_after, const std::string& takeover) {
  json g = {{"generation", number}, {"members", members}, {"placement", placement}, {"parts", parts},
            {"resumed_after", resumed_after}};
  if (!takeover.empty()) g["takeover"] = takeover;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_ = g.dump();
    dirty_ = urgent_ = true;
  }
  wake_.notify_all();
}

void run_record::decided(int64_t step) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (step <= decided_) return;
    decided_ = step;
    dirty_ = true;
  }
  wake_.notify_all();
}

void run_record::finish(int code) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
    exit_code_ = code;
    dirty_ = urgent_ = true;
  }
  wake_.notify_all();
}

void run_record::loop() {
  const auto renew_every = std::chrono::milliseconds(ttl_s_ * 1000 / 3);
  // When the last renewal that succeeded was sent: etcd keeps the lease
  // at least a TTL from then, and this coordinator stops commanding at
  // three quarters of it, before any standby can have won.
  auto renewed = granted_at_;
  auto next_renew = clock_type::now() + renew_every;
  bool said = false;
  auto next_write = clock_type::now();
  for (;;) {
    std::string text;
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // A decided step waits for next_write; a generation or the end not.
      const auto ready = [this, &next_write] {
        return stop_ || urgent_ || (dirty_ && clock_type::now() >= next_write);
      };
      wake_.wait_until(lock, dirty_ ? std::min(next_renew, next_write) : next_renew, ready);
      stopping = stop_;
      if (ready() && dirty_) {
        next_write = clock_type::now() + decided_every_;
        urgent_ = false;
        json r = generation_.empty() ? json::object() : json::parse(generation_);
        r["run"] = run_;
        r["coordinator"] = holder_;
        r["decided"] = decided_;
        r["finished"] = finished_;
        if (finished_) r["exit_code"] = exit_code_;
        text = r.dump();
        dirty_ = false;
      }
    }
    if (stopping) {
      close_out(std::move(text));
      return;
    }
    try {
      if (!text.empty()) {
        client_.put(run_key(run_, "record"), text);
      }
      if (clock_type::now() >= next_renew) {
        const auto asked = clock_type::now();
        if (client_.keep_alive(lease_) <= 0) throw etcd_error("its lease " + std::to_string(lease_) + " expired");
        renewed = asked;
        next_renew = clock_type::now() + renew_every;
      }
    } catch (const std::exception& e) {
      if (!text.empty()) {
        std::lock_guard<std::mutex> lock(mutex_);
        dirty_ = true;  // written on the next try
      }
      next_renew = clock_type::now() + std::chrono::milliseconds(200);
      if (!said && clock_type::now() - renewed > std::chrono::milliseconds(ttl_s_ * 750)) {
        said = true;
        if (lost_) lost_(e.what());
      }
    }
  }
}

}  // namespace actorpipe
