#include "runtime/data/tokenizer.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <filesystem>
#include <mutex>

namespace actorpipe {

namespace {

namespace fs = std::filesystem;

// The plugin's C interface (runtime/data/sentencepiece_plugin.cpp).
struct plugin {
  void* (*load)(const char*, char*, size_t) = nullptr;
  void (*free_model)(void*) = nullptr;
  int64_t (*vocab)(void*) = nullptr;
  int (*encode)(void*, const char*, size_t, int32_t**, size_t*, char*, size_t) = nullptr;
  int (*decode)(void*, const int32_t*, size_t, char**, size_t*, char*, size_t) = nullptr;
  void (*release)(void*) = nullptr;
  std::string error;  // why it could not be opened ("" when it was)
};

// Where the plugin is: ACTORPIPE_SENTENCEPIECE_PLUGIN, else beside the
// binary (a build directory), else in ../lib/actorpipe (an install).
std::vector<std::string> plugin_paths() {
  std::vector<std::string> out;
  if (const char* p = std::getenv("ACTORPIPE_SENTENCEPIECE_PLUGIN"); p && *p) out.emplace_back(p);
  char exe[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    const fs::path dir = fs::path(std::string(exe, static_cast<size_t>(n))).parent_path();
    out.push_back((dir / "libactorpipe_sentencepiece.so").string());
    out.push_back((dir.parent_path() / "lib" / "actorpipe" / "libactorpipe_sentencepiece.so").string());
  }
  return out;
}

template <class F>
void bind(void* lib, const char* name, F& out, std::string& error) {
  out = reinterpret_cast<F>(::dlsym(lib, name));
  if (out == nullptr && error.empty()) error = std::string("no symbol ") + name;
}

// Opened once, for the process's life: RTLD_LOCAL keeps SentencePiece's
// own protobuf out of the global scope, RTLD_DEEPBIND keeps LibTorch's out
// of its.
const plugin& the_plugin() {
  static plugin p;
  static std::once_flag once;
  std::call_once(once, [] {
#if defined(__SANITIZE_ADDRESS__)
    // AddressSanitizer's runtime cannot open a library with RTLD_DEEPBIND
    // (google/sanitizers#611), and without it SentencePiece would bind to
    // LibTorch's protobuf: scripts/test --sanitize leaves out the tests
    // that tokenize.
    p.error = "the SentencePiece plugin cannot be opened in an AddressSanitizer build (it needs RTLD_DEEPBIND, "
              "which the sanitizer refuses)";
    return;
#endif
    std::string tried;
    void* lib = nullptr;
    for (const auto& path : plugin_paths()) {
      lib = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
      if (lib) break;
      const char* why = ::dlerror();
      tried += (tried.empty() ? "" : "; ") + path + ": " + (why ? why : "not found");
    }
    if (!lib) {
      p.error = "the SentencePiece plugin did not load (" + tried + ")";
      return;
    }
    bind(lib, "actorpipe_spm_load", p.load, p.error);
    bind(lib, "actorpipe_spm_free", p.free_model, p.error);
    bind(lib, "actorpipe_spm_vocab", p.vocab, p.error);
    bind(lib, "actorpipe_spm_encode", p.encode, p.error);
    bind(lib, "actorpipe_spm_decode", p.decode, p.error);
    bind(lib, "actorpipe_spm_release", p.release, p.error);
  });
  return p;
}

}  // namespace

tokenizer::tokenizer(const std::string& model_path) : path_(model_path) {
  const plugin& p = the_plugin();
  if (!p.error.empty()) throw tokenizer_error(model_path + ": " + p.error);
  char err[512] = {0};
  model_ = p.load(model_path.c_str(), err, sizeof err);
  if (model_ == nullptr) throw tokenizer_error(model_path + ": not a SentencePiece model that loads (" + err + ")");
}

tokenizer::~tokenizer() {
  if (model_) the_plugin().free_model(model_);
}

std::vector<int64_t> tokenizer::encode(const std::string& text, const std::function<void(int64_t)>& progress) const {
  const plugin& p = the_plugin();
  int32_t* ids = nullptr;
  size_t count = 0;
  char err[512] = {0};
  int64_t reported = 0;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    if (p.encode(model_, text.data() + at, end - at, &ids, &count, err, sizeof err) != 0) {
      p.release(ids);
      throw tokenizer_error(path_ + ": encoding the line at byte " + std::to_string(at) + ": " + err);
    }
    at = end + 1;
    if (progress && static_cast<int64_t>(at) - reported >= (int64_t{1} << 20)) {
      reported = static_cast<int64_t>(at);
      progress(reported);
    }
  }
  std::vector<int64_t> out(ids, ids + count);
  p.release(ids);
  if (progress) progress(static_cast<int64_t>(text.size()));
  return out;
}

std::string tokenizer::decode(const std::vector<int64_t>& ids) const {
  std::vector<int32_t> small;
  small.reserve(ids.size());
  const int64_t vocab = vocab_size();
  for (const int64_t id : ids) {
    if (id < 0 || id >= vocab)
      throw tokenizer_error(path_ + ": id " + std::to_string(id) + " is outside its vocabulary of " +
                            std::to_string(vocab));
    small.push_back(static_cast<int32_t>(id));
  }
  const plugin& p = the_plugin();
  char* text = nullptr;
  size_t len = 0;
  char err[512] = {0};
  if (p.decode(model_, small.data(), small.size(), &text, &len, err, sizeof err) != 0)
    throw tokenizer_error(path_ + ": decoding: " + err);
  std::string out(text, len);
  p.release(text);
  return out;
}

int64_t tokenizer::vocab_size() const { return the_plugin().vocab(model_); }

}  // namespace actorpipe
