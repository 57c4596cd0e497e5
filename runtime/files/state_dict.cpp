// torch.save files: a zip archive holding `data.pkl` (a protocol-2 pickle)
// and one raw record per storage under `data/<key>`.
//
// We read the pickle ourselves instead of using torch::pickle_load, because
// LibTorch 1.13 turns collections.OrderedDict (every model.state_dict()) into
// None. The unpickler knows only what torch.save emits for dicts of tensors;
// anything else is reported, never guessed at.
#include "runtime/files/state_dict.hpp"

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/serialize.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string_view>
#include <sys/stat.h>
#include <unordered_map>

#include "runtime/files/file_io.hpp"
#include "runtime/files/unpickler.hpp"
#include "runtime/files/zip_check.hpp"

namespace actorpipe {

namespace {

using pickle::kind_name;
using pickle::pvalue;
using pickle::pvalue_ptr;
using pickle::unsupported;

/// Flattens nested dicts to dotted names, like a state_dict; skips non-tensors
/// (a checkpoint's step counter, say). A key set twice keeps its first
/// position and its last value, as in Python. Each dict is read once: one
/// that appears under two names (or inside itself) is refused, so that a
/// few shared dicts cannot make 2^30 paths.
class collector {
public:
  collector(const std::string& path, named_tensors& out) : path_(path), out_(out) {}

  void collect(const std::string& prefix, const pvalue& d, int depth = 0) {
    if (depth > 32) fail("dicts nested deeper than 32");
    if (auto [it, fresh] = seen_.emplace(&d, prefix); !fresh)
      fail("the same dict is stored under '" + it->second + "' and '" + prefix + "'");
    std::vector<std::pair<const std::string*, pvalue_ptr>> entries;
    std::unordered_map<std::string_view, size_t> at;
    for (const auto& [k, v] : d.entries) {
      if (k->k != pvalue::kind::string) fail(std::string("dict key of type ") + kind_name(k->k));
      auto [it, fresh] = at.emplace(k->s, entries.size());
      if (fresh)
        entries.emplace_back(&k->s, v);
      else
        entries[it->second].second = v;
    }
    for (const auto& [k, v] : entries) {
      const std::string name = prefix.empty() ? *k : prefix + "." + *k;
      if (v->k == pvalue::kind::tensor)
        out_.emplace_back(name, v->t);
      else if (v->k == pvalue::kind::dict)
        collect(name, *v, depth + 1);
    }
  }

private:
  [[noreturn]] void fail(const std::string& what) const { unsupported(path_, what); }

  const std::string& path_;
  named_tensors& out_;
  std::unordered_map<const pvalue*, std::string> seen_;
};

}  // namespace

named_tensors load_tensors(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw std::runtime_error(path + ": " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) throw std::runtime_error(path + ": not a regular file");
  // Every record then lies inside the file: what the reader allocates for
  // them is bounded by the file's size.
  const uint64_t file_size = check_stored_zip(path);
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader;
  at::DataPtr pkl;
  size_t pkl_size = 0;
  try {
    reader = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path);
    std::tie(pkl, pkl_size) = reader->getRecord("data.pkl");
  } catch (const c10::Error& e) {
    // c10 messages carry a C++ backtrace; the first line is the useful part.
    std::string msg = e.what_without_backtrace();
    msg = msg.substr(0, msg.find('\n'));
    throw std::runtime_error(path + ": not a torch.save zip archive (" + msg + ")");
  }
  // The tensors may take what their storages take, and twice as much again
  // for views that share a storage (tied weights), but no more: a view
  // that repeats one stored float 3.6e9 times is refused before the copy.
  const uint64_t budget = 4 * file_size + (uint64_t(1) << 20);
  pickle::pvalue_arena arena;
  pickle::pvalue* root = nullptr;
  try {
    root = pickle::unpickle(path, *reader, static_cast<const char*>(pkl.get()), pkl_size, budget, arena);
  } catch (const c10::Error& e) {
    std::string msg = e.what_without_backtrace();
    throw std::runtime_error(path + ": " + msg.substr(0, msg.find('\n')));
  }
  if (root->k != pvalue::kind::dict)
    throw std::runtime_error(path + ": unsupported pickle content: top level is a " +
                             std::string(kind_name(root->k)) + ", not a dict");
  named_tensors out;
  collector(path, out).collect("", *root);
  return out;
}

void save_tensors(const std::string& path, const named_tensors& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, t] : tensors) dict.insert(name, t.detach().cpu().contiguous());
  const std::vector<char> bytes = torch::pickle_save(dict);
  write_atomic(path, std::string_view(bytes.data(), bytes.size()));
}

std::string first_nonfinite(const named_tensors& tensors) {
  for (const auto& [name, t] : tensors) {
    if (!t.defined() || !t.is_floating_point() || t.numel() == 0) continue;
    // A NaN or an infinity makes the sum one; a finite sum can only mean
    // finite elements (a non-finite one may also be an overflow: look).
    const at::Tensor sum = t.detach().sum(t.scalar_type() == at::kDouble ? at::kDouble : at::kFloat);
    if (std::isfinite(sum.item<double>())) continue;
    if (!at::isfinite(t.detach()).all().item<bool>()) return name;
  }
  return {};
}

}  // namespace actorpipe
