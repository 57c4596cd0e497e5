// actorpipe tokenize: a text file into a token file (nanoGPT's train.bin
// format) with a SentencePiece model, the ids `data: {kind: text,
// tokenizer}` would train on.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "apps/common.hpp"
#include "runtime/data/tokenizer.hpp"
#include "runtime/files/file_io.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe::app {

namespace {

const command_spec tokenize_spec = {
    "usage: actorpipe tokenize --model M.model [--dtype uint16|uint32] INPUT.txt OUT.bin",
    "Tokenizes INPUT.txt with the SentencePiece model M.model (`spm_train`'s\n"
    "output) and writes OUT.bin: the ids as a flat array of little-endian\n"
    "uint16 (or uint32), nanoGPT's train.bin, which `data: {kind: tokens,\n"
    "path: OUT.bin, dtype: ...}` reads. The text is encoded line by line, as\n"
    "spm_encode does (no BOS or EOS; a line break is no token): the same ids\n"
    "as `data: {kind: text, tokenizer: M.model}`. OUT.bin is written\n"
    "atomically; a large input shows its progress on stderr.\n",
    {{"--model", "PATH", "the SentencePiece model (required)"},
     {"--dtype", "TYPE", "uint16 (default: vocabularies up to 65536) or uint32"}},
    "exit codes: 0 written, 1 the write failed, 2 bad arguments, model or input\n",
    20};

// Little-endian ids of `width` bytes each.
std::string pack(const std::vector<int64_t>& ids, int width) {
  std::string out(ids.size() * static_cast<size_t>(width), '\0');
  for (size_t i = 0; i < ids.size(); ++i) {
    const auto v = static_cast<uint32_t>(ids[i]);
    for (int b = 0; b < width; ++b) out[i * static_cast<size_t>(width) + static_cast<size_t>(b)] = static_cast<char>((v >> (8 * b)) & 0xFF);
  }
  return out;
}

}  // namespace

int cmd_tokenize(int argc, char** argv) {
  auto a = parse(argc, argv, 2, tokenize_spec);
  if (a.has("--help")) {
    std::fputs(a.help.c_str(), stdout);
    return exit_ok;
  }
  if (a.positional.size() != 2) throw usage_error("tokenize takes INPUT.txt and OUT.bin (see --help)");
  if (!a.has("--model") || a.options["--model"].empty()) throw usage_error("tokenize needs --model M.model");
  const std::string dtype = a.has("--dtype") ? a.options["--dtype"] : "uint16";
  if (dtype != "uint16" && dtype != "uint32")
    throw usage_error("--dtype is uint16 or uint32, got " + quoted_input(dtype));
  const std::string& input = a.positional[0];
  const std::string& out_path = a.positional[1];
  try {
    output_target(out_path);  // before the work: a path that cannot be written
  } catch (const io_error& e) {
    throw usage_error(e.what());
  }
  std::unique_ptr<tokenizer> tok;
  try {
    tok = std::make_unique<tokenizer>(a.options["--model"]);
  } catch (const tokenizer_error& e) {
    throw usage_error(std::string("--model ") + e.what());
  }
  const int width = dtype == "uint32" ? 4 : 2;
  if (width == 2 && tok->vocab_size() > 65536)
    throw usage_error(a.options["--model"] + " has " + std::to_string(tok->vocab_size()) +
                      " tokens; uint16 holds ids below 65536 (give --dtype uint32)");
  std::string text;
  try {
    text = read_file_bytes(input);
  } catch (const io_error& e) {
    throw usage_error(e.what());
  }
  // Progress past 8 MB, at most twice a second.
  const bool show = text.size() > (size_t{8} << 20);
  const auto total = static_cast<double>(text.size());
  auto shown = std::chrono::steady_clock::now();
  const auto started = shown;
  std::vector<int64_t> ids;
  try {
    ids = tok->encode(text, [&](int64_t done) {
      if (!show) return;
      const auto now = std::chrono::steady_clock::now();
      if (now - shown < std::chrono::milliseconds(500) && done < static_cast<int64_t>(text.size())) return;
      shown = now;
      const double s = std::chrono::duration<double>(now - started).count();
      std::fprintf(stderr, "\rtokenize: %.1f of %.1f MB (%.0f%%), %.1f MB/s   ", static_cast<double>(done) / 1e6,
                   total / 1e6, 100.0 * static_cast<double>(done) / total, s > 0 ? static_cast<double>(done) / 1e6 / s : 0.0);
    });
  } catch (const tokenizer_error& e) {
    throw usage_error(std::string(input) + ": " + e.what());
  }
  if (show) std::fputc('\n', stderr);
  try {
    write_atomic(out_path, pack(ids, width));
  } catch (const io_error& e) {
    std::fprintf(stderr, "actorpipe: %s\n", e.what());
    return exit_failed;
  }
  std::printf("%s: %zu tokens (%s) from %zu bytes of %s, vocabulary %lld\n", out_path.c_str(), ids.size(),
              dtype.c_str(), text.size(), input.c_str(), static_cast<long long>(tok->vocab_size()));
  return exit_ok;
}

}  // namespace actorpipe::app
