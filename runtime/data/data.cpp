// Data sets, the train/test split and per-step batch slicing.
#include "runtime/data/data.hpp"
#include "runtime/util/seed.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <zlib.h>

#include <cerrno>
#include <cfloat>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "runtime/data/tokenizer.hpp"
#include "runtime/data/tokens.hpp"
#include "runtime/files/file_io.hpp"
#include "runtime/files/state_dict.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe {

namespace {

/// The width the model expects: the first linear's in (a leading layernorm
/// fixes it too). 0 when the model does not say.
int64_t model_inputs(const config& cfg) {
  for (const auto& l : cfg.model.layers) {
    if (l.type == "embedding" || l.type == "token_embedding") return 0;  // tokens
    if (l.type == "linear") return l.in;
    if (l.type == "layernorm") return l.dim;
  }
  return 0;
}

/// The number of logits: the last linear's out. 0 when there is none.
int64_t model_classes(const config& cfg) {
  for (auto it = cfg.model.layers.rbegin(); it != cfg.model.layers.rend(); ++it)
    if (it->type == "linear") return it->out;
    else if (it->type == "lm_head") return it->vocab;
  return 0;
}

/// One data set before the split: x float32 [N, F], y int64 [N].
struct table {
  at::Tensor x, y;
};

/// Reads one line of any length; false at end of file. `bytes` counts the
/// uncompressed bytes read so far.
bool read_line(gzFile f, std::string& line, int64_t& bytes) {
  line.clear();
  char buf[8192];
  while (gzgets(f, buf, sizeof buf) != nullptr) {
    const size_t n = std::strlen(buf);
    line.append(buf, n);
    bytes += static_cast<int64_t>(n);
    if (!line.empty() && line.back() == '\n') return true;
  }
  return !line.empty();
}

/// What is wrong with a gzip stream, or "" when zlib saw nothing wrong.
/// The place is the compressed offset where inflate stopped (gzoffset) and
/// the uncompressed bytes that came out before it.
std::string gzip_problem(gzFile f, const std::string& path, int64_t bytes) {
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  if (err == Z_OK || err == Z_STREAM_END) return "";
  std::string what = msg != nullptr && *msg != '\0' ? msg : "unknown error";
  if (what.rfind(path + ": ", 0) == 0) what.erase(0, path.size() + 2);  // zlib names the file too
  const std::string place = " at compressed byte " + std::to_string(gzoffset(f)) + ", after " +
                            std::to_string(bytes) + " uncompressed bytes";
  if (err == Z_BUF_ERROR) return "gzip stream is truncated (" + what + "): it ends" + place;
  // Where zlib noticed: a bad CRC shows only at the very end.
  if (err == Z_DATA_ERROR) return "gzip stream is corrupt (" + what + "): zlib stopped" + place;
  return "read error: " + what;
}

/// Reads a gzip stream to its end, for what zlib finds wrong further on: a
/// corrupt block can inflate to garbage before the error (or the CRC at the
/// very end) shows.
void drain(gzFile f, int64_t& bytes) {
  char buf[65536];
  for (int n; (n = gzread(f, buf, sizeof buf)) > 0;) bytes += n;
}

std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r\n");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r\n") - b + 1);
}

