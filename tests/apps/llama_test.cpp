// The LLaMA-family features through the real binary, each against an
// outcome computed another way: the plain-PyTorch reference
// (tests/reference/gpt_train.py with llama_reference.py), SentencePiece's own
// spm_encode, the same run on the same ids from another file layout, under
// another schedule or process layout, or generation without the KV cache.
//
// - A tiny LLaMA (token_embedding, 2 llama_blocks with grouped key/value
//   heads, rmsnorm, a tied lm_head; non-default rope_theta and eps) on a
//   uint16 token file, AdamW (decay_1d false) under a cosine warmup, clipped:
//   within 1e-5 of the reference from its initial weights; gpipe, zb-h1,
//   greedy, recompute, launch --nprocs 3 and the two-chunk schedules
//   (2 stages x 2 chunks) bitwise as 1F1B; the same ids as uint32 the same
//   bytes; an untied head at dp 2 x pp 2 within 1e-5 of the reference.
// - Under launch, a process killed mid-step and healed, and one lost for
//   good (the run shrinks to 2 processes): the fault-free bytes.
// - Megatron's indexed .bin/.idx (int32 and uint16) holding the same ids:
//   the flat file's bytes; bad token files refused naming data.path.
// - SentencePiece: `actorpipe tokenize` writes spm_encode's ids; data kind
//   text with a tokenizer trains as the tokenized file; generate decodes.
// - generate's KV cache: greedy text the same with --no-cache, past the
//   window, for a GPT and a LLaMA (and the LLaMA's the reference's).
// - The LLaMA configs refused (exit 2, one line, the key named).
//
// ctest runs each test in a process of its own (ACTORPIPE_TESTS_ONE_BY_ONE):
// the caches below (the initial weights, the reference's runs) hold within
// one test, so the cases that share a reference share a test.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/apps/reference_runs.hpp"
#include "tests/test_util.hpp"

namespace actorpipe {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using testing_util::describe;
using testing_util::gpt_train;
using testing_util::kFloat32Tolerance;
using testing_util::parse_json_file;
using testing_util::python;
using testing_util::reference_dir;
using testing_util::regex_escape;
using testing_util::run;
using testing_util::run_out;
using testing_util::slurp_file;
using testing_util::write;

const std::string fortunes = std::string(ACTORPIPE_SOURCE_DIR) + "/data/fortunes.txt";

constexpr int kVocab = 64;
constexpr int kTokens = 8192;

/// A learnable token stream over kVocab ids, the same on every run: a
/// Markov chain whose next id is (5 prev + 3) mod 64 three times in four,
/// else an id drawn by a fixed LCG.
std::vector<uint32_t> make_ids(size_t n) {
  std::vector<uint32_t> ids(n);
  uint64_t state = 0x2545f4914f6cdd1dULL;
  uint32_t prev = 0;
  for (auto& id : ids) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const uint64_t r = state >> 33;
    id = r % 4 != 0 ? (5 * prev + 3) % kVocab : static_cast<uint32_t>((r >> 8) % kVocab);
    prev = id;
  }
  return ids;
}

/// Little-endian ids of `width` bytes each (2 or 4).
std::string pack(const std::vector<uint32_t>& ids, int width) {
  std::string out;
  out.reserve(ids.size() * static_cast<size_t>(width));
  for (const uint32_t v : ids)
    for (int b = 0; b < width; ++b) out.push_back(static_cast<char>((v >> (8 * b)) & 0xFF));
  return out;
}

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the test machines are little-endian, as the format
  out.append(b, sizeof(T));
}

/// Megatron's indexed pair for `ids`: PREFIX.bin and PREFIX.idx (version 1,
/// dtype code 4 int32 or 8 uint16), the ids cut into sequences of the given
/// lengths and grouped into documents by `doc_idx` (Megatron's
/// document_indices: D entries from 0 to the sequence count). `scattered`:
/// the sequences lie in the .bin in reverse order, each after a gap of
/// three ids no vocabulary holds, so only the offsets find them.
void write_megatron(const fs::path& prefix, const std::vector<uint32_t>& ids, uint8_t code,
                    const std::vector<int32_t>& lengths, const std::vector<int64_t>& doc_idx, bool scattered) {
  const int width = code == 4 ? 4 : 2;
  std::vector<size_t> starts;  // each sequence's first id in `ids`
  size_t at = 0;
  for (const int32_t l : lengths) {
    starts.push_back(at);
    at += static_cast<size_t>(l);
  }
  ASSERT_EQ(at, ids.size()) << "the lengths cover the ids";
  std::string bin;
  std::vector<int64_t> offsets(lengths.size());
  const std::vector<uint32_t> junk = {60000, 65535, 61234};
  for (size_t k = 0; k < lengths.size(); ++k) {
    const size_t i = scattered ? lengths.size() - 1 - k : k;
    if (scattered) bin += pack(junk, width);
    offsets[i] = static_cast<int64_t>(bin.size());
    const auto first = ids.begin() + static_cast<std::ptrdiff_t>(starts[i]);
    bin += pack(std::vector<uint32_t>(first, first + lengths[i]), width);
  }
  if (scattered) bin += pack(junk, width);
  std::string idx("MMIDIDX\0\0", 9);
  put<uint64_t>(idx, 1);
  put<uint8_t>(idx, code);
  put<uint64_t>(idx, lengths.size());
  put<uint64_t>(idx, doc_idx.size());
  for (const int32_t l : lengths) put<int32_t>(idx, l);
  for (const int64_t o : offsets) put<int64_t>(idx, o);
  for (const int64_t d : doc_idx) put<int64_t>(idx, d);
  write(prefix.string() + ".bin", bin);
  write(prefix.string() + ".idx", idx);
}

