// The SentencePiece plugin (libactorpipe_sentencepiece.so): a C interface
// over Debian's libsentencepiece, built apart from the core and opened by
// runtime/data/tokenizer.cpp with RTLD_LOCAL | RTLD_DEEPBIND. The library
// embeds protobuf 3.14 and exports it; LibTorch's process has protobuf
// 3.21; only behind this boundary can both load. No LibTorch here.
#include <sentencepiece_processor.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

void set_error(char* err, size_t len, const std::string& what) {
  if (err == nullptr || len == 0) return;
  std::strncpy(err, what.c_str(), len - 1);
  err[len - 1] = '\0';
}

}  // namespace

extern "C" {

/// A loaded model, or null with `err` set.
void* actorpipe_spm_load(const char* path, char* err, size_t err_len) {
  auto* sp = new sentencepiece::SentencePieceProcessor();
  const auto status = sp->Load(path);
  if (!status.ok()) {
    set_error(err, err_len, status.ToString());
    delete sp;
    return nullptr;
  }
  return sp;
}

void actorpipe_spm_free(void* model) { delete static_cast<sentencepiece::SentencePieceProcessor*>(model); }

int64_t actorpipe_spm_vocab(void* model) {
  return static_cast<sentencepiece::SentencePieceProcessor*>(model)->GetPieceSize();
}

/// The ids of text[0, len) appended to *ids (realloc'd, *count updated);
/// 0 on success, else -1 with `err` set.
int actorpipe_spm_encode(void* model, const char* text, size_t len, int32_t** ids, size_t* count, char* err,
                         size_t err_len) {
  std::vector<int> out;
  const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(model)->Encode(
      absl::string_view(text, len), &out);
  if (!status.ok()) {
    set_error(err, err_len, status.ToString());
    return -1;
  }
  auto* grown = static_cast<int32_t*>(std::realloc(*ids, (*count + out.size()) * sizeof(int32_t) + 1));
  if (grown == nullptr) {
    set_error(err, err_len, "out of memory");
    return -1;
  }
  for (size_t i = 0; i < out.size(); ++i) grown[*count + i] = out[i];
  *ids = grown;
  *count += out.size();
  return 0;
}

/// The text of ids[0, count) in *text (malloc'd, *len bytes); 0 on
/// success, else -1 with `err` set.
int actorpipe_spm_decode(void* model, const int32_t* ids, size_t count, char** text, size_t* len, char* err,
                         size_t err_len) {
  std::vector<int> in(ids, ids + count);
  std::string out;
  const auto status = static_cast<sentencepiece::SentencePieceProcessor*>(model)->Decode(in, &out);
  if (!status.ok()) {
    set_error(err, err_len, status.ToString());
    return -1;
  }
  *text = static_cast<char*>(std::malloc(out.size() + 1));
  if (*text == nullptr) {
    set_error(err, err_len, "out of memory");
    return -1;
  }
  std::memcpy(*text, out.data(), out.size());
  *len = out.size();
  return 0;
}

void actorpipe_spm_release(void* buffer) { std::free(buffer); }

}  // extern "C"