/// csv or csv.gz: gzopen reads plain files transparently (it checks the gzip
/// magic bytes), so one path serves both.
table read_csv(const config& cfg) {
  const std::string& path = cfg.data.path;
  // A path may hold control bytes too: shown escaped.
  const std::string shown = quoted_input(path, "", 4096);
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw cfg.error_at("data.path", shown + ": cannot open: " + std::strerror(errno));
  std::unique_ptr<gzFile_s, int (*)(gzFile)> guard(f, gzclose);

  int64_t bytes = 0;
  // A row that does not parse may be the damage of a broken gzip stream
  // (a truncated last line, garbage before a corrupt block is noticed):
  // then the stream is what to report, not the row.
  auto row_error = [&](const std::string& msg) {
    if (!gzdirect(f)) drain(f, bytes);
    const std::string gz = gzip_problem(f, path, bytes);
    return cfg.error_at("data.path", shown + (gz.empty() ? ":" + msg : ": " + gz));
  };

  std::vector<float> xs;
  std::vector<int64_t> ys;
  int64_t columns = 0;
  int64_t row = 0;
  std::string line;
  while (read_line(f, line, bytes)) {
    ++row;
    const std::string text = trim(line);
    if (text.empty()) continue;  // a trailing blank line is common
    std::vector<std::string> cells;
    size_t start = 0;
    for (;;) {
      const size_t comma = text.find(',', start);
      cells.push_back(trim(text.substr(start, comma == std::string::npos ? std::string::npos : comma - start)));
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
    const auto found = static_cast<int64_t>(cells.size());
    if (columns == 0) {
      if (found < 2)
        throw row_error(std::to_string(row) + ": expected at least 2 columns (features, label), found " +
                        std::to_string(found));
      columns = found;
    } else if (found != columns) {
      throw row_error(std::to_string(row) + ": expected " + std::to_string(columns) + " columns, found " +
                      std::to_string(found));
    }
    for (int64_t c = 0; c < columns; ++c) {
      const std::string& cell = cells[static_cast<size_t>(c)];
      char* end = nullptr;
      errno = 0;
      const double v = cell.empty() ? 0.0 : std::strtod(cell.c_str(), &end);
      auto cell_error = [&](const std::string& what) {
        return row_error(std::to_string(row) + ": column " + std::to_string(c + 1) + ": " + quoted_input(cell) + what);
      };
      if (cell.empty() || *end != '\0' || errno == ERANGE) throw cell_error(" is not a number");
      if (c + 1 < columns) {
        // strtod takes nan and inf; one of them poisons every step.
        if (!std::isfinite(v)) throw cell_error(" is not a finite number");
        if (std::fabs(v) > FLT_MAX) throw cell_error(" is beyond the float32 range (at most 3.4e+38)");
        xs.push_back(static_cast<float>(v));
      } else {
        if (v != std::floor(v) || std::fabs(v) > 9e15)
          throw row_error(std::to_string(row) + ": label " + quoted_input(cell) + " is not an integer");
        ys.push_back(static_cast<int64_t>(v));
      }
    }
  }
  if (const std::string gz = gzip_problem(f, path, bytes); !gz.empty())
    throw cfg.error_at("data.path", shown + ": " + gz);
  if (ys.empty()) throw cfg.error_at("data.path", shown + ": no data rows");

  const auto n = static_cast<int64_t>(ys.size());
  table t;
  t.x = at::from_blob(xs.data(), {n, columns - 1}, at::kFloat).clone();
  t.y = at::from_blob(ys.data(), {n}, at::kLong).clone();
  return t;
}

// A token stream (int64) as samples: sample i is tokens [i T, (i + 1) T + 1),
// x its first T, y its last T (the next token of each). `unit` names what
// the stream counts ("bytes", "tokens") for the message.
table token_windows(const config& cfg, const at::Tensor& raw, const std::string& unit) {
  const int64_t T = cfg.data.seq_len;
  const int64_t size = raw.numel();
  const int64_t n = size > 0 ? (size - 1) / T : 0;
  if (n < cfg.train.batch_size)
    throw cfg.error_at("data.path", quoted_input(cfg.data.path, "", 4096) + " holds " + std::to_string(size) + " " +
                                        unit + ": " + std::to_string(n) + " samples of data.seq_len " +
                                        std::to_string(T) + " (+1), fewer than one batch of train.batch_size " +
                                        std::to_string(cfg.train.batch_size));
  table t;
  t.x = raw.slice(0, 0, n * T).view({n, T}).clone();
  t.y = raw.slice(0, 1, n * T + 1).view({n, T}).clone();
  return t;
}

// The ids `raw` holds fit the model's embedding.
void check_vocab(const config& cfg, const at::Tensor& raw, const std::string& path) {
  const std::string bad = first_token_outside(raw, cfg.model.layers.front().vocab, path);
  if (!bad.empty()) throw cfg.error_at("data.path", bad);
}

// kind: text. The file's bytes are the tokens, or with data.tokenizer its
// SentencePiece ids (runtime/data/tokenizer.hpp).
table read_text(const config& cfg) {
  const std::string& path = cfg.data.path;
  std::string bytes;
  try {
    bytes = read_file_bytes(path);
  } catch (const std::exception& e) {
    throw cfg.error_at("data.path", e.what());
  }
  if (cfg.data.tokenizer.empty()) {
    auto raw = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
    std::memcpy(raw.data_ptr(), bytes.data(), bytes.size());
    return token_windows(cfg, raw.to(at::kLong), "bytes");
  }
  std::vector<int64_t> ids;
  try {
    const tokenizer tok(cfg.data.tokenizer);
    if (tok.vocab_size() > cfg.model.layers.front().vocab)
      throw cfg.error_at("data.tokenizer", cfg.data.tokenizer + " has " + std::to_string(tok.vocab_size()) +
                                               " tokens, more than the embedding's vocab " +
                                               std::to_string(cfg.model.layers.front().vocab));
    ids = tok.encode(bytes);
  } catch (const tokenizer_error& e) {
    throw cfg.error_at("data.tokenizer", e.what());
  }
  const at::Tensor raw = at::from_blob(ids.data(), {static_cast<int64_t>(ids.size())}, at::kLong).clone();
  return token_windows(cfg, raw, "tokens");
}

// kind: tokens. A flat file of ids (nanoGPT) or Megatron's indexed pair.
table read_tokens(const config& cfg) {
  at::Tensor raw;
  try {
    raw = read_token_file(cfg.data.path, cfg.data.token_dtype);
  } catch (const token_file_error& e) {
    throw cfg.error_at("data.path", e.what());
  }
  check_vocab(cfg, raw, cfg.data.path);
  return token_windows(cfg, raw, "tokens");
}

/// A torch.save'd dict with "x" [N, F] floats and "y" [N] integers.
table read_tensors(const config& cfg) {
  const std::string& path = cfg.data.path;
  named_tensors loaded;
  try {
    loaded = load_tensors(path);
  } catch (const std::runtime_error& e) {
    throw cfg.error_at("data.path", e.what());
  }
  at::Tensor x, y;
  std::string names;
  for (const auto& [name, t] : loaded) {
    if (name == "x") x = t;
    if (name == "y") y = t;
    names += (names.empty() ? "" : ", ") + name;
  }
  if (!x.defined() || !y.defined())
    throw cfg.error_at("data.path", path + ": needs tensors \"x\" and \"y\", found: " +
                                        (names.empty() ? std::string("none") : names));
  if (x.dim() != 2 || !(x.is_floating_point() || x.scalar_type() == at::kLong || x.scalar_type() == at::kInt))
    throw cfg.error_at("data.path", path + ": \"x\" must be a 2-D float tensor [N, F], got " +
                                        std::string(c10::toString(x.scalar_type())) + " " + c10::str(x.sizes()));
  if (y.dim() != 1 || y.is_floating_point() || y.is_complex() || y.scalar_type() == at::kBool)
    throw cfg.error_at("data.path", path + ": \"y\" must be a 1-D integer tensor [N], got " +
                                        std::string(c10::toString(y.scalar_type())) + " " + c10::str(y.sizes()));
  if (x.size(0) != y.size(0))
    throw cfg.error_at("data.path", path + ": \"x\" has " + std::to_string(x.size(0)) + " rows but \"y\" has " +
                                        std::to_string(y.size(0)));
  if (x.size(0) == 0) throw cfg.error_at("data.path", path + ": no data rows");
  at::Tensor xf = x.to(at::kFloat).contiguous();
  // NaN, an infinity, or a float64 beyond float32's range: named like a CSV
  // cell, row and column 1-based.
  const at::Tensor bad = at::isfinite(xf).logical_not().nonzero();
  if (bad.size(0) > 0) {
    const int64_t r = bad[0][0].item<int64_t>(), c = bad[0][1].item<int64_t>();
    const double v = x[r][c].item<double>();
    const std::string value = std::isnan(v) ? "nan" : std::isinf(v) ? (v > 0 ? "inf" : "-inf") : fmt("%g", v);
    throw cfg.error_at("data.path", path + ": \"x\" row " + std::to_string(r + 1) + ": column " +
                                        std::to_string(c + 1) + ": " + value +
                                        (std::isfinite(v) ? " is beyond the float32 range (at most 3.4e+38)"
                                                          : " is not a finite number"));
  }
  return {xf, y.to(at::kLong).contiguous()};
}

/// A learnable task: labels are a seeded random linear teacher's argmax, with
/// a little noise. (Random labels would never converge.)
table make_synthetic(const config& cfg) {
  const int64_t n = cfg.data.samples;
  const int64_t f = cfg.data.features > 0 ? cfg.data.features : model_inputs(cfg);
  const int64_t c = cfg.data.classes > 0 ? cfg.data.classes : model_classes(cfg);
  if (n <= 0) throw cfg.error_at("data.synthetic.samples", "must be positive, got " + std::to_string(n));
  if (f <= 0) throw cfg.error_at("data.synthetic.features", "cannot tell the feature count: set data.features");
  if (c < 2) throw cfg.error_at("data.synthetic.classes", "needs at least 2 classes, got " + std::to_string(c));
  auto gen = at::make_generator<at::CPUGeneratorImpl>(cfg.train.seed);
  table t;
  t.x = at::randn({n, f}, gen, at::kFloat);
  const at::Tensor teacher = at::randn({f, c}, gen, at::kFloat);
  const at::Tensor noise = at::randn({n, c}, gen, at::kFloat).mul_(0.1);
  t.y = at::matmul(t.x, teacher).add_(noise).argmax(1).to(at::kLong);
  return t;
}

}  // namespace