// AdamW with every setting off its default, the 1-d parameters (the norm
// gains) exempt from a weight decay large enough to matter.
const std::string kAdamw =
    "{type: adamw, lr: 0.001, betas: [0.85, 0.99], eps: 1.0e-6, weight_decay: 0.1, decay_1d: false}";
const std::string kCosine = "{type: cosine, warmup_steps: 2, min_lr: 1.0e-4}";

struct llama_case {
  std::string schedule = "1f1b";
  int stages = 3;
  int microbatches = 4;
  int batch = 8;
  int steps = 12;
  bool tie = true;
  int vocab = kVocab;
  std::string data;            ///< the data map ("": the uint16 token file)
  std::string init;            ///< model.init_from ("": actorpipe's own)
  std::string optimizer = kAdamw;
  std::string lr_schedule = kCosine;
  double clip = 1.0;           ///< 0: no clip_grad_norm
  std::string pipeline_extra;  ///< more pipeline lines ("  recompute: all\n")
  std::string tail;            ///< more top-level YAML (parallel, supervision, faults)
};

/// The data map of a token file.
std::string tokens_data(const std::string& path, const std::string& dtype = "") {
  return "{kind: tokens, path: \"" + path + "\", seq_len: 16, test_fraction: 0.1" +
         (dtype.empty() ? "" : ", dtype: " + dtype) + "}";
}

std::string llama_yaml(const llama_case& c, const std::string& default_data) {
  const std::string v = std::to_string(c.vocab);
  std::ostringstream os;
  os << "model:\n"
        "  layers:\n"
        "    - {type: token_embedding, vocab: " << v << ", dim: 32}\n"
        "    - {type: llama_block, dim: 32, heads: 4, kv_heads: 2, ffn_hidden: 64, rope_theta: 500000.0, "
        "norm_eps: 1.0e-6, repeat: 2}\n"
        "    - {type: rmsnorm, dim: 32, eps: 1.0e-6}\n"
        "    - {type: lm_head, vocab: " << v << ", dim: 32, tie: " << (c.tie ? "true" : "false") << "}\n";
  if (!c.init.empty()) os << "  init_from: \"" << c.init << "\"\n";
  os << "data: " << (c.data.empty() ? default_data : c.data) << "\n"
     << "train:\n"
        "  steps: " << c.steps << "\n"
        "  batch_size: " << c.batch << "\n"
        "  optimizer: " << c.optimizer << "\n";
  if (!c.lr_schedule.empty()) os << "  lr_schedule: " << c.lr_schedule << "\n";
  if (c.clip > 0) os << "  clip_grad_norm: " << c.clip << "\n";
  os << "  seed: 7\n"
        "pipeline:\n"
        "  stages: " << c.stages << "\n"
        "  schedule: " << c.schedule << "\n"
        "  microbatches: " << c.microbatches << "\n"
     << c.pipeline_extra << c.tail;
  return os.str();
}

/// The rate of the update of 0-based step `step` under a cosine schedule,
/// as documented for train.lr_schedule, written out here again.
double expected_cosine_lr(int64_t step, double lr, int64_t warmup, int64_t decay, double min_lr) {
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup + 1);
  if (step >= warmup + decay) return min_lr;
  const double r = static_cast<double>(step - warmup) / static_cast<double>(decay);
  return min_lr + (lr - min_lr) * 0.5 * (1.0 + std::cos(M_PI * r));
}

/// Every id spm_encode --output_format=id prints (one line per input line).
std::vector<uint32_t> parse_ids(const std::string& out) {
  std::vector<uint32_t> ids;
  std::istringstream in(out);
  for (long long v; in >> v;) ids.push_back(static_cast<uint32_t>(v));
  return ids;
}

