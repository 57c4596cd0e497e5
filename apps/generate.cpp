// actorpipe generate: text from a trained GPT or LLaMA model (an embedding
// or a token_embedding ... lm_head), bytes or a SentencePiece model's
// tokens, the layers run in order in this process with a KV cache.
#include <torch/cuda.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "apps/common.hpp"
#include "runtime/data/tokenizer.hpp"
#include "runtime/model/generate.hpp"
#include "runtime/model/model.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe::app {

namespace {

const command_spec generate_spec = {
    "usage: actorpipe generate CONFIG --load STATE --prompt TEXT [options]",
    "Continues TEXT with a language model (model.layers from an embedding or a\n"
    "token_embedding to an lm_head) whose weights STATE holds, e.g. what\n"
    "`actorpipe train CONFIG --save STATE` wrote. Tokens are bytes, or a\n"
    "SentencePiece model's (--tokenizer, default the config's data.tokenizer).\n"
    "\n"
    "generate runs the layers in one process, in order, without gradients or\n"
    "dropout (pipeline.stages and pipeline.partition are not used), with a KV\n"
    "cache: the prompt runs once and each new token costs one position. The\n"
    "model sees the last max_seq tokens (a token_embedding's model:\n"
    "data.seq_len); a longer prompt keeps its last ones (a note on stderr says\n"
    "so). Prints the prompt, the text as it is drawn, then a newline.\n",
    {{"--load", "PATH", "the state dict to run (required; torch.load's format)"},
     {"--prompt", "TEXT", "the text to continue (required, not empty)"},
     {"--tokens", "N", "how many tokens to generate (default 200)"},
     {"--tokenizer", "PATH", "a SentencePiece model: encodes the prompt, decodes the output"},
     {"--no-cache", "", "run the whole window again for every token (no KV cache)"},
     {"--temperature", "T",
      "divide the logits by T before sampling (default 0.8);\n"
      "0: greedy, always the most likely token"},
     {"--top-k", "K", "sample among the K most likely tokens only (default 40; 0: all)"},
     {"--seed", "N", "the sampler's seed: the same seed, the same text (default 1)"},
     {"--device", "DEV", "cpu or cuda:N (default cpu)"}},
    "exit codes: 0 done, 1 the model failed, 2 bad config, state dict or arguments\n",
    20};

/// `v` as an integer in 0..max, or a usage_error naming `flag`.
int64_t parse_non_negative(const std::string& flag, const std::string& v, unsigned long long max,
                           const char* what = "a non-negative integer") {
  errno = 0;
  char* end = nullptr;
  const unsigned long long n = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || v[0] == '-' || v[0] == '+' || *end != '\0' || errno == ERANGE || n > max)
    throw usage_error(flag + " expects " + what + ", got " + quoted_input(v));
  return static_cast<int64_t>(n);
}

double parse_temperature(const std::string& v) {
  char* end = nullptr;
  const double t = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(t) || t < 0)
    throw usage_error("--temperature expects a number >= 0, got " + quoted_input(v));
  return t;
}

/// The index of the first layer of `type`, or -1.
int find_layer(const config& cfg, const std::string& type) {
  for (size_t i = 0; i < cfg.model.layers.size(); ++i)
    if (cfg.model.layers[i].type == type) return static_cast<int>(i);
  return -1;
}

// --device: cpu, cuda or cuda:N, a device this machine has.
std::string device_of(args& a) {
  const std::string device = a.has("--device") ? a.options["--device"] : "cpu";
  if (device == "cpu") return device;
  const bool cuda = device == "cuda" || device.rfind("cuda:", 0) == 0;
  if (!cuda) throw usage_error("--device expects cpu or cuda:N, got " + quoted_input(device));
  const int64_t index = device == "cuda" ? 0 : parse_non_negative("--device", device.substr(5), INT_MAX, "cpu or cuda:N");
  const int n = static_cast<int>(torch::cuda::device_count());
  if (index >= n)
    throw usage_error("--device " + device + ": this machine has " + std::to_string(n) + " CUDA device" +
                      (n == 1 ? "" : "s"));
  return device;
}

// A language model: an embedding first and an lm_head last.
void check_language_model(const config& cfg) {
  const std::string first = cfg.model.layers.front().type;
  const int head = find_layer(cfg, "lm_head");
  if ((first != "embedding" && first != "token_embedding") || head != static_cast<int>(cfg.model.layers.size()) - 1)
    throw usage_error(cfg.path + ": generate runs a language model: model.layers must start with an embedding or a "
                      "token_embedding and end with an lm_head (" +
                      (first != "embedding" && first != "token_embedding" ? "layer 0 is a " + first
                       : head < 0 ? std::string("it has no lm_head")
                                  : "the last layer is a " + cfg.model.layers.back().type) +
                      ")");
}

// --tokenizer, or the config's; none: the model reads bytes.
std::unique_ptr<tokenizer> tokenizer_of(args& a, const config& cfg) {
  const std::string path = a.has("--tokenizer") ? a.options["--tokenizer"] : cfg.data.tokenizer;
  const int64_t vocab = cfg.model.layers.front().vocab;
  if (path.empty()) {
    if (vocab != 256)
      throw usage_error(cfg.path + ": the model's vocabulary has " + std::to_string(vocab) +
                        " tokens, not 256 bytes: give --tokenizer M.model to encode the prompt and decode the text");
    return nullptr;
  }
  std::unique_ptr<tokenizer> tok;
  try {
    tok = std::make_unique<tokenizer>(path);
  } catch (const tokenizer_error& e) {
    throw usage_error(std::string("--tokenizer ") + e.what());
  }
  if (tok->vocab_size() > vocab)
    throw usage_error("--tokenizer " + path + " has " + std::to_string(tok->vocab_size()) +
                      " tokens, more than the model's vocab " + std::to_string(vocab));
  return tok;
}