dataset load_dataset(const config& cfg) {
  const auto& dc = cfg.data;
  const bool synthetic = dc.kind == "synthetic";
  table t;
  if (dc.kind == "csv")
    t = read_csv(cfg);
  else if (dc.kind == "tensors")
    t = read_tensors(cfg);
  else if (synthetic)
    t = make_synthetic(cfg);
  else if (dc.kind == "text")
    t = read_text(cfg);
  else if (dc.kind == "tokens")
    t = read_tokens(cfg);
  else
    throw cfg.error_at("data.kind", "unknown data kind " + quoted_input(dc.kind) +
                                        " (csv, tensors, synthetic, text, tokens)");

  const std::string source = synthetic ? std::string("the synthetic data") : dc.path;
  const int64_t n = t.x.size(0);
  const int64_t features = t.x.size(1);
  const int64_t expect_in = model_inputs(cfg);
  if (expect_in > 0 && features != expect_in) {
    const std::string msg = source + " has " + std::to_string(features) +
                            " features but model.layers[0] expects " + std::to_string(expect_in);
    throw cfg.error_at(synthetic ? "data.synthetic.features" : "data.path", msg);
  }

  const int64_t out = model_classes(cfg);
  const int64_t lo = t.y.min().item<int64_t>();
  const int64_t hi = t.y.max().item<int64_t>();
  if (lo < 0 || (out > 0 && hi >= out)) {
    const int64_t bad_value = lo < 0 ? lo : hi;
    const int64_t bad_row = (t.y == bad_value).nonzero().select(1, 0)[0].item<int64_t>();
    const std::string range = out > 0 ? "[0, " + std::to_string(out) + ")" : "[0, inf)";
    throw cfg.error_at(synthetic ? "data.synthetic.classes" : "data.path",
                       source + ": row " + std::to_string(bad_row + 1) + ": label " + std::to_string(bad_value) +
                           " is outside " + range + ", the output size of the last linear layer");
  }

  // The test set is the tail: of the file (split: tail) or of one seeded
  // permutation (split: random); epoch shuffling never touches it.
  const auto n_test = static_cast<int64_t>(std::llround(dc.test_fraction * static_cast<double>(n)));
  if (dc.test_fraction < 0 || n_test >= n)
    throw cfg.error_at("data.test_fraction", std::to_string(dc.test_fraction) + " of " + std::to_string(n) +
                                                 " rows leaves no training rows");
  const int64_t n_train = n - n_test;
  if (n_train < cfg.train.batch_size)
    throw cfg.error_at("train.batch_size", std::to_string(cfg.train.batch_size) + " exceeds the " +
                                               std::to_string(n_train) + " training rows of " + source);

  if (dc.split == "random") {
    // One seeded permutation of all rows; the tail of it is held out.
    auto gen = at::make_generator<at::CPUGeneratorImpl>(cfg.train.seed);
    const at::Tensor perm = at::randperm(n, gen, at::TensorOptions().dtype(at::kLong));
    t.x = t.x.index_select(0, perm);
    t.y = t.y.index_select(0, perm);
  }

  const int64_t eval_batches = (n_test + cfg.train.batch_size - 1) / cfg.train.batch_size;
  if (cfg.eval.batches > eval_batches)
    throw cfg.error_at("eval.batches", std::to_string(cfg.eval.batches) + " batches of train.batch_size " +
                                           std::to_string(cfg.train.batch_size) + " rows; the held-out split of " +
                                           source + " has " + std::to_string(n_test) + " rows (" +
                                           std::to_string(eval_batches) + " batches)");

  dataset d;
  d.features = features;
  d.classes = hi + 1;
  d.train_x = t.x.slice(0, 0, n_train).contiguous();
  d.train_y = t.y.slice(0, 0, n_train).contiguous();
  d.test_x = t.x.slice(0, n_train, n).contiguous();
  d.test_y = t.y.slice(0, n_train, n).contiguous();

  if (dc.normalize == "standard" && dc.kind != "text" && dc.kind != "tokens") {
    // Train statistics only: the test set must not leak into training.
    const at::Tensor mean = d.train_x.mean(0, /*keepdim=*/true);
    at::Tensor std = d.train_x.std(0, /*unbiased=*/false, /*keepdim=*/true);
    std = at::where(std > 0, std, at::ones_like(std));
    d.train_x = (d.train_x - mean) / std;
    d.test_x = (d.test_x - mean) / std;
  } else if (dc.normalize != "none") {
    throw cfg.error_at("data.normalize", "unknown normalization " + quoted_input(dc.normalize) + " (none, standard)");
  }
  return d;
}

