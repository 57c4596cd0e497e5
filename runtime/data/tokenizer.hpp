#pragma once
// A SentencePiece tokenizer (LLaMA 1 and 2's kind, `spm_train`'s .model),
// through Debian's libsentencepiece, in a plugin of its own (its protobuf
// and LibTorch's cannot share a symbol scope: runtime/data/tokenizer.cpp). Text is encoded line by line, as
// spm_encode does: each line's ids (no BOS, no EOS), in order; a line
// break is no token. `actorpipe tokenize`, `data: {kind: text, tokenizer}`
// and `generate --tokenizer` all go through here, so they agree.
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

namespace actorpipe {

/// A model that does not load: the message names the file and why.
class tokenizer_error : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

class tokenizer {
public:
  /// Loads `model_path`. Throws tokenizer_error.
  explicit tokenizer(const std::string& model_path);
  ~tokenizer();
  tokenizer(const tokenizer&) = delete;
  tokenizer& operator=(const tokenizer&) = delete;

  /// The ids of `text`, line by line. `progress(bytes done)` is called
  /// after each megabyte or so (and at the end) when given.
  std::vector<int64_t> encode(const std::string& text,
                              const std::function<void(int64_t)>& progress = {}) const;
  /// The text of `ids` (an id past the vocabulary is an error).
  std::string decode(const std::vector<int64_t>& ids) const;
  /// Ids run from 0 to vocab_size() - 1.
  int64_t vocab_size() const;

private:
  void* model_ = nullptr;  // the plugin's handle (runtime/data/sentencepiece_plugin.cpp)
  std::string path_;
};

}  // namespace actorpipe
