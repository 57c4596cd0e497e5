// Data loading, the split, normalization and per-step batch slicing. The
// config is built in code, not parsed, so these tests only need config.hpp.
#include "runtime/data/data.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "runtime/files/state_dict.hpp"

namespace {

using namespace actorpipe;

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "actorpipe_data_" + std::to_string(::getpid()) + "_" + name;
}

/// A model of linear(features -> hidden) relu linear(hidden -> classes).
config make_config(int64_t features, int64_t classes) {
  config cfg;
  cfg.path = "test.yaml";
  cfg.model.layers = {layer_spec{"linear", features, 8}, layer_spec{"relu"}, layer_spec{"linear", 8, classes}};
  cfg.data.test_fraction = 0.2;
  cfg.train.batch_size = 4;
  return cfg;
}

/// Row r of the csv: features r, r+0.5, r*2 ... and label r % classes, so
/// every row is recognisable after slicing.
std::string csv_text(int rows, int features, int classes) {
  std::ostringstream out;
  for (int r = 0; r < rows; ++r) {
    for (int f = 0; f < features; ++f) out << (r + 0.5 * f) << ',';
    out << (r % classes) << '\n';
  }
  return out.str();
}

std::string write_file(const std::string& name, const std::string& text) {
  const std::string p = temp_path(name);
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

std::string write_gz(const std::string& name, const std::string& text) {
  const std::string p = temp_path(name);
  gzFile f = gzopen(p.c_str(), "wb");
  EXPECT_NE(f, nullptr);
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  return p;
}

/// The config_error message of loading cfg's data ("" if none was thrown).
std::string load_error(const config& cfg) {
  try {
    load_dataset(cfg);
  } catch (const config_error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

void expect_csv_rows(const dataset& d, int rows, int features) {
  ASSERT_EQ(d.train_x.size(0) + d.test_x.size(0), rows);
  EXPECT_EQ(d.features, features);
  EXPECT_EQ(d.train_x.scalar_type(), at::kFloat);
  EXPECT_EQ(d.train_y.scalar_type(), at::kLong);
  // File order: the test set is the tail.
  const int64_t n_train = d.train_x.size(0);
  for (int64_t r = 0; r < rows; ++r) {
    const at::Tensor& x = r < n_train ? d.train_x : d.test_x;
    const at::Tensor& y = r < n_train ? d.train_y : d.test_y;
    const int64_t i = r < n_train ? r : r - n_train;
    EXPECT_FLOAT_EQ(x[i][1].item<float>(), r + 0.5f);
    EXPECT_EQ(y[i].item<int64_t>(), r % 3);
  }
}

TEST(LoadDataset, ReadsPlainCsv) {
  auto cfg = make_config(3, 3);
  cfg.data.kind = "csv";
  cfg.data.path = write_file("plain.csv", csv_text(10, 3, 3));
  const dataset d = load_dataset(cfg);
  EXPECT_EQ(d.train_x.size(0), 8);
  EXPECT_EQ(d.test_x.size(0), 2);
  EXPECT_EQ(d.classes, 3);
  expect_csv_rows(d, 10, 3);
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, ReadsGzipCsv) {
  auto cfg = make_config(3, 3);
  cfg.data.kind = "csv";
  cfg.data.path = write_gz("packed.csv.gz", csv_text(10, 3, 3));
  expect_csv_rows(load_dataset(cfg), 10, 3);
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, MalformedRowNamesFileAndRow) {
  auto cfg = make_config(3, 3);
  cfg.data.kind = "csv";
  cfg.data.path = write_file("bad_row.csv", "1,2,3,0\n4,5,6,1\n7,8,2\n");
  const std::string msg = load_error(cfg);
  EXPECT_TRUE(contains(msg, cfg.data.path + ":3: expected 4 columns, found 3")) << msg;
  EXPECT_TRUE(contains(msg, "data.path")) << msg;
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, NonNumericCellNamesFileRowAndColumn) {
  auto cfg = make_config(3, 3);
  cfg.data.kind = "csv";
  cfg.data.path = write_file("nan.csv", "1,2,3,0\n4,x5,6,1\n");
  const std::string msg = load_error(cfg);
  EXPECT_TRUE(contains(msg, cfg.data.path + ":2: column 2: 'x5' is not a number")) << msg;
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, NonFiniteCellNamesFileRowAndColumn) {
  auto cfg = make_config(3, 3);
  cfg.data.kind = "csv";
  // strtod reads every one of these; float32 holds none of them.
  for (const std::string cell : {"nan", "NaN", "inf", "-inf", "-Infinity"}) {
    cfg.data.path = write_file("nonfinite.csv", "1,2,3,0\n4,5,6,1\n7,8," + cell + ",2\n");
    EXPECT_EQ(load_error(cfg), "test.yaml: data.path: " + cfg.data.path + ":3: column 3: '" + cell +
                                   "' is not a finite number");
  }
  cfg.data.path = write_file("nonfinite.csv", "1,2,3,0\n4,1e39,6,1\n");
  EXPECT_EQ(load_error(cfg), "test.yaml: data.path: " + cfg.data.path +
                                 ":2: column 2: '1e39' is beyond the float32 range (at most 3.4e+38)");
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, NonFiniteTensorNamesFileRowAndColumn) {
  auto cfg = make_config(3, 3);
  cfg.data.kind = "tensors";
  cfg.data.path = temp_path("nonfinite.pt");
  const at::Tensor y = at::arange(10, at::kLong) % 3;
  const double values[] = {NAN, INFINITY, -INFINITY};
  const char* names[] = {"nan", "inf", "-inf"};
  for (int i = 0; i < 3; ++i) {
    at::Tensor x = at::zeros({10, 3}, at::kFloat);
    x[6][1] = values[i];
    x[8][0] = values[i];  // the first one is named
    save_tensors(cfg.data.path, {{"x", x}, {"y", y}});
    EXPECT_EQ(load_error(cfg), "test.yaml: data.path: " + cfg.data.path + ": \"x\" row 7: column 2: " + names[i] +
                                   " is not a finite number");
  }
  // Finite in float64, infinite once it is float32.
  at::Tensor x = at::zeros({10, 3}, at::kDouble);
  x[2][2] = 1e300;
  save_tensors(cfg.data.path, {{"x", x}, {"y", y}});
  EXPECT_EQ(load_error(cfg), "test.yaml: data.path: " + cfg.data.path +
                                 ": \"x\" row 3: column 3: 1e+300 is beyond the float32 range (at most 3.4e+38)");
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, AHugeCellIsEchoedCutTo80Characters) {
  auto cfg = make_config(3, 3);
  cfg.data.kind = "csv";
  cfg.data.path = write_file("huge_cell.csv", "1,2,3,0\n4," + std::string(1 << 20, 'a') + ",6,1\n");
  EXPECT_EQ(load_error(cfg), "test.yaml: data.path: " + cfg.data.path + ":2: column 2: '" + std::string(80, 'a') +
                                 "...' (1048576 bytes) is not a number");
  cfg.data.path = write_file("huge_cell.csv", "1,2,3,0\n4,5,6," + std::string(1 << 20, '7') + "x\n");
  EXPECT_EQ(load_error(cfg), "test.yaml: data.path: " + cfg.data.path + ":2: column 4: '" + std::string(80, '7') +
                                 "...' (1048577 bytes) is not a number");
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, ControlBytesInACellAreEscaped) {
  auto cfg = make_config(3, 3);
  cfg.data.kind = "csv";
  // An ESC sequence would recolour or clear the user's terminal.
  cfg.data.path = write_file("esc.csv", "1,2,3,0\n4,\x1b[2J\x07,6,1\n7,8,9,\x1b[31m2\n");
  EXPECT_EQ(load_error(cfg), "test.yaml: data.path: " + cfg.data.path + ":2: column 2: '\\x1b[2J\\x07' is not a number");
  cfg.data.path = write_file("esc.csv", "1,2,3,0\n7,8,9,1.5\xff\n");
  EXPECT_EQ(load_error(cfg), "test.yaml: data.path: " + cfg.data.path + ":2: column 4: '1.5\\xff' is not a number");
  std::remove(cfg.data.path.c_str());
}

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

/// `csv` gzip-compressed, as bytes.
std::string gzip_bytes(const std::string& csv) {
  const std::string p = write_gz("bytes.csv.gz", csv);
  const std::string bytes = slurp(p);
  std::remove(p.c_str());
  return bytes;
}

TEST(LoadDataset, GzipCutInHalfIsReportedAsTruncated) {
  auto cfg = make_config(3, 3);
  cfg.data.kind = "csv";
  const std::string gz = gzip_bytes(csv_text(2000, 3, 3));
  const size_t half = gz.size() / 2;
  cfg.data.path = write_file("half.csv.gz", gz.substr(0, half));
  // The last line read is cut short: the stream is to blame, not its columns.
  const std::string msg = load_error(cfg);
  const std::string want = "test.yaml: data.path: " + cfg.data.path +
                           ": gzip stream is truncated (unexpected end of file): it ends at compressed byte " +
                           std::to_string(half) + ", after ";
  EXPECT_EQ(msg.substr(0, want.size()), want) << msg;
  EXPECT_TRUE(contains(msg, " uncompressed bytes")) << msg;
  EXPECT_FALSE(contains(msg, "column")) << msg;
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, GzipCutAtALineEndIsReportedAsTruncated) {
  // Every line read is whole; only zlib knows the stream ended early.
  auto cfg = make_config(3, 3);
  cfg.data.kind = "csv";
  const std::string gz = gzip_bytes(csv_text(2000, 3, 3));
  cfg.data.path = write_file("no_trailer.csv.gz", gz.substr(0, gz.size() - 8));  // no CRC and length
  EXPECT_TRUE(contains(load_error(cfg), cfg.data.path + ": gzip stream is truncated (unexpected end of file)"))
      << load_error(cfg);
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, GzipCorruptInTheMiddleIsReportedAsCorrupt) {
  auto cfg = make_config(3, 3);
  cfg.data.kind = "csv";
  const std::string good = gzip_bytes(csv_text(2000, 3, 3));
  // Two places, so that neither a lucky decode nor a late CRC check hides it.
  for (size_t at : {good.size() / 2, good.size() / 3}) {
    std::string gz = good;
    for (size_t i = at; i < at + 16; ++i) gz[i] = static_cast<char>(gz[i] ^ 0x5a);
    cfg.data.path = write_file("corrupt.csv.gz", gz);
    const std::string msg = load_error(cfg);
    const std::string want = "test.yaml: data.path: " + cfg.data.path + ": gzip stream is corrupt (";
    EXPECT_EQ(msg.substr(0, want.size()), want) << msg;
    EXPECT_TRUE(contains(msg, "): zlib stopped at compressed byte ")) << msg;
    EXPECT_TRUE(contains(msg, " uncompressed bytes")) << msg;
  }
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, GzipGarbageBeforeTheChecksumIsReportedAsCorrupt) {
  // Stored (level 0) blocks pass damaged bytes through as they are: the rows
  // read as garbage long before zlib checks the CRC at the end.
  auto cfg = make_config(3, 3);
  cfg.data.kind = "csv";
  const std::string text = csv_text(2000, 3, 3);
  const std::string p = temp_path("stored.csv.gz");
  gzFile f = gzopen(p.c_str(), "wb0");
  ASSERT_NE(f, nullptr);
  gzwrite(f, text.data(), static_cast<unsigned>(text.size()));
  gzclose(f);
  std::string gz = slurp(p);
  for (size_t i = gz.size() / 2; i < gz.size() / 2 + 16; ++i) gz[i] = static_cast<char>(gz[i] ^ 0x5a);
  cfg.data.path = write_file("stored.csv.gz", gz);
  const std::string msg = load_error(cfg);
  const std::string want =
      "test.yaml: data.path: " + cfg.data.path + ": gzip stream is corrupt (incorrect data check): zlib stopped at ";
  EXPECT_EQ(msg.substr(0, want.size()), want) << msg;
  EXPECT_TRUE(contains(msg, " uncompressed bytes")) << msg;
  EXPECT_FALSE(contains(msg, "not a number")) << msg;
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, EmptyOrMissingFileIsAnError) {
  auto cfg = make_config(3, 3);
  cfg.data.kind = "csv";
  cfg.data.path = write_file("empty.csv", "");
  EXPECT_TRUE(contains(load_error(cfg), "no data rows"));
  std::remove(cfg.data.path.c_str());
  cfg.data.path = temp_path("missing.csv");
  EXPECT_TRUE(contains(load_error(cfg), cfg.data.path));
}

TEST(LoadDataset, FeatureCountMustMatchTheModel) {
  auto cfg = make_config(4, 3);
  cfg.data.kind = "csv";
  cfg.data.path = write_file("narrow.csv", csv_text(10, 3, 3));
  const std::string msg = load_error(cfg);
  EXPECT_TRUE(contains(msg, "data.path")) << msg;
  EXPECT_TRUE(contains(msg, "has 3 features but model.layers[0] expects 4")) << msg;
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, LabelOutsideTheOutputSizeNamesLabelAndRow) {
  auto cfg = make_config(3, 2);  // labels 0..2 but only 2 logits
  cfg.data.kind = "csv";
  cfg.data.path = write_file("labels.csv", csv_text(10, 3, 3));
  const std::string msg = load_error(cfg);
  EXPECT_TRUE(contains(msg, "row 3: label 2 is outside [0, 2)")) << msg;
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, BatchLargerThanTrainingRowsIsAnError) {
  auto cfg = make_config(3, 3);
  cfg.data.kind = "csv";
  cfg.data.path = write_file("small.csv", csv_text(10, 3, 3));
  cfg.train.batch_size = 9;
  const std::string msg = load_error(cfg);
  EXPECT_TRUE(contains(msg, "train.batch_size: 9 exceeds the 8 training rows of " + cfg.data.path)) << msg;
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, ReadsTensorsAndConvertsTypes) {
  auto cfg = make_config(3, 3);
  cfg.data.kind = "tensors";
  cfg.data.path = temp_path("xy.pt");
  const at::Tensor x = at::randn({10, 3}, at::kDouble);
  const at::Tensor y = (at::arange(10, at::kInt) % 3);
  save_tensors(cfg.data.path, {{"x", x}, {"y", y}});
  const dataset d = load_dataset(cfg);
  EXPECT_EQ(d.train_x.scalar_type(), at::kFloat);
  EXPECT_EQ(d.train_y.scalar_type(), at::kLong);
  EXPECT_TRUE(at::equal(at::cat({d.train_x, d.test_x}), x.to(at::kFloat)));
  EXPECT_TRUE(at::equal(at::cat({d.train_y, d.test_y}), y.to(at::kLong)));

  save_tensors(cfg.data.path, {{"x", x}, {"labels", y}});
  const std::string msg = load_error(cfg);
  EXPECT_TRUE(contains(msg, "needs tensors \"x\" and \"y\", found: x, labels")) << msg;
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, TensorsLoadErrorIsAConfigErrorAtDataPath) {
  auto cfg = make_config(3, 3);
  cfg.data.kind = "tensors";
  cfg.data.path = write_file("not_zip.pt", "garbage");
  const std::string msg = load_error(cfg);
  EXPECT_TRUE(contains(msg, "data.path")) << msg;
  EXPECT_TRUE(contains(msg, cfg.data.path)) << msg;
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, SyntheticIsDeterministicPerSeed) {
  auto cfg = make_config(6, 4);
  cfg.data.samples = 500;
  const dataset a = load_dataset(cfg);
  const dataset b = load_dataset(cfg);
  cfg.train.seed = 7;
  const dataset c = load_dataset(cfg);
  EXPECT_TRUE(at::equal(a.train_x, b.train_x));
  EXPECT_TRUE(at::equal(a.train_y, b.train_y));
  EXPECT_FALSE(at::equal(a.train_x, c.train_x));
  EXPECT_EQ(a.train_x.sizes().vec(), (std::vector<int64_t>{400, 6}));
  EXPECT_EQ(a.test_x.size(0), 100);
  EXPECT_EQ(a.features, 6);
  EXPECT_EQ(a.classes, 4);
}

TEST(LoadDataset, SyntheticLabelsAreLearnable) {
  auto cfg = make_config(8, 5);
  cfg.data.samples = 2000;
  const dataset d = load_dataset(cfg);
  // Every class shows up, and no class dominates.
  const at::Tensor counts = at::bincount(d.train_y, {}, 5);
  EXPECT_GT(counts.min().item<int64_t>(), 0);
  EXPECT_LT(counts.max().item<int64_t>(), d.train_y.size(0) * 3 / 4);
  // A linear least-squares fit to one-hot labels already beats chance by far:
  // the labels come from a linear teacher, not from noise.
  const at::Tensor onehot = at::one_hot(d.train_y, 5).to(at::kFloat);
  const at::Tensor xb = at::cat({d.train_x, at::ones({d.train_x.size(0), 1})}, 1);
  const at::Tensor w = std::get<0>(at::linalg_lstsq(xb, onehot));
  const at::Tensor xt = at::cat({d.test_x, at::ones({d.test_x.size(0), 1})}, 1);
  const double acc = at::matmul(xt, w).argmax(1).eq(d.test_y).to(at::kFloat).mean().item<double>();
  EXPECT_GT(acc, 0.6) << "chance is 0.2";
}

TEST(LoadDataset, SyntheticExplicitFeaturesMustMatchTheModel) {
  auto cfg = make_config(6, 4);
  cfg.data.features = 5;
  const std::string msg = load_error(cfg);
  EXPECT_TRUE(contains(msg, "data.synthetic.features")) << msg;
  EXPECT_TRUE(contains(msg, "5 features but model.layers[0] expects 6")) << msg;
}

TEST(LoadDataset, SplitTakesTheRoundedTail) {
  auto cfg = make_config(3, 4);
  cfg.data.samples = 101;
  cfg.data.test_fraction = 0.25;  // 25.25 -> 25
  dataset d = load_dataset(cfg);
  EXPECT_EQ(d.train_x.size(0), 76);
  EXPECT_EQ(d.test_x.size(0), 25);
  cfg.data.test_fraction = 0.0;
  d = load_dataset(cfg);
  EXPECT_EQ(d.train_x.size(0), 101);
  EXPECT_EQ(d.test_x.size(0), 0);
  cfg.data.test_fraction = 1.0;
  EXPECT_TRUE(contains(load_error(cfg), "data.test_fraction"));
}

TEST(LoadDataset, StandardNormalizationUsesTrainStatistics) {
  auto cfg = make_config(3, 3);
  cfg.data.kind = "csv";
  // Column 3 is constant: its std is 0 and must be treated as 1.
  std::ostringstream text;
  for (int r = 0; r < 10; ++r) text << r * r << ',' << -2.0 * r << ",7," << r % 3 << '\n';
  cfg.data.path = write_file("norm.csv", text.str());
  const dataset raw = load_dataset(cfg);
  cfg.data.normalize = "standard";
  const dataset d = load_dataset(cfg);
  EXPECT_TRUE(at::allclose(d.train_x.mean(0), at::zeros({3}), 1e-5, 1e-5)) << d.train_x.mean(0);
  EXPECT_TRUE(at::allclose(d.train_x.std(0, false).slice(0, 0, 2), at::ones({2}), 1e-5, 1e-5));
  EXPECT_TRUE(at::equal(d.train_x.select(1, 2), at::zeros({8})));
  const at::Tensor mean = raw.train_x.mean(0);
  at::Tensor std = raw.train_x.std(0, false);
  std[2] = 1.0;
  EXPECT_TRUE(at::allclose(d.test_x, (raw.test_x - mean) / std, 1e-5, 1e-6)) << d.test_x;
  std::remove(cfg.data.path.c_str());
}

/// 10 training rows whose first feature is the row index (test_fraction 0).
dataset indexed_rows(config& cfg, int rows) {
  cfg.data.kind = "csv";
  cfg.data.test_fraction = 0.0;
  std::ostringstream text;
  for (int r = 0; r < rows; ++r) text << r << ",0,0," << r % 3 << '\n';
  cfg.data.path = write_file("rows.csv", text.str());
  dataset d = load_dataset(cfg);
  std::remove(cfg.data.path.c_str());
  return d;
}

std::vector<int64_t> row_ids(const batch& b) {
  const at::Tensor ids = b.x.select(1, 0).to(at::kLong).contiguous();
  return std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
}

TEST(BatchForStep, ConsecutiveSlicesDropLastAndWrap) {
  auto cfg = make_config(3, 3);
  const dataset d = indexed_rows(cfg, 10);  // batch 4: 2 batches per epoch, rows 8 and 9 dropped
  EXPECT_EQ(row_ids(batch_for_step(d, cfg, 0)), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(row_ids(batch_for_step(d, cfg, 1)), (std::vector<int64_t>{4, 5, 6, 7}));
  EXPECT_EQ(row_ids(batch_for_step(d, cfg, 2)), (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(row_ids(batch_for_step(d, cfg, 5)), (std::vector<int64_t>{4, 5, 6, 7}));
  const batch b = batch_for_step(d, cfg, 1);
  EXPECT_EQ(b.y.sizes().vec(), std::vector<int64_t>{4});
  EXPECT_EQ(b.y[0].item<int64_t>(), 4 % 3);
}

TEST(BatchForStep, ShuffleIsAFreshPermutationPerEpoch) {
  auto cfg = make_config(3, 3);
  cfg.data.shuffle = true;
  const dataset d = indexed_rows(cfg, 12);  // batch 4: 3 batches per epoch, none dropped
  std::vector<std::vector<int64_t>> epochs(3);
  for (int64_t step = 0; step < 9; ++step) {
    const batch b = batch_for_step(d, cfg, step);
    // Labels travel with their rows.
    EXPECT_TRUE(at::equal(b.y, b.x.select(1, 0).to(at::kLong).remainder(3)));
    for (int64_t id : row_ids(b)) epochs[static_cast<size_t>(step / 3)].push_back(id);
  }
  for (const auto& e : epochs) {
    EXPECT_EQ(std::set<int64_t>(e.begin(), e.end()).size(), 12u) << "each epoch visits every row once";
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  std::vector<int64_t> in_order(12);
  for (int i = 0; i < 12; ++i) in_order[static_cast<size_t>(i)] = i;
  EXPECT_NE(epochs[0], in_order);
  // A pure function of (seed, step): asking again gives the same rows.
  EXPECT_EQ(row_ids(batch_for_step(d, cfg, 4)), row_ids(batch_for_step(d, cfg, 4)));
  cfg.train.seed = 43;
  EXPECT_NE(row_ids(batch_for_step(d, cfg, 0)), std::vector<int64_t>(epochs[0].begin(), epochs[0].begin() + 4));
}

std::vector<int64_t> chunk_sizes(int64_t n, int m) {
  batch b{at::arange(n * 2, at::kFloat).reshape({n, 2}), at::arange(n, at::kLong)};
  std::vector<int64_t> sizes;
  std::vector<at::Tensor> xs, ys;
  for (const auto& mb : split_microbatches(b, m)) {
    sizes.push_back(mb.x.size(0));
    EXPECT_EQ(mb.y.size(0), mb.x.size(0));
    xs.push_back(mb.x);
    ys.push_back(mb.y);
  }
  EXPECT_TRUE(at::equal(at::cat(xs), b.x));
  EXPECT_TRUE(at::equal(at::cat(ys), b.y));
  EXPECT_EQ(static_cast<int64_t>(sizes.size()), chunk_count(n, m));
  return sizes;
}

TEST(SplitMicrobatches, MatchesTorchChunk) {
  // Reference sizes from torch.chunk in Python.
  EXPECT_EQ(chunk_sizes(10, 4), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(chunk_sizes(10, 6), (std::vector<int64_t>{2, 2, 2, 2, 2}));
  EXPECT_EQ(chunk_sizes(64, 3), (std::vector<int64_t>{22, 22, 20}));
  EXPECT_EQ(chunk_sizes(8, 8), (std::vector<int64_t>(8, 1)));
  EXPECT_EQ(chunk_sizes(2, 5), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(chunk_sizes(7, 1), (std::vector<int64_t>{7}));
}

TEST(SplitMicrobatches, ChunkCount) {
  EXPECT_EQ(chunk_count(10, 4), 4);
  EXPECT_EQ(chunk_count(10, 6), 5);
  EXPECT_EQ(chunk_count(64, 3), 3);
  EXPECT_EQ(chunk_count(2, 5), 2);
  EXPECT_EQ(chunk_count(0, 3), 3);  // torch.chunk(torch.empty(0), 3) gives 3 empty chunks
}

TEST(SplitMicrobatches, ChunkCountDoesNotOverflowNearInt64Max) {
  // ceil(n / ceil(n / m)), worked out in Python's integers.
  constexpr int64_t max = INT64_MAX;
  EXPECT_EQ(chunk_count(max, 3), 3);
  EXPECT_EQ(chunk_count(max, 1), 1);
  EXPECT_EQ(chunk_count(max, 2), 2);
  EXPECT_EQ(chunk_count(max, int64_t{1} << 31), int64_t{1} << 31);
  EXPECT_EQ(chunk_count(max, max), max);
  EXPECT_EQ(chunk_count(max - 1, max), max - 1);
  EXPECT_EQ(chunk_count(max, max / 2), 3074457345618258603);
  EXPECT_EQ(chunk_count(max, max - 1), 4611686018427387904);
}

TEST(LoadDataset, ReadsSklearnDigits) {
  const std::string path = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";
  if (!std::ifstream(path).good()) GTEST_SKIP() << path << " is absent (python3-sklearn not installed)";
  auto cfg = make_config(64, 10);
  cfg.data.kind = "csv";
  cfg.data.path = path;
  cfg.train.batch_size = 64;
  const dataset d = load_dataset(cfg);
  EXPECT_EQ(d.train_x.size(0) + d.test_x.size(0), 1797);
  EXPECT_EQ(d.test_x.size(0), 359);  // round(0.2 * 1797)
  EXPECT_EQ(d.features, 64);
  EXPECT_EQ(d.classes, 10);
  EXPECT_FLOAT_EQ(d.train_x.max().item<float>(), 16.0f);
}

}  // namespace

// kind: text, as the reference's text_windows: sample i is bytes
// [i T, (i + 1) T + 1), x its first T, y its last T; the tail is held out.
config text_config(const std::string& path, int64_t seq_len, int64_t batch) {
  config cfg;
  layer_spec embedding{"embedding"}, head{"lm_head"};
  embedding.dim = head.dim = 8;
  embedding.vocab = head.vocab = 256;
  embedding.max_seq = 16;
  embedding.key = "model.layers[0]";
  head.key = "model.layers[1]";
  cfg.model.layers = {embedding, head};
  cfg.data.kind = "text";
  cfg.data.path = path;
  cfg.data.seq_len = seq_len;
  cfg.data.test_fraction = 0.25;
  cfg.train.batch_size = batch;
  return cfg;
}

TEST(LoadDataset, TextWindowsAreShiftedByOneByte) {
  std::string text;
  for (int i = 0; i < 42; ++i) text.push_back(static_cast<char>(i * 7 % 256));  // (42 - 1) / 4 = 10 windows
  auto cfg = text_config(write_file("windows.txt", text), 4, 2);
  cfg.data.test_fraction = 0.2;
  const dataset d = load_dataset(cfg);
  ASSERT_EQ(d.train_x.size(0), 8);
  ASSERT_EQ(d.test_x.size(0), 2);
  EXPECT_EQ(d.train_x.scalar_type(), at::kLong);
  for (int64_t w = 0; w < 10; ++w) {
    const at::Tensor& x = w < 8 ? d.train_x : d.test_x;
    const at::Tensor& y = w < 8 ? d.train_y : d.test_y;
    for (int64_t j = 0; j < 4; ++j) {
      EXPECT_EQ(x[w % 8][j].item<int64_t>(), (w * 4 + j) * 7 % 256);
      EXPECT_EQ(y[w % 8][j].item<int64_t>(), (w * 4 + j + 1) * 7 % 256);
    }
  }
  std::remove(cfg.data.path.c_str());
}

TEST(LoadDataset, TextShorterThanOneBatchNamesTheFile) {
  const auto cfg = text_config(write_file("short.txt", std::string(20, 'a')), 8, 4);  // 2 samples
  const std::string err = load_error(cfg);
  EXPECT_TRUE(contains(err, "short.txt holds 20 bytes: 2 samples of data.seq_len 8 (+1), fewer than one batch of "
                            "train.batch_size 4"))
      << err;
  std::remove(cfg.data.path.c_str());
}