// --load is the state dict build_layers loads, with its key and shape checks.
layer_stack load_model(config cfg, const std::string& state, const std::string& device) {
  cfg.model.init_from = state;
  cfg.marks.erase("model.init_from");
  std::vector<layer> layers;
  try {
    layers = build_layers(cfg);
  } catch (const config_error& e) {
    std::string msg = e.what();
    const std::string prefix = cfg.where("model.init_from");
    if (msg.rfind(prefix, 0) == 0) msg = msg.substr(prefix.size());
    throw usage_error("--load: " + msg);
  }
  layer_stack model(std::move(layers));
  model.to(device, parameter_dtype(cfg.model));
  return model;
}

// Each new token prints what it adds to the text: the decoding of the
// last few tokens with it, past their decoding without it (a
// SentencePiece piece decodes differently alone than after others; a
// character of several byte pieces needs them all). A window, not the
// whole text: decoding everything again for every token costs more than
// the model's step once the text is long.
class text_printer {
public:
  text_printer(const tokenizer* tok, std::vector<int64_t> prompt) : tok_(tok), all_(std::move(prompt)) {
    const std::string start = tok_ ? tok_->decode(all_) : std::string(all_.begin(), all_.end());
    std::fwrite(start.data(), 1, start.size(), stdout);
    std::fflush(stdout);
  }
  void add(int64_t t) {
    std::string added(1, static_cast<char>(static_cast<unsigned char>(t)));
    if (tok_) {
      const size_t from = all_.size() > 16 ? all_.size() - 16 : 0;
      std::vector<int64_t> tail(all_.begin() + static_cast<std::ptrdiff_t>(from), all_.end());
      const std::string before = tok_->decode(tail);
      tail.push_back(t);
      const std::string after = tok_->decode(tail);
      size_t same = 0;
      while (same < before.size() && same < after.size() && before[same] == after[same]) ++same;
      added = after.substr(same);
    }
    all_.push_back(t);
    std::fwrite(added.data(), 1, added.size(), stdout);
    std::fflush(stdout);
  }

private:
  const tokenizer* tok_;
  std::vector<int64_t> all_;
};

}  // namespace

int cmd_generate(int argc, char** argv) {
  auto a = parse(argc, argv, 2, generate_spec);
  if (a.has("--help")) {
    std::fputs(a.help.c_str(), stdout);
    return exit_ok;
  }
  if (a.positional.size() != 1) throw usage_error("generate takes one CONFIG (see --help)");
  if (!a.has("--load")) throw usage_error("generate needs --load STATE (the weights to run)");
  if (a.options["--load"].empty()) throw usage_error("--load needs a path");
  if (!a.has("--prompt")) throw usage_error("generate needs --prompt TEXT");
  const std::string prompt_text = a.options["--prompt"];
  if (prompt_text.empty()) throw usage_error("--prompt is empty; give at least one byte to continue");
  const int64_t tokens = a.has("--tokens") ? parse_count("--tokens", a.options["--tokens"]) : 200;
  sampling s;
  if (a.has("--temperature")) s.temperature = parse_temperature(a.options["--temperature"]);
  if (a.has("--top-k")) s.top_k = parse_non_negative("--top-k", a.options["--top-k"], INT_MAX);
  if (a.has("--seed"))
    s.seed = static_cast<uint64_t>(parse_non_negative("--seed", a.options["--seed"], LLONG_MAX));
  const std::string device = device_of(a);

  const config cfg = load(a.positional[0]);
  check_language_model(cfg);
  // Learned positions bound the window; rotary ones see what training saw.
  const int64_t max_seq =
      cfg.model.layers.front().type == "embedding" ? cfg.model.layers.front().max_seq : cfg.data.seq_len;
  const std::unique_ptr<tokenizer> tok = tokenizer_of(a, cfg);
  std::vector<int64_t> prompt;
  if (tok)
    prompt = tok->encode(prompt_text);
  else
    for (unsigned char c : prompt_text) prompt.push_back(c);
  if (prompt.empty()) throw usage_error("--prompt " + quoted_input(prompt_text) + " encodes to no token");
  layer_stack model = load_model(cfg, a.options["--load"], device);
  if (static_cast<int64_t>(prompt.size()) > max_seq) {
    const char* unit = tok ? "tokens" : "bytes";
    std::fprintf(stderr, "actorpipe: note: the prompt is %zu %s, longer than max_seq %lld; it keeps its last %lld %s\n",
                 prompt.size(), unit, static_cast<long long>(max_seq), static_cast<long long>(max_seq), unit);
    prompt.erase(prompt.begin(), prompt.end() - max_seq);
  }
  text_printer out(tok.get(), prompt);
  generate_tokens(model, prompt, tokens, max_seq, s, device, [&](int64_t t) { out.add(t); }, !a.has("--no-cache"));
  std::fputc('\n', stdout);
  return exit_ok;
}

}  // namespace actorpipe::app
