// data: where the rows come from and how they are split. The synthetic
// sizes are checked against the model by the cross-section checks.
#include "runtime/config/sections.hpp"

#include "runtime/util/text.hpp"

namespace actorpipe::config_detail {

void read_data(reader& r, const entry* e) {
  auto& d = r.cfg().data;
  const section s = r.read_map(e ? e->value : Node(), "data");
  r.read_choice(s, "kind", "data kind", {"csv", "tensors", "synthetic", "text", "tokens"}, d.kind);
  const bool sequences = d.kind == "text" || d.kind == "tokens";
  if (sequences) {
    if (!s.has("seq_len"))
      r.fail(r.cfg().marks.at("data.kind"), "data.seq_len", "required when data.kind is " + d.kind);
    r.read_int(s, "seq_len", d.seq_len);
    if (d.seq_len < 1) r.fail_key("data.seq_len", "must be positive, found " + std::to_string(d.seq_len));
    r.size_in_range("data.seq_len", d.seq_len, 1);
  } else if (s.has("seq_len")) {
    r.fail_key("data.seq_len", "only used when data.kind is text or tokens, not " + d.kind);
  }
  if (d.kind == "tokens") {
    std::string dtype;
    if (r.read_string(s, "dtype", dtype)) {
      if (dtype != "uint16" && dtype != "uint32")
        r.fail_key("data.dtype", "unknown token type " + quoted_input(dtype) + " (known: uint16, uint32)");
      d.token_dtype = dtype;
    }
  } else if (s.has("dtype")) {
    r.fail_key("data.dtype", "only used when data.kind is tokens, not " + d.kind);
  }
  if (d.kind == "text") {
    r.read_file_path(s, "tokenizer", d.tokenizer);
  } else if (s.has("tokenizer")) {
    r.fail_key("data.tokenizer", "only used when data.kind is text (a token file is tokenized already), not " + d.kind);
  }
  const bool from_file = d.kind != "synthetic";
  if (from_file) {
    // The kind is what makes the path required, so point there.
    if (!s.has("path")) r.fail(r.cfg().marks.at("data.kind"), "data.path", "required when data.kind is " + d.kind);
    r.read_file_path(s, "path", d.path);
    if (s.has("synthetic")) r.fail_key("data.synthetic", "only used when data.kind is synthetic, not " + d.kind);
  } else if (s.has("path")) {
    r.fail_key("data.path", "only used when data.kind is csv, tensors, text or tokens, not synthetic");
  }
  static const std::vector<field<data_config>> fields{
      {"test_fraction", &data_config::test_fraction, rule::fraction()},
      {"split", &data_config::split, rule::one_of("split mode", {"tail", "random"})},
      {"shuffle", &data_config::shuffle},
      {"normalize", &data_config::normalize, rule::one_of("normalize mode", {"none", "standard"})},
  };
  r.read_fields(s, d, fields);
  if (from_file) return;
  const entry* syn = s.find("synthetic");
  const section ss = r.read_map(syn ? syn->value : Node(), "data.synthetic");
  // features and classes stay 0 when absent: resolve() takes the model's.
  static const std::vector<field<data_config>> synthetic_fields{
      {"samples", &data_config::samples, rule::count()},
      {"features", &data_config::features, rule::at_least(1)},
      {"classes", &data_config::classes, rule::at_least(2)},
  };
  r.read_fields(ss, d, synthetic_fields);
}

}  // namespace actorpipe::config_detail