class Llama : public testing_util::reference_fixture {
protected:
  static std::vector<uint32_t> ids_;
  static std::string tokens16_;  ///< ids_ as a flat uint16 file
  /// The reference's trained weights by the config text it ran (its
  /// initial weights: reference_init's, by "tied" / "untied").
  static std::map<std::string, std::string> references_;

  static void SetUpTestSuite() {
    make_shared_dir("actorpipe_llama_test");
    ids_ = make_ids(kTokens);
    tokens16_ = write(shared_ / "tokens_u16.bin", pack(ids_, 2));
  }

  static void TearDownTestSuite() {
    remove_shared_dir();
    references_.clear();
  }

  static std::string yaml(const llama_case& c) { return llama_yaml(c, tokens_data(tokens16_)); }

  /// The reference's initial weights for a tied or an untied head (written once).
  static std::string init_for(bool tie) {
    llama_case c;
    c.tie = tie;
    return reference_init(tie ? "tied" : "untied", yaml(c));
  }

  static llama_case from_init(llama_case c) {
    c.init = init_for(c.tie);
    return c;
  }

  /// The reference's training of `c` (the schedule and the process layout
  /// do not change its arithmetic; parallel.dp does): its saved weights,
  /// "" after a failure. Run once per config.
  static std::string reference(llama_case c) {
    c.schedule = "1f1b";
    c.pipeline_extra.clear();
    const std::string text = yaml(c);
    if (auto it = references_.find(text); it != references_.end()) return it->second;
    const std::string name = "ref_" + std::to_string(references_.size());
    const std::string cfg = write(shared_ / (name + ".yaml"), text);
    const std::string out = (shared_ / (name + ".pt")).string();
    auto r = run(python, {gpt_train, cfg, "--out", out, "--quiet"});
    EXPECT_EQ(r.code, 0) << cfg << ": " << describe(r);
    if (r.code != 0) return "";
    return references_[text] = out;
  }

  /// train_yaml on `c`'s config.
  run_out train_run(const llama_case& c, const std::string& name, const std::vector<std::string>& extra = {},
                    int nprocs = 1) {
    return train_yaml(yaml(c), name, extra, nprocs);
  }

  /// `train CONFIG` exits 2 before any step, with one line on stderr:
  /// CONFIG:LINE:COL: KEY: ..., holding `also` too.
  void expect_refused(const std::string& name, const std::string& yaml_text, const std::string& key,
                      const std::string& also = "") {
    SCOPED_TRACE(name);
    const std::string cfg = write(dir_ / (name + ".yaml"), yaml_text);
    const std::string save = (dir_ / (name + ".pt")).string();
    auto r = run(ACTORPIPE_BIN, {"train", cfg, "--quiet", "--samples", "0", "--save", save}, 60);
    EXPECT_EQ(r.code, 2) << describe(r);
    const std::string line = testing_util::first_line(r.err);
    EXPECT_EQ(r.err, line + "\n") << "one line on stderr\n" << describe(r);
    const std::regex form("^" + regex_escape(cfg) + ":[0-9]+:[0-9]+: " + regex_escape(key) + ": ");
    EXPECT_TRUE(std::regex_search(line, form)) << "wanted " << cfg << ":LINE:COL: " << key << ": ...\n" << describe(r);
    if (!also.empty()) {
      EXPECT_NE(line.find(also), std::string::npos) << "wanted '" << also << "'\n" << describe(r);
    }
    EXPECT_EQ(r.out.find("step "), std::string::npos) << "no step should run\n" << describe(r);
    EXPECT_FALSE(fs::exists(save));
  }
};

std::vector<uint32_t> Llama::ids_;
std::string Llama::tokens16_;
std::map<std::string, std::string> Llama::references_;

// -- training against the reference, under every layout ---------------------------------

