// actorpipe keys: every config key with its type, default and meaning, from
// the table the config reader takes its keys from (runtime/config/schema).
#include <cstdio>

#include "apps/common.hpp"
#include "runtime/config/schema.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe::app {

namespace {

const command_spec keys_spec = {
    "usage: actorpipe keys [PREFIX] [--markdown]",
    "Prints every key a config may hold, with its type, its default and what\n"
    "it does: all of them, or those whose dotted path starts with PREFIX\n"
    "(pipeline, supervision.max, model.layers[]). This is the table the config\n"
    "reader takes its keys from, so nothing else is accepted.\n",
    {{"--markdown", "", "the whole reference as markdown (docs/CONFIG.md's generated part)"}},
    "",
    20};

}  // namespace

int cmd_keys(int argc, char** argv) {
  auto a = parse(argc, argv, 2, keys_spec);
  if (a.has("--help")) {
    std::fputs(a.help.c_str(), stdout);
    return exit_ok;
  }
  if (a.positional.size() > 1) throw usage_error("keys takes at most one PREFIX");
  if (a.has("--markdown")) {
    if (!a.positional.empty()) throw usage_error("--markdown prints every key; give no PREFIX with it");
    std::fputs(config_schema::render_markdown().c_str(), stdout);
    return exit_ok;
  }
  const std::string prefix = a.positional.empty() ? "" : a.positional[0];
  const std::string text = config_schema::render_text(prefix);
  if (text.empty()) {
    std::string top;
    for (const auto& name : config_schema::keys_under("")) top += (top.empty() ? "" : ", ") + name;
    throw usage_error("no config key starts with " + quoted_input(prefix) + " (the sections: " + top + ")");
  }
  std::fputs(text.c_str(), stdout);
  return exit_ok;
}

}  // namespace actorpipe::app
