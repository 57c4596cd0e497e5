#include "runtime/files/checkpoint.hpp"
#include "runtime/util/fnv1a.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <unordered_map>

#include "runtime/config/config.hpp"
#include "runtime/files/file_io.hpp"
#include "runtime/model/optimizer_state.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe {

namespace fs = std::filesystem;

namespace {

const std::string model_prefix = "model.";
const std::string optimizer_prefix = "optimizer.";

/// The state fields of each optimizer, in optimizer_state_copy's order.
const std::vector<std::string>& fields_of(const std::string& type) {
  static const std::vector<std::string> adam = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  static const std::vector<std::string> sgd = {"momentum_buffer"};
  static const std::vector<std::string> none;
  return adam_family(type) ? adam : type == "sgd" ? sgd : none;
}

// FNV-1a over every entry's name and bytes, in file order.
int64_t checksum(const named_tensors& entries) {
  fnv1a h;
  auto mix = [&h](const void* p, size_t n) { h.bytes(p, n); };
  for (const auto& [name, t] : entries) {
    if (name == "meta.checksum") continue;
    mix(name.data(), name.size());
    auto c = t.contiguous();
    mix(c.data_ptr(), c.numel() * c.element_size());
  }
  return static_cast<int64_t>(h.digest());
}

// Named by the steps done: step_00000012.pt holds the state after 12
// updates (meta.step 11, the last update's 0-based index).
std::string file_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld.pt", static_cast<long long>(step + 1));
  return buf;
}

bool starts_with(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }

/// The number in a file named step_NNNNNNNN.pt; -1 for any other name.
int64_t step_of(const std::string& name) {
  const std::string prefix = "step_", suffix = ".pt";
  if (name.size() <= prefix.size() + suffix.size() || !starts_with(name, prefix) ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; }))
    return -1;
  return std::stoll(digits);
}


/// A one-element int64 entry's value.
int64_t scalar_of(const std::string& path, const std::string& name, const at::Tensor& t) {
  if (t.scalar_type() != at::kLong || t.numel() != 1)
    throw std::runtime_error(path + ": " + name + " is " + std::string(c10::toString(t.scalar_type())) + " " +
                             c10::str(t.sizes()) + ", not one int64");
  return t.item<int64_t>();
}

}  // namespace

std::vector<std::pair<int64_t, std::string>> checkpoint_files(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> files;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (int64_t s = step_of(e.path().filename().string()); s >= 0) files.emplace_back(s, e.path().string());
  if (ec) throw std::runtime_error(dir + ": cannot read the checkpoint directory: " + ec.message());
  std::sort(files.rbegin(), files.rend());
  return files;
}

std::string save_checkpoint(const std::string& dir, const checkpoint& c) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw io_error(dir + ": cannot create the checkpoint directory: " + ec.message());
  named_tensors entries;
  entries.emplace_back("meta.step", torch::tensor({c.step}, torch::kLong));
  auto type = torch::empty({static_cast<int64_t>(c.optimizer_type.size())}, torch::kUInt8);
  std::memcpy(type.data_ptr(), c.optimizer_type.data(), c.optimizer_type.size());
  entries.emplace_back("meta.optimizer", type);
  for (const auto& [name, t] : c.weights) entries.emplace_back(model_prefix + name, t.detach().cpu().contiguous());
  const auto& fields = fields_of(c.optimizer_type);
  for (const auto& part : c.optimizer) {
    for (size_t i = 0; i < part->names.size(); ++i) {
      const auto& state = part->tensors.at(i);
      if (state.empty()) continue;  // no step has touched it yet
      const std::string key = optimizer_prefix + part->names[i] + ".";
      if (adam_family(c.optimizer_type)) entries.emplace_back(key + "step", torch::tensor({part->steps.at(i)}, torch::kLong));
      for (size_t f = 0; f < fields.size() && f < state.size(); ++f)
        if (state[f].defined()) entries.emplace_back(key + fields[f], state[f].detach().cpu().contiguous());
    }
  }
  // A checkpoint is what a run resumes from: never one that holds a NaN or
  // an infinity (the newest finite one stays the latest).
  if (const std::string bad = first_nonfinite(entries); !bad.empty())
    throw std::runtime_error("'" + bad + "' holds a NaN or an infinity");
  entries.emplace_back("meta.checksum", torch::tensor({checksum(entries)}, torch::kLong));
  const std::string path = (fs::path(dir) / file_name(c.step)).string();
  save_tensors(path, entries);  // atomic: temporary file, then rename
  return path;
}

std::vector<std::string> prune_checkpoints(const std::string& dir, int64_t step, int keep_last) {
  std::vector<std::string> removed;
  if (keep_last <= 0) return removed;
  int kept = 0;
  for (const auto& [s, path] : checkpoint_files(dir)) {
    if (s > step + 1) continue;  // later than this run's newest: not this run's, left alone
    if (++kept <= keep_last) continue;
    std::error_code ec;
    if (fs::remove(path, ec)) removed.push_back(path);
  }
  return removed;
}