// The tied LLaMA from the reference's initial weights, 6 updates of AdamW
// (decay_1d false) under a cosine warmup, clipped at 1.0, 3 stages of 4
// microbatches: each update's rate the documented one, the weights within
// 1e-5 of the reference's; then bitwise as that run: gpipe, zb-h1, greedy,
// every stage recomputing, 3 processes, 2 stages of 2 chunks each under
// interleaved, zb-v and dualpipev, and the same ids as a uint32 file.
TEST_F(Llama, TiedMatchesTheReferenceAndEveryLayoutSavesTheSameBytes) {
  NEED_TORCH();
  const llama_case c = from_init(llama_case{});
  ASSERT_FALSE(c.init.empty());
  const std::string ref = reference(c);
  ASSERT_FALSE(ref.empty());
  const run_out one = train_run(c, "tied_1f1b");
  ASSERT_TRUE(one.ok);
  {
    const json& steps = one.results["steps"];
    ASSERT_EQ(steps.size(), 12u) << one.results.dump(1);
    for (int64_t s = 0; s < 12; ++s) {
      SCOPED_TRACE("step " + std::to_string(s) + ": " + steps[s].dump());
      const double want = expected_cosine_lr(s, 1e-3, 2, 10, 1e-4);
      EXPECT_NEAR(steps[s]["lr"].get<double>(), want, 1e-8 * want);
      EXPECT_TRUE(std::isfinite(steps[s]["loss"].get<double>()));
      std::cout << "  step " << s << ": loss " << steps[s]["loss"] << ", grad_norm " << steps[s]["grad_norm"] << "\n";
    }
    // ln 64 = 4.16 untrained; the Markov stream is learnable.
    EXPECT_LT(steps[11]["loss"].get<double>(), steps[0]["loss"].get<double>()) << steps.dump(1);
  }
  expect_close(ref, one.save, kFloat32Tolerance, "llama tied, 1f1b vs the reference");

  struct layout {
    std::string name;
    llama_case c;
    int nprocs = 1;
  };
  std::vector<layout> layouts;
  auto add = [&](const std::string& name, auto edit, int nprocs = 1) {
    layout l{name, c, nprocs};
    edit(l.c);
    layouts.push_back(l);
  };
  add("gpipe", [](llama_case& l) { l.schedule = "gpipe"; });
  add("zb-h1", [](llama_case& l) { l.schedule = "zb-h1"; });
  add("greedy", [](llama_case& l) { l.schedule = "greedy"; });
  add("recompute_all", [](llama_case& l) { l.pipeline_extra = "  recompute: all\n"; });
  add("launch3", [](llama_case&) {}, 3);
  for (const std::string s : {"interleaved", "zb-v", "dualpipev"})
    add(s + "_2x2", [s](llama_case& l) {
      l.schedule = s;
      l.stages = 2;
    });
  add("uint32", [this](llama_case& l) {
    l.data = tokens_data(write(dir_ / "tokens_u32.bin", pack(ids_, 4)), "uint32");
  });
  for (const auto& l : layouts) {
    const run_out got = train_run(l.c, l.name, {}, l.nprocs);
    ASSERT_TRUE(got.ok) << l.name;
    if (l.name != "uint32" && l.name != "launch3") {
      EXPECT_EQ(got.results["schedule"].get<std::string>().rfind(l.c.schedule, 0), 0u)
          << l.name << ": " << got.results["schedule"];
    }
    expect_same_bytes(one.save, got.save, l.name + " vs 1f1b over 3 stages");
  }
}

// An untied head (a parameter of its own) at dp 2 x pp 2 in one process:
// each replica's half of the batch in 4 microbatches, the gradients summed
// over the replicas: within 1e-5 of the reference, which splits the batch
// the same way.
TEST_F(Llama, UntiedDataParallelTwoByPipelineTwoMatchesTheReference) {
  NEED_TORCH();
  llama_case c;
  c.tie = false;
  c.stages = 2;
  c.tail = "parallel: {dp: 2}\n";
  c = from_init(c);
  ASSERT_FALSE(c.init.empty());
  const std::string ref = reference(c);
  ASSERT_FALSE(ref.empty());
  const run_out got = train_run(c, "untied_dp2_pp2");
  ASSERT_TRUE(got.ok);
  expect_close(ref, got.save, kFloat32Tolerance, "llama untied, dp 2 x pp 2 vs the reference");
}

// -- faults under launch ---------------------------------------------------------------

// Stage 2's process SIGKILLed right after B1 of step 3: with a replacement
// (a heal from its keeper's memory) and without one (replace_timeout_s 0:
// its stage goes on in another process, over 2), the weights end on the
// bytes of the fault-free run in one process.
TEST_F(Llama, AHealAndAShrinkUnderLaunchEndOnTheFaultFreeBytes) {
  llama_case c;
  const run_out clean = train_run(c, "clean");
  ASSERT_TRUE(clean.ok);
  const std::string fault =
      "faults:\n"
      "  inject:\n"
      "    - {kind: kill_process, stage: 2, step: 3, after_op: B1}\n";

  llama_case heal = c;
  heal.tail = "supervision: {max_restarts: 2, heartbeat_timeout_s: 2}\n" + fault;
  const run_out healed = train_run(heal, "healed", {}, 3);
  ASSERT_TRUE(healed.ok);
  EXPECT_EQ(healed.results["supervision"]["restarts"].get<int>(), 1) << healed.results["supervision"].dump();
  expect_same_bytes(clean.save, healed.save, "healed under launch vs fault-free in one process");

  llama_case shrink = c;
  shrink.tail = "supervision: {max_restarts: 2, heartbeat_timeout_s: 2, replace_timeout_s: 0}\n" + fault;
  const run_out shrunk = train_run(shrink, "shrunk", {}, 3);
  ASSERT_TRUE(shrunk.ok);
  EXPECT_EQ(shrunk.results["supervision"]["restarts"].get<int>(), 1) << shrunk.results["supervision"].dump();
  EXPECT_NE(shrunk.r.err.find("goes on over 2 processes without rank 2"), std::string::npos) << describe(shrunk.r);
  expect_same_bytes(clean.save, shrunk.save, "shrunk to 2 processes under launch vs fault-free in one process");
}

