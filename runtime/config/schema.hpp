#pragma once
// Every key the config reader accepts, with its type, default and meaning:
// the one table the reader takes its allowed keys from (reader::read_map)
// and that docs/CONFIG.md and `actorpipe keys` print. A key the table does
// not list is an unknown key, so the reference cannot fall behind the
// reader; tests/runtime/config/config_reference_test checks the defaults
// against a loaded config and docs/CONFIG.md against render_markdown().
// No torch here.
#include <string>
#include <vector>

namespace actorpipe::config_schema {

/// One key. `path` is dotted; a list's items are `[]` ("model.layers[].in").
/// `default_text` is the value a config gets without the key, as the
/// reader prints it, or a description in parentheses, or "required".
struct key_doc {
  const char* path;
  const char* type;
  const char* default_text;
  const char* meaning;
};

/// Every key, sections first, in reference order.
const std::vector<key_doc>& keys();

/// The names a map at `path` takes ("" for the top level; a list item's
/// index may be written, "model.layers[3]").
std::vector<std::string> keys_under(const std::string& path);

/// One named value with what it does: a layer type, a fault kind, a
/// schedule.
struct choice_doc {
  std::string name;
  std::string meaning;
};

/// model.layers[].type's values, and the keys each takes.
const std::vector<choice_doc>& layer_types();
/// faults.inject[].kind's values.
const std::vector<choice_doc>& fault_kinds();

/// The reference as markdown (docs/CONFIG.md between its markers).
std::string render_markdown();
/// The reference as plain text, one key per paragraph; only keys whose
/// path starts with `prefix`.
std::string render_text(const std::string& prefix);

}  // namespace actorpipe::config_schema
