// model: the layers, their shapes, init_from and dtype.
#include "runtime/config/sections.hpp"

#include "runtime/text.hpp"

#include <map>

namespace actorpipe::config_detail {

namespace {

const std::vector<std::string> layer_types{"linear", "relu", "gelu", "tanh", "dropout", "layernorm"};

/// A linear's in/out or a layernorm's dim: required, positive, at most 2^31.
void read_width(const reader& r, const section& s, const std::string& type, const std::string& name, int64_t& out) {
  const std::string key = s.path + "." + name;
  if (!r.read_int(s, name, out)) r.fail_key(key, "required for a " + type + " layer");
  if (out <= 0) r.fail_key(key, "must be positive, found " + std::to_string(out));
  r.size_in_range(key, out, 1);
}

void read_layer(reader& r, const Node& node, size_t index) {
  const std::string path = item("model.layers", index);
  r.mark(path, node);
  if (!node.IsMap()) r.fail(node, path, "expected a map like {type: relu}, found " + describe(node));
  const section s = r.read_map(node, path, {"type", "in", "out", "p", "dim"});
  layer_spec layer;
  if (!s.has("type")) r.fail_key(path + ".type", "required (one of: " + join(layer_types) + ")");
  r.read_choice(s, "type", "layer type", layer_types, layer.type);

  static const std::map<std::string, std::vector<std::string>> keys{
      {"linear", {"type", "in", "out"}}, {"dropout", {"type", "p"}}, {"layernorm", {"type", "dim"}}};
  auto it = keys.find(layer.type);
  r.only_keys(s, it == keys.end() ? std::vector<std::string>{"type"} : it->second, "a " + layer.type + " layer",
              [](const std::string& k) { return k == "p" ? "dropout" : k == "dim" ? "layernorm" : "linear"; });

  if (layer.type == "linear") {
    read_width(r, s, layer.type, "in", layer.in);
    read_width(r, s, layer.type, "out", layer.out);
  } else if (layer.type == "layernorm") {
    read_width(r, s, layer.type, "dim", layer.dim);
  } else if (layer.type == "dropout") {
    if (r.read_number(s, "p", layer.p)) r.unit_interval(path + ".p", layer.p);
  }
  r.cfg().model.layers.push_back(layer);
}

/// Chains the widths and records the model's input and output width for
/// the synthetic data.
void check_layer_shapes(reader& r) {
  // Activations (relu, dropout, ...) keep the width; linear and layernorm fix it.
  read_facts& f = r.facts();
  int64_t width = 0;
  const auto& layers = r.cfg().model.layers;
  for (size_t i = 0; i < layers.size(); ++i) {
    const auto& l = layers[i];
    const std::string path = item("model.layers", i);
    const bool is_linear = l.type == "linear";
    if (!is_linear && l.type != "layernorm") continue;
    const int64_t in = is_linear ? l.in : l.dim;
    const std::string in_key = path + (is_linear ? ".in" : ".dim");
    if (width == 0) {
      f.input_width = in;
      f.input_key = in_key;
    } else if (in != width) {
      r.fail_key(in_key, std::to_string(in) + " does not match the previous output " + std::to_string(width));
    }
    width = is_linear ? l.out : l.dim;
    if (is_linear) {
      f.output_width = l.out;
      f.output_key = path + ".out";
    }
  }
  if (f.output_width == 0) r.fail_key("model.layers", "has no linear layer; the model has nothing to train");
}

}  // namespace

void read_model(reader& r, const entry* e) {
  if (!e) r.fail(source_mark{1, 1}, "model.layers", "required: the list of layers");
  const section s = r.read_map(e->value, "model", {"layers", "init_from", "dtype"});
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
}

}  // namespace actorpipe::config_detail