// -- token files -------------------------------------------------------------------------

// The flat file's ids as Megatron indexed pairs, 6 sequences of lengths
// from 1 to 3000 in 3 documents: int32 (code 4) with the sequences
// scattered over the .bin in reverse order between ids past the vocab, and
// uint16 (code 8) laid out as Megatron writes it. Each trains to the flat
// file's bytes (3 updates, 1 stage; data.dtype left at uint16: the .idx
// names its own).
TEST_F(Llama, MegatronIndexedPairsTrainAsTheFlatFile) {
  const std::vector<int32_t> lengths = {1000, 1, 2500, 37, 1654, 3000};
  const std::vector<int64_t> docs = {0, 2, 3, 6};
  write_megatron(dir_ / "mega32", ids_, 4, lengths, docs, /*scattered=*/true);
  write_megatron(dir_ / "mega16", ids_, 8, lengths, docs, /*scattered=*/false);
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(slurp_file(dir_ / "mega16.bin"), slurp_file(tokens16_)) << "contiguous uint16: the flat file's bytes";
  llama_case c;
  c.stages = 1;
  c.microbatches = 2;
  c.steps = 3;
  const run_out flat = train_run(c, "flat");
  ASSERT_TRUE(flat.ok);
  for (const std::string name : {"mega32", "mega16"}) {
    llama_case m = c;
    m.data = tokens_data((dir_ / (name + ".bin")).string());
    const run_out got = train_run(m, name);
    ASSERT_TRUE(got.ok);
    expect_same_bytes(flat.save, got.save, name + " .bin/.idx vs the flat file");
  }
}

// Token files refused at load: exit 2, one line naming data.path and what
// is wrong with the file.
TEST_F(Llama, BadTokenFilesExitTwoNamingDataPath) {
  llama_case c;
  c.stages = 1;
  c.microbatches = 1;
  c.steps = 1;
  auto with_data = [&c](const std::string& data) {
    llama_case b = c;
    b.data = data;
    return yaml(b);
  };
  // A uint16 file of an odd number of bytes.
  const std::string odd = write(dir_ / "odd.u16", pack(ids_, 2) + std::string(1, '\x01'));
  expect_refused("odd_bytes", with_data(tokens_data(odd)), "data.path",
                 std::to_string(2 * kTokens + 1) + " bytes is not a whole number of uint16 tokens");
  // Id 70 of a vocabulary of 64, at position 1234.
  std::vector<uint32_t> bad = ids_;
  bad[1234] = 70;
  const std::string past = write(dir_ / "past_vocab.u16", pack(bad, 2));
  expect_refused("id_past_vocab", with_data(tokens_data(past)), "data.path",
                 "token id 70 at position 1234 is at or past the embedding's vocab 64");

  // Megatron pairs, each spoiled one way.
  const std::vector<int32_t> lengths = {4000, 4192};
  const std::vector<int64_t> docs = {0, 2};
  auto pair = [&](const std::string& name) {
    write_megatron(dir_ / name, ids_, 8, lengths, docs, false);
    return (dir_ / (name + ".bin")).string();
  };
  auto poke = [](const std::string& file, size_t at, char v) {
    std::string bytes = slurp_file(file);
    ASSERT_LT(at, bytes.size());
    bytes[at] = v;
    write(file, bytes);
  };
  {
    const std::string bin = pair("magic");
    poke(dir_ / "magic.idx", 0, 'X');
    expect_refused("bad_magic", with_data(tokens_data(bin)), "data.path", "MMIDIDX");
  }
  {
    const std::string bin = pair("size");
    write(dir_ / "size.idx", slurp_file(dir_ / "size.idx") + std::string(8, '\0'));
    expect_refused("idx_size", with_data(tokens_data(bin)), "data.path",
                   "but 2 sequences and 2 documents take " + std::to_string(34 + 2 * 12 + 2 * 8));
  }
  {
    const std::string bin = pair("short_bin");
    const std::string bytes = slurp_file(bin);
    write(bin, bytes.substr(0, bytes.size() - 2));
    expect_refused("past_the_bin", with_data(tokens_data(bin)), "data.path", "sequence 1 ");
  }
  {
    const std::string bin = pair("code3");
    poke(dir_ / "code3.idx", 17, 3);
    expect_refused("dtype_code_3", with_data(tokens_data(bin)), "data.path", "dtype code 3");
  }
}