checkpoint load_checkpoint(const std::string& path) {
  named_tensors entries = load_tensors(path);
  checkpoint c;
  c.path = path;
  const at::Tensor* stored = nullptr;
  const at::Tensor* type = nullptr;
  for (const auto& [name, t] : entries) {
    if (name == "meta.checksum") stored = &t;
    if (name == "meta.step") c.step = scalar_of(path, name, t);
    if (name == "meta.optimizer") type = &t;
  }
  if (!stored || c.step < 0)
    throw std::runtime_error(path + ": not an actorpipe checkpoint (no meta.step / meta.checksum)");
  if (checksum(entries) != scalar_of(path, "meta.checksum", *stored))
    throw std::runtime_error(path + ": checksum mismatch, the file is corrupted");
  if (!type || type->scalar_type() != at::kByte || type->dim() != 1 || type->numel() > 16)
    throw std::runtime_error(path + ": no meta.optimizer; written by an older actorpipe, whose optimizer "
                                    "archives this one no longer reads");
  c.optimizer_type.assign(static_cast<const char*>(type->data_ptr()), static_cast<size_t>(type->numel()));
  const auto& fields = fields_of(c.optimizer_type);
  if (fields.empty())
    throw std::runtime_error(path + ": unknown optimizer type in meta.optimizer (adam, adamw or sgd)");

  std::unordered_map<std::string, size_t> weight_at;
  for (auto& [name, t] : entries)
    if (starts_with(name, model_prefix)) {
      if (!t.is_floating_point())
        throw std::runtime_error(path + ": " + quoted_input(name, "") + " is " + std::string(c10::toString(t.scalar_type())) +
                                 ", not a floating-point weight");
      weight_at[name.substr(model_prefix.size())] = c.weights.size();
      c.weights.emplace_back(name.substr(model_prefix.size()), t);
    }
  // optimizer.<param>.<field>: the parameter must be one of the weights, of
  // its shape; the state is gathered per parameter in weight order.
  auto state = std::make_shared<optimizer_state_copy>();
  std::vector<int> slot(c.weights.size(), -1);
  for (auto& [name, t] : entries) {
    if (!starts_with(name, optimizer_prefix)) continue;
    const size_t dot = name.rfind('.');
    const std::string param = name.substr(optimizer_prefix.size(), dot - optimizer_prefix.size());
    const std::string field = name.substr(dot + 1);
    auto w = weight_at.find(param);
    if (dot <= optimizer_prefix.size() || w == weight_at.end())
      throw std::runtime_error(path + ": " + quoted_input(name, "") + " is the state of no weight in the file");
    int& s = slot[w->second];
    if (s < 0) {
      s = static_cast<int>(state->names.size());
      state->names.push_back(param);
      state->steps.push_back(0);
      state->tensors.emplace_back(fields.size());
    }
    if (field == "step" && adam_family(c.optimizer_type)) {
      state->steps[s] = scalar_of(path, name, t);
      continue;
    }
    const auto f = std::find(fields.begin(), fields.end(), field);
    if (f == fields.end())
      throw std::runtime_error(path + ": " + quoted_input(name, "") + ": no such field in " + c.optimizer_type + "'s state");
    const at::Tensor& weight = c.weights[w->second].second;
    if (!t.sizes().equals(weight.sizes()) || t.scalar_type() != weight.scalar_type())
      throw std::runtime_error(path + ": " + quoted_input(name, "") + " is " + std::string(c10::toString(t.scalar_type())) + " " +
                               c10::str(t.sizes()) + ", its weight " +
                               std::string(c10::toString(weight.scalar_type())) + " " + c10::str(weight.sizes()));
    state->tensors[s][static_cast<size_t>(f - fields.begin())] = t;
  }
  for (size_t i = 0; i < state->names.size(); ++i)
    if (!state->tensors[i][0].defined())
      throw std::runtime_error(path + ": optimizer." + quoted_input(state->names[i], "") + " has no " + fields[0]);
  c.optimizer.push_back(std::move(state));
  return c;
}

checkpoint load_latest_checkpoint(const std::string& dir, std::vector<std::string>* problems) {
  const auto files = checkpoint_files(dir);
  std::vector<std::string> failed;
  for (const auto& [step, f] : files) {
    try {
      return load_checkpoint(f);
    } catch (const std::exception& e) {
      failed.push_back(e.what());
      if (problems) problems->push_back(e.what());
    }
  }
  std::string why;
  for (const auto& f : failed) why += "; " + f;
  throw std::runtime_error(dir + ": no loadable checkpoint (" + std::to_string(files.size()) + " step_*.pt files)" +
                           why);
}

std::shared_ptr<const optimizer_state_copy> optimizer_state_for(
    const checkpoint& c, const std::vector<std::pair<std::string, at::Tensor>>& params, const std::string& type) {
  if (c.optimizer_type != type)
    throw std::invalid_argument("the checkpoint holds " + c.optimizer_type + " state (" +
                                c10::Join(", ", fields_of(c.optimizer_type)) + " per parameter), but "
                                "train.optimizer.type is " + type);
  std::unordered_map<std::string, std::pair<const optimizer_state_copy*, size_t>> by_name;
  for (const auto& part : c.optimizer)
    for (size_t i = 0; i < part->names.size(); ++i) by_name[part->names[i]] = {part.get(), i};
  auto out = std::make_shared<optimizer_state_copy>();
  for (const auto& [name, p] : params) {
    out->names.push_back(name);
    out->steps.push_back(0);
    out->tensors.emplace_back();
    auto it = by_name.find(name);
    if (it == by_name.end()) continue;  // no step has touched it yet
    const auto& [part, i] = it->second;
    for (const auto& t : part->tensors.at(i))
      if (t.defined() && !t.sizes().equals(p.sizes()))
        throw std::invalid_argument("the optimizer state of " + name + " has shape " + c10::str(t.sizes()) +
                                    ", the parameter " + c10::str(p.sizes()));
    out->steps.back() = part->steps.at(i);
    out->tensors.back() = part->tensors.at(i);
  }
  return out;
}

}  // namespace actorpipe
