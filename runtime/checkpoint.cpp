#include "runtime/checkpoint.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>

namespace actorpipe {

namespace fs = std::filesystem;

namespace {

const char* const model_prefix = "model.";
const char* const optimizer_prefix = "optimizer.";

// FNV-1a over every entry's name and bytes, in file order.
int64_t checksum(const named_tensors& entries) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](const void* p, size_t n) {
    const auto* b = static_cast<const unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  for (const auto& [name, t] : entries) {
    if (name == "meta.checksum") continue;
    mix(name.data(), name.size());
    auto c = t.contiguous();
    mix(c.data_ptr(), c.numel() * c.element_size());
  }
  return static_cast<int64_t>(h);
}

std::string file_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld.pt", static_cast<long long>(step));
  return buf;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

}  // namespace

std::string save_checkpoint(const std::string& dir, const checkpoint& c) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir + ": cannot create the checkpoint directory: " + ec.message());
  named_tensors entries;
  entries.emplace_back("meta.step", torch::tensor({c.step}, torch::kLong));
  for (const auto& [name, t] : c.weights) entries.emplace_back(model_prefix + name, t.detach().cpu().contiguous());
  for (size_t r = 0; r < c.optimizer.size(); ++r) {
    const auto& bytes = c.optimizer[r];
    auto blob = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
    std::memcpy(blob.data_ptr(), bytes.data(), bytes.size());
    entries.emplace_back(optimizer_prefix + std::to_string(r), blob);
  }
  entries.emplace_back("meta.checksum", torch::tensor({checksum(entries)}, torch::kLong));
  const std::string path = (fs::path(dir) / file_name(c.step)).string();
  save_tensors(path, entries);  // atomic: temporary file, then rename
  return path;
}

checkpoint load_checkpoint(const std::string& path) {
  named_tensors entries = load_tensors(path);
  checkpoint c;
  int64_t stored = 0;
  bool has_sum = false, has_step = false;
  for (const auto& [name, t] : entries) {
    if (name == "meta.checksum") {
      stored = t.item<int64_t>();
      has_sum = true;
    } else if (name == "meta.step") {
      c.step = t.item<int64_t>();
      has_step = true;
    }
  }
  if (!has_sum || !has_step) throw std::runtime_error(path + ": not an actorpipe checkpoint (no meta.step / meta.checksum)");
  if (checksum(entries) != stored) throw std::runtime_error(path + ": checksum mismatch, the file is corrupted");
  for (auto& [name, t] : entries) {
    if (starts_with(name, model_prefix)) {
      c.weights.emplace_back(name.substr(std::string(model_prefix).size()), t);
    } else if (starts_with(name, optimizer_prefix)) {
      const size_t r = std::stoul(name.substr(std::string(optimizer_prefix).size()));
      if (c.optimizer.size() <= r) c.optimizer.resize(r + 1);
      c.optimizer[r].assign(static_cast<const char*>(t.data_ptr()), static_cast<size_t>(t.numel()));
    }
  }
  return c;
}

checkpoint load_latest_checkpoint(const std::string& dir, std::vector<std::string>* problems) {
  std::vector<std::string> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (starts_with(name, "step_") && e.path().extension() == ".pt") files.push_back(e.path().string());
  }
  if (ec) throw std::runtime_error(dir + ": cannot read the checkpoint directory: " + ec.message());
  std::sort(files.rbegin(), files.rend());  // newest step first
  for (const auto& f : files) {
    try {
      return load_checkpoint(f);
    } catch (const std::exception& e) {
      if (problems) problems->push_back(e.what());
    }
  }
  throw std::runtime_error(dir + ": no loadable checkpoint (" + std::to_string(files.size()) + " step_*.pt files)");
}

}  // namespace actorpipe