// -- SentencePiece ---------------------------------------------------------------------

// A BPE model of 400 pieces trained by spm_train on the first ~300 KB of
// fortunes.txt. `tokenize` writes spm_encode's ids (line by line) packed
// as uint16, and as uint32 with --dtype uint32; data kind text with the
// tokenizer trains to the bytes of data kind tokens on that file; generate
// --tokenizer prints text that starts with the prompt, the same with and
// without the KV cache; a --model that is no model is refused naming it.
TEST_F(Llama, TokenizeWritesSpmEncodesIdsAndTextTrainsAsItsTokenFile) {
  if (!fs::exists(fortunes)) GTEST_SKIP() << fortunes << " is made by scripts/setup.sh";
  for (const char* tool : {"/usr/bin/spm_train", "/usr/bin/spm_encode"})
    if (access(tool, X_OK) != 0) GTEST_SKIP() << tool << " is missing (Debian's sentencepiece package)";
  std::string text = slurp_file(fortunes);
  ASSERT_GT(text.size(), 300000u);
  text.resize(text.rfind('\n', 300000) + 1);  // whole lines
  const std::string input = write(dir_ / "fortunes_300k.txt", text);
  const std::string prefix = (dir_ / "spm").string(), model = prefix + ".model";
  auto trained = run("/usr/bin/spm_train", {"--input=" + input, "--model_prefix=" + prefix, "--vocab_size=400",
                                            "--model_type=bpe", "--character_coverage=1.0", "--num_threads=2",
                                            "--minloglevel=2"},
                     120);
  ASSERT_EQ(trained.code, 0) << describe(trained);
  std::cout << "  spm_train: " << trained.wall_s << " s\n";
  auto encoded = run("/usr/bin/spm_encode", {"--model=" + model, "--output_format=id", "--input=" + input}, 60);
  ASSERT_EQ(encoded.code, 0) << describe(encoded);
  const std::vector<uint32_t> want = parse_ids(encoded.out);
  ASSERT_GT(want.size(), 10000u);

  const std::string out16 = (dir_ / "fortunes_u16.bin").string(), out32 = (dir_ / "fortunes_u32.bin").string();
  auto t16 = run(ACTORPIPE_BIN, {"tokenize", "--model", model, input, out16}, 60);
  ASSERT_EQ(t16.code, 0) << describe(t16);
  EXPECT_NE(t16.out.find(std::to_string(want.size()) + " tokens (uint16)"), std::string::npos) << describe(t16);
  EXPECT_TRUE(slurp_file(out16) == pack(want, 2)) << out16 << " is not spm_encode's ids as uint16 ("
                                                  << fs::file_size(out16) << " bytes, want " << 2 * want.size() << ")";
  auto t32 = run(ACTORPIPE_BIN, {"tokenize", "--model", model, "--dtype", "uint32", input, out32}, 60);
  ASSERT_EQ(t32.code, 0) << describe(t32);
  EXPECT_TRUE(slurp_file(out32) == pack(want, 4)) << out32 << " is not spm_encode's ids as uint32";

  // The same ids from the text at load and from the token file.
  llama_case c;
  c.vocab = 400;
  c.stages = 2;
  c.microbatches = 2;
  c.steps = 2;
  c.data = "{kind: text, path: \"" + input + "\", tokenizer: \"" + model + "\", seq_len: 16, test_fraction: 0.1}";
  const run_out from_text = train_run(c, "from_text");
  ASSERT_TRUE(from_text.ok);
  llama_case t = c;
  t.data = tokens_data(out16);
  const run_out from_tokens = train_run(t, "from_tokens");
  ASSERT_TRUE(from_tokens.ok);
  expect_same_bytes(from_tokens.save, from_text.save, "data kind text with the tokenizer vs its token file");

  const std::string prompt = "The Bionic Dog";
  auto generate = [&](bool cache) {
    std::vector<std::string> args = {"generate", (dir_ / "from_text.yaml").string(), "--load", from_text.save,
                                     "--prompt", prompt, "--tokenizer", model, "--temperature", "0", "--tokens", "24"};
    if (!cache) args.push_back("--no-cache");
    return run(ACTORPIPE_BIN, args, 60);
  };
  const auto cached = generate(true), uncached = generate(false);
  ASSERT_EQ(cached.code, 0) << describe(cached);
  ASSERT_EQ(uncached.code, 0) << describe(uncached);
  EXPECT_EQ(cached.out.rfind(prompt, 0), 0u) << "the text starts with the prompt\n" << describe(cached);
  EXPECT_GT(cached.out.size(), prompt.size() + 1) << describe(cached);
  EXPECT_EQ(cached.out, uncached.out) << "with the KV cache:\n"
                                      << describe(cached) << "\nwithout:\n"
                                      << describe(uncached);

  const std::string not_a_model = write(dir_ / "not_a.model", "not a sentencepiece model\n");
  const std::string out_bad = (dir_ / "bad.bin").string();
  auto bad = run(ACTORPIPE_BIN, {"tokenize", "--model", not_a_model, input, out_bad}, 60);
  EXPECT_EQ(bad.code, 2) << describe(bad);
  EXPECT_NE(bad.err.find(not_a_model), std::string::npos) << "the message names the model\n" << describe(bad);
  EXPECT_FALSE(fs::exists(out_bad));
}

