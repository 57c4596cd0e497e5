#pragma once
// The config's sections, one reader each, and the rules between them.
//
// A section reader reads and checks its own keys only, so the sections can
// be read in any order. What one section requires of another (the pipeline
// of train.batch_size, a fault of pipeline.stages) is a named check, run
// once every section is read; then resolve() fills in what the config
// leaves to defaults that depend on several sections (devices, threads).
#include "runtime/config/reader.hpp"

#include <string>
#include <vector>

namespace actorpipe::config_detail {

/// Reads one top-level section; `e` is null when the config has none.
using section_reader = void (*)(reader&, const entry* e);

struct top_section {
  const char* name;
  section_reader read;
};

/// Every top-level section, in the order suggestions list them and
/// load_config() reads them (any order gives the same config or error).
const std::vector<top_section>& top_sections();

void read_model(reader& r, const entry* e);
void read_data(reader& r, const entry* e);
void read_train(reader& r, const entry* e);
void read_eval(reader& r, const entry* e);
void read_parallel(reader& r, const entry* e);
void read_pipeline(reader& r, const entry* e);
void read_compare(reader& r, const entry* e);
void read_checkpoint(reader& r, const entry* e);
void read_supervision(reader& r, const entry* e);
void read_faults(reader& r, const entry* e);

/// Reads pipeline.devices (a flat list into pipeline.devices, one list per
/// replica into config.replica_devices; `auto` leaves both empty).
void read_devices(reader& r, const entry& e);
/// Stage 0's device (replica 0): the one the config gave, or auto's; once
/// the device lists are known to have one device per stage.
std::string first_device(const config& cfg, const load_env& env);

/// A rule between sections.
struct cross_check {
  const char* name;
  void (*run)(const reader& r);
};

/// Every cross-section check, in the order they run.
const std::vector<cross_check>& cross_checks();

/// Whether the config left its devices to `auto` (written, or no key).
bool devices_auto(const config& cfg, const read_facts& facts);

/// `auto`'s device for the (replica, stage) at index `slot` (d S + r): cpu
/// without a GPU; in a multi-process run the process's cuda:LOCAL_RANK,
/// whatever the slot (one process per GPU, as torchrun has it); in one
/// process GPU slot mod n, round-robin.
std::string auto_device(const load_env& env, int slot);

/// Every stage's device, replica by replica: the lists the config gave, or
/// auto_device for each. In a multi-process run this is the process's own
/// view: its own stages are right; another process's read as this one's GPU
/// (only their kind, cpu or cuda, holds there; device_label names them).
std::vector<std::vector<std::string>> planned_devices(const config& cfg, const load_env& env);

/// Fills in the defaults that depend on several sections; after the checks.
void resolve(reader& r);

}  // namespace actorpipe::config_detail