batch batch_for_step(const dataset& data, const config& cfg, int64_t step) {
  const int64_t rows = data.train_x.size(0);
  const int64_t bs = cfg.train.batch_size;
  if (bs <= 0 || rows < bs)
    throw cfg.error_at("train.batch_size", std::to_string(bs) + " does not fit the " + std::to_string(rows) +
                                               " training rows");
  if (step < 0) throw std::invalid_argument("batch_for_step: negative step " + std::to_string(step));
  const int64_t per_epoch = rows / bs;  // drop_last
  const int64_t epoch = step / per_epoch;
  const int64_t begin = (step % per_epoch) * bs;
  if (!cfg.data.shuffle) return {data.train_x.slice(0, begin, begin + bs), data.train_y.slice(0, begin, begin + bs)};

  // A pure function of (seed, epoch): replays and restarts see the same rows.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(derive_seed(cfg.train.seed, {static_cast<uint64_t>(epoch)}));
  const at::Tensor perm = at::randperm(rows, gen, at::kLong);
  const at::Tensor idx = perm.slice(0, begin, begin + bs);
  return {data.train_x.index_select(0, idx), data.train_y.index_select(0, idx)};
}

std::vector<batch> split_microbatches(const batch& b, int microbatches) {
  if (microbatches <= 0)
    throw std::invalid_argument("split_microbatches: microbatches must be positive, got " +
                                std::to_string(microbatches));
  const auto xs = at::chunk(b.x, microbatches, 0);
  const auto ys = at::chunk(b.y, microbatches, 0);
  std::vector<batch> out;
  out.reserve(xs.size());
  for (size_t i = 0; i < xs.size(); ++i) out.push_back({xs[i], ys[i]});
  return out;
}

int64_t chunk_count(int64_t n, int64_t m) {
  if (m <= 0) return 0;
  if (n <= 0) return m;  // torch.chunk gives m empty chunks
  // ceil(n / m) without the n + m - 1 that overflows near INT64_MAX.
  auto ceil_div = [](int64_t a, int64_t b) { return a / b + (a % b != 0); };
  return ceil_div(n, ceil_div(n, m));
}

}  // namespace actorpipe