// -- generate's KV cache --------------------------------------------------------------------

// The reference LLaMA's greedy decoding over a window of data.seq_len
// tokens (bytes): what `actorpipe generate --temperature 0` prints.
const char* const llama_greedy = R"(import sys
sys.path.insert(0, sys.argv[1])
import torch, yaml, llama_reference
torch.set_num_threads(1)
cfg = yaml.safe_load(open(sys.argv[2]))
layers = []
for spec in cfg["model"]["layers"]:
    spec = dict(spec)
    layers += [dict(spec) for _ in range(spec.pop("repeat", 1))]
model = llama_reference.build(layers)
model.load_state_dict(torch.load(sys.argv[3]), strict=True)
model.eval()
window = int(cfg["data"]["seq_len"])
out = list(sys.argv[4].encode())[-window:]
with torch.no_grad():
    for _ in range(int(sys.argv[5])):
        out.append(int(model(torch.tensor([out[-window:]]))[0, -1].argmax()))
sys.stdout.buffer.write(bytes(out) + b"\n")
)";

// Initial weights for a GPT and a LLaMA config (pairs CONFIG OUT after the
// reference directory): the reference model seeded, its matrices drawn
// wider than the usual init and the embedding rows all of one norm, so that
// greedy decoding does not settle on one byte at once (as
// tests/apps/generate_test.cpp's).
const char* const wide_init = R"(import sys
sys.path.insert(0, sys.argv[1])
import torch, yaml, gpt_train
for cfg_path, out in zip(sys.argv[2::2], sys.argv[3::2]):
    layers = gpt_train.expand_layers(yaml.safe_load(open(cfg_path))["model"]["layers"])
    torch.manual_seed(3)
    model = gpt_train.build_model(layers)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.3)
        emb = model[0].wte.weight if layers[0]["type"] == "embedding" else model[0].weight
        emb.copy_(emb / emb.norm(dim=1, keepdim=True) * 4.0)
    torch.save(model.state_dict(), out)
)";

