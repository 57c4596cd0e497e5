// model: the layers, their shapes, init_from and dtype.
#include "runtime/config/sections.hpp"

#include "runtime/util/text.hpp"

#include <map>

namespace actorpipe::config_detail {

namespace {

const std::vector<std::string> layer_types{"linear",    "relu",      "gelu",      "tanh",
                                           "dropout",   "layernorm", "embedding", "gpt_block",
                                           "lm_head",   "token_embedding", "llama_block", "rmsnorm"};

bool embeds(const std::string& type) { return type == "embedding" || type == "token_embedding"; }

/// A width: required, positive, at most 2^31.
void read_width(const reader& r, const section& s, const std::string& type, const std::string& name, int64_t& out) {
  const std::string key = s.path + "." + name;
  if (!r.read_int(s, name, out)) r.fail_key(key, "required for a " + type + " layer");
  if (out <= 0) r.fail_key(key, "must be positive, found " + std::to_string(out));
  r.size_in_range(key, out, 1);
}

// Which layer type a key belongs to, for "only used by" messages.
std::string owner_of(const std::string& k) {
  if (k == "p") return "dropout";
  if (k == "in" || k == "out") return "linear";
  if (k == "max_seq") return "embedding";
  if (k == "vocab") return "embedding, token_embedding and lm_head";
  if (k == "heads") return "gpt_block and llama_block";
  if (k == "mlp_hidden") return "gpt_block";
  if (k == "kv_heads" || k == "ffn_hidden" || k == "rope_theta" || k == "norm_eps") return "llama_block";
  if (k == "eps") return "rmsnorm";
  if (k == "tie") return "lm_head";
  if (k == "dropout") return "embedding or gpt_block";
  return "layernorm, rmsnorm and the transformer layers";
}

/// A positive number (rope_theta, an eps).
void read_positive(const reader& r, const section& s, const std::string& name, double& out) {
  if (r.read_number(s, name, out)) r.positive(s.path + "." + name, out);
}

void read_llama_block(const reader& r, const section& s, const std::string& path, layer_spec& layer) {
  read_width(r, s, layer.type, "dim", layer.dim);
  read_width(r, s, layer.type, "heads", layer.heads);
  if (layer.dim % layer.heads != 0)
    r.fail_key(path + ".heads", std::to_string(layer.heads) + " heads do not divide dim " + std::to_string(layer.dim));
  if ((layer.dim / layer.heads) % 2 != 0)
    r.fail_key(path + ".heads", "a head of dim / heads = " + std::to_string(layer.dim / layer.heads) +
                                    " values cannot be rotated in pairs (rotary positions need an even head width)");
  layer.kv_heads = layer.heads;
  if (s.has("kv_heads")) read_width(r, s, layer.type, "kv_heads", layer.kv_heads);
  if (layer.heads % layer.kv_heads != 0)
    r.fail_key(path + ".kv_heads", std::to_string(layer.kv_heads) + " key/value heads do not divide the " +
                                       std::to_string(layer.heads) + " query heads");
  read_width(r, s, layer.type, "ffn_hidden", layer.ffn_hidden);
  read_positive(r, s, "rope_theta", layer.rope_theta);
  read_positive(r, s, "norm_eps", layer.eps);
}

void read_layer(reader& r, const Node& node, size_t index) {
  const std::string path = item("model.layers", index);
  r.mark(path, node);
  if (!node.IsMap()) r.fail(node, path, "expected a map like {type: relu}, found " + describe(node));
  const section s = r.read_map(node, path);
  layer_spec layer;
  layer.key = path;
  if (!s.has("type")) r.fail_key(path + ".type", "required (one of: " + join(layer_types) + ")");
  r.read_choice(s, "type", "layer type", layer_types, layer.type);

  static const std::map<std::string, std::vector<std::string>> keys{
      {"linear", {"type", "in", "out", "repeat"}},
      {"dropout", {"type", "p", "repeat"}},
      {"layernorm", {"type", "dim", "repeat"}},
      {"embedding", {"type", "vocab", "dim", "max_seq", "dropout", "repeat"}},
      {"gpt_block", {"type", "dim", "heads", "mlp_hidden", "dropout", "repeat"}},
      {"lm_head", {"type", "vocab", "dim", "tie", "repeat"}},
      {"token_embedding", {"type", "vocab", "dim", "repeat"}},
      {"llama_block", {"type", "dim", "heads", "kv_heads", "ffn_hidden", "rope_theta", "norm_eps", "repeat"}},
      {"rmsnorm", {"type", "dim", "eps", "repeat"}}};
  auto it = keys.find(layer.type);
  r.only_keys(s, it == keys.end() ? std::vector<std::string>{"type", "repeat"} : it->second, "a " + layer.type + " layer",
              owner_of);

  if (layer.type == "linear") {
    read_width(r, s, layer.type, "in", layer.in);
    read_width(r, s, layer.type, "out", layer.out);
  } else if (layer.type == "layernorm") {
    read_width(r, s, layer.type, "dim", layer.dim);
  } else if (layer.type == "dropout") {
    if (r.read_number(s, "p", layer.p)) r.unit_interval(path + ".p", layer.p);
  } else if (layer.type == "embedding") {
    read_width(r, s, layer.type, "vocab", layer.vocab);
    read_width(r, s, layer.type, "dim", layer.dim);
    read_width(r, s, layer.type, "max_seq", layer.max_seq);
    if (r.read_number(s, "dropout", layer.p)) r.unit_interval(path + ".dropout", layer.p);
  } else if (layer.type == "gpt_block") {
    read_width(r, s, layer.type, "dim", layer.dim);
    read_width(r, s, layer.type, "heads", layer.heads);
    if (layer.dim % layer.heads != 0)
      r.fail_key(path + ".heads", std::to_string(layer.heads) + " heads do not divide dim " +
                                      std::to_string(layer.dim));
    layer.mlp_hidden = 4 * layer.dim;
    if (s.has("mlp_hidden")) read_width(r, s, layer.type, "mlp_hidden", layer.mlp_hidden);
    if (r.read_number(s, "dropout", layer.p)) r.unit_interval(path + ".dropout", layer.p);
  } else if (layer.type == "lm_head") {
    read_width(r, s, layer.type, "vocab", layer.vocab);
    read_width(r, s, layer.type, "dim", layer.dim);
    r.read_bool(s, "tie", layer.tie);
  } else if (layer.type == "token_embedding") {
    read_width(r, s, layer.type, "vocab", layer.vocab);
    read_width(r, s, layer.type, "dim", layer.dim);
  } else if (layer.type == "llama_block") {
    read_llama_block(r, s, path, layer);
  } else if (layer.type == "rmsnorm") {
    read_width(r, s, layer.type, "dim", layer.dim);
    read_positive(r, s, "eps", layer.eps);
  }
  int64_t repeat = 1;
  if (r.read_int(s, "repeat", repeat)) {
    if (repeat < 1) r.fail_key(path + ".repeat", "must be at least 1, found " + std::to_string(repeat));
    if (repeat > 100000) r.fail_key(path + ".repeat", std::to_string(repeat) + " layers is more than 100000");
    if (layer.tie && repeat > 1) r.fail_key(path + ".repeat", "a tied lm_head cannot repeat");
  }
  for (int64_t i = 0; i < repeat; ++i) r.cfg().model.layers.push_back(layer);
}

/// Chains the widths and records the model's input and output width for
/// the synthetic data.
void check_layer_shapes(reader& r) {
  // Activations (relu, dropout, ...) keep the width; the others fix it.
  read_facts& f = r.facts();
  auto& m = r.cfg().model;
  int64_t width = 0;
  int embedding = -1;
  const auto& layers = m.layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    const std::string& path = l.key;
    if (embeds(l.type)) {
      if (i != 0)
        r.fail_key(path + ".type", "an embedding takes tokens; it must be the first layer, not layer " +
                                       std::to_string(i));
      embedding = static_cast<int>(i);
      width = l.dim;
      continue;
    }
    int64_t in = 0, out = 0;
    std::string in_key;
    if (l.type == "linear") {
      in = l.in, out = l.out, in_key = path + ".in";
    } else if (l.type == "layernorm" || l.type == "gpt_block" || l.type == "llama_block" || l.type == "rmsnorm") {
      in = out = l.dim, in_key = path + ".dim";
    } else if (l.type == "lm_head") {
      in = l.dim, out = l.vocab, in_key = path + ".dim";
    } else {
      continue;
    }
    if (width == 0) {
      f.input_width = in;
      f.input_key = in_key;
    } else if (in != width) {
      r.fail_key(in_key, std::to_string(in) + " does not match the previous output " + std::to_string(width));
    }
    width = out;
    if (l.type == "linear" || l.type == "lm_head") {
      f.output_width = out;
      f.output_key = path + (l.type == "linear" ? ".out" : ".vocab");
    }
    if (l.type == "lm_head" && l.tie) {
      if (embedding < 0)
        r.fail_key(path + ".tie", "ties the head to the embedding's table, but the model has no embedding layer");
      const auto& e = layers[static_cast<size_t>(embedding)];
      if (e.vocab != l.vocab)
        r.fail_key(path + ".vocab", std::to_string(l.vocab) + " differs from the tied embedding's vocab " +
                                        std::to_string(e.vocab));
      if (e.dim != l.dim)
        r.fail_key(path + ".dim", std::to_string(l.dim) + " differs from the tied embedding's dim " +
                                      std::to_string(e.dim));
      m.tie_embedding = embedding;
      m.tie_head = static_cast<int>(i);
    }
  }
  if (f.output_width == 0)
    r.fail_key("model.layers", "has no linear or lm_head layer; the model has nothing to train");
}

}  // namespace

void read_model(reader& r, const entry* e) {
  if (!e) r.fail(source_mark{1, 1}, "model.layers", "required: the list of layers");
  const section s = r.read_map(e->value, "model");
  const entry* layers = s.find("layers");
  if (!layers) r.fail_key("model.layers", "required: the list of layers");
  if (!layers->value.IsSequence())
    r.fail(reader::value_mark(*layers), "model.layers", "expected a list of layers, found " + describe(layers->value));
  if (layers->value.size() == 0) r.fail_key("model.layers", "is empty; the model needs at least one layer");
  for (size_t i = 0; i < layers->value.size(); ++i) read_layer(r, layers->value[i], i);
  check_layer_shapes(r);
  r.read_file_path(s, "init_from", r.cfg().model.init_from);
  std::string dtype;
  if (r.read_string(s, "dtype", dtype)) {
    // The short names Megatron and DeepSpeed users write mean the same.
    static const std::map<std::string, std::string> known{
        {"float32", "float32"}, {"bfloat16", "bfloat16"}, {"float16", "float16"}, {"bf16", "bfloat16"},
        {"fp16", "float16"},    {"half", "float16"},       {"fp32", "float32"},   {"float", "float32"}};
    auto it = known.find(dtype);
    if (it == known.end())
      r.fail_key("model.dtype", "unknown parameter type " + quoted_input(dtype) +
                                    " (known: float32, bfloat16, float16; also bf16, fp16, fp32)");
    r.cfg().model.dtype = it->second;
  }
  std::string mixed;
  if (r.read_string(s, "mixed_precision", mixed)) {
    static const std::map<std::string, std::string> known{
        {"none", "none"}, {"bfloat16", "bfloat16"}, {"bf16", "bfloat16"}};
    auto it = known.find(mixed);
    if (it == known.end())
      r.fail_key("model.mixed_precision", "unknown compute type " + quoted_input(mixed) + " (known: none, bfloat16; also bf16)");
    r.cfg().model.mixed_precision = it->second;
    if (it->second != "none" && r.cfg().model.dtype != "float32")
      r.fail_key("model.mixed_precision", "keeps parameters, gradients and optimizer state in float32; model.dtype is " +
                                              r.cfg().model.dtype + " (leave model.dtype out)");
  }
}

}  // namespace actorpipe::config_detail