// A GPT (learned positions, max_seq 80) and a LLaMA (rotary positions,
// data.seq_len 80) from wide initial weights, each trained 4 steps on byte
// text and saved: greedy decoding of 100 tokens after an 8-byte prompt (64
// and more from the cache, then the window slides after 72) prints the
// same text with the KV cache as with --no-cache, and the LLaMA's is the
// reference model's.
TEST_F(Llama, GreedyTextIsTheSameWithAndWithoutTheKvCache) {
  NEED_TORCH();
  std::string corpus;
  for (int i = 0; i < 100; ++i) corpus += "the cat sat on the mat. the dog ate the log.\n";
  const std::string text = write(dir_ / "corpus.txt", corpus);
  llama_case l;
  l.vocab = 256;
  l.data = "{kind: text, path: \"" + text + "\", seq_len: 80, test_fraction: 0.1}";
  l.init = (dir_ / "llama_init.pt").string();
  l.stages = 1;
  l.microbatches = 1;
  l.batch = 16;
  l.steps = 4;
  l.optimizer = "{type: adam, lr: 0.001}";
  l.lr_schedule.clear();
  l.clip = 0;
  const std::string llama = llama_yaml(l, "");
  // A GPT's model section, the rest as the LLaMA's.
  const std::string gpt_init = (dir_ / "gpt_init.pt").string();
  const std::string gpt =
      "model:\n"
      "  layers:\n"
      "    - {type: embedding, vocab: 256, dim: 32, max_seq: 80}\n"
      "    - {type: gpt_block, dim: 32, heads: 4, mlp_hidden: 64, repeat: 2}\n"
      "    - {type: layernorm, dim: 32}\n"
      "    - {type: lm_head, vocab: 256, dim: 32, tie: true}\n"
      "  init_from: \"" + gpt_init + "\"\n" +
      llama.substr(llama.find("data: "));
  const std::string script = write(dir_ / "wide_init.py", wide_init);
  auto init = run(python, {script, reference_dir, write(dir_ / "gpt.yaml", gpt), gpt_init,
                           write(dir_ / "llama.yaml", llama), l.init});
  ASSERT_EQ(init.code, 0) << describe(init);

  const std::string prompt = "the cat ";
  const int tokens = 100;
  const std::vector<std::pair<std::string, std::string>> models = {{"gpt", gpt}, {"llama", llama}};
  for (const auto& [name, cfg_text] : models) {
    SCOPED_TRACE(name);
    const run_out trained = train_yaml(cfg_text, name);
    ASSERT_TRUE(trained.ok);
    const std::string cfg = (dir_ / (name + ".yaml")).string();
    auto generate = [&](bool cache) {
      std::vector<std::string> args = {"generate", cfg, "--load", trained.save, "--prompt", prompt,
                                       "--temperature", "0", "--tokens", std::to_string(tokens)};
      if (!cache) args.push_back("--no-cache");
      return run(ACTORPIPE_BIN, args, 60);
    };
    const auto cached = generate(true), uncached = generate(false);
    ASSERT_EQ(cached.code, 0) << describe(cached);
    ASSERT_EQ(uncached.code, 0) << describe(uncached);
    ASSERT_EQ(cached.out.size(), prompt.size() + tokens + 1) << describe(cached);
    EXPECT_EQ(cached.out.rfind(prompt, 0), 0u) << describe(cached);
    // Not one byte over and over: the cache is in play at every position.
    const std::string drawn = cached.out.substr(prompt.size(), tokens);
    EXPECT_GE(std::set<char>(drawn.begin(), drawn.end()).size(), 4u) << describe(cached);
    EXPECT_EQ(cached.out, uncached.out) << "with the KV cache:\n"
                                        << describe(cached) << "\nwithout:\n"
                                        << describe(uncached);
    std::cout << "  " << name << " greedy: " << json(cached.out).dump(-1, ' ', false, json::error_handler_t::replace)
              << "\n";
    if (name == "llama") {
      const std::string greedy = write(dir_ / "llama_greedy.py", llama_greedy);
      auto py = run(python, {greedy, reference_dir, cfg, trained.save, prompt, std::to_string(tokens)});
      ASSERT_EQ(py.code, 0) << describe(py);
      EXPECT_EQ(cached.out, py.out) << "actorpipe:\n" << describe(cached) << "\nreference:\n" << describe(py);
    }
  }
}

// The configs these layers and data refuse are rows of the bad-config
// table (tests/runtime/config/bad_configs.hpp: Llama*, Token*, LmHead*),
// which the config test and the CLI's bad-config test both run, each
// against its exact message and exit 2.

// configs/llama_fortunes.yaml, the app docs/TRANSFORMERS.md walks through,
// trains (a few steps, its tokenizer scripts/setup.sh's), evaluates, and
// generates text through its tokenizer.
TEST_F(Llama, TheShippedFortunesAppTrainsAndGenerates) {
  const std::string data = std::string(ACTORPIPE_SOURCE_DIR) + "/data/";
  if (!fs::exists(data + "fortunes.txt") || !fs::exists(data + "fortunes_spm.model"))
    GTEST_SKIP() << data << "fortunes.txt and fortunes_spm.model are made by scripts/setup.sh";
  std::string yaml = slurp_file(std::string(ACTORPIPE_SOURCE_DIR) + "/configs/llama_fortunes.yaml");
  ASSERT_FALSE(yaml.empty());
  for (size_t at = yaml.find("../data/"); at != std::string::npos; at = yaml.find("../data/", at))
    yaml.replace(at, 8, data);
  const auto every = yaml.find("every: 250");
  ASSERT_NE(every, std::string::npos);
  yaml.replace(every, 10, "every: 2");
  const run_out got = train_yaml(yaml, "llama_fortunes", {"--steps", "3"});
  ASSERT_TRUE(got.ok);
  ASSERT_EQ(got.results["evals"].size(), 2u) << got.results.dump(1);
  EXPECT_LT(got.results["evals"][1]["loss"].get<double>(), 7.7) << "ln 2048 = 7.62 untrained";
  const std::string prompt = "A programmer is";
  auto g = run(ACTORPIPE_BIN, {"generate", (dir_ / "llama_fortunes.yaml").string(), "--load", got.save, "--prompt",
                               prompt, "--tokens", "12", "--seed", "7"}, 60);
  ASSERT_EQ(g.code, 0) << describe(g);
  EXPECT_EQ(g.out.rfind(prompt, 0), 0u) << describe(g);
  EXPECT_GT(g.out.size(), prompt.size() + 2) << describe(g);
}

}  // namespace
}  // namespace actorpipe
