// load_tensors / save_tensors against files written and read by Python's
// torch 1.13. The reference values come from Python (tests/data/*.txt, made by
// tests/data/make_fixtures.py), never from our own loader.
#include "runtime/files/state_dict.hpp"

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include "tests/hostile_files.hpp"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#ifndef ACTORPIPE_TEST_DATA
#define ACTORPIPE_TEST_DATA "tests/data"
#endif

namespace {

using actorpipe::load_tensors;
using actorpipe::named_tensors;
using actorpipe::save_tensors;

const std::string data_dir = ACTORPIPE_TEST_DATA;

/// One line of a reference file: `name float|int ndim dims... values...`.
struct reference {
  std::string name;
  bool is_float = false;
  std::vector<int64_t> shape;
  std::vector<double> values;
};

std::vector<reference> read_reference(const std::string& path) {
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << "missing " << path << " (run tests/data/make_fixtures.py)";
  std::vector<reference> out;
  std::string line;
  while (std::getline(f, line)) {
    std::istringstream in(line);
    reference r;
    std::string kind;
    int ndim = 0;
    in >> r.name >> kind >> ndim;
    r.is_float = kind == "float";
    r.shape.resize(static_cast<size_t>(ndim));
    for (auto& d : r.shape) in >> d;
    double v = 0;
    while (in >> v) r.values.push_back(v);
    out.push_back(r);
  }
  return out;
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "actorpipe_sd_" + std::to_string(::getpid()) + "_" + name;
}

bool file_exists(const std::string& p) { return std::ifstream(p).good(); }

/// Every name, shape and value equals Python's, bit for bit.
void expect_matches(const named_tensors& got, const std::vector<reference>& want, at::ScalarType float_type) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].name);
    EXPECT_EQ(got[i].first, want[i].name);
    const at::Tensor& t = got[i].second;
    EXPECT_EQ(t.sizes().vec(), want[i].shape);
    EXPECT_EQ(t.scalar_type(), want[i].is_float ? float_type : at::kLong);
    const at::Tensor flat = t.contiguous().to(at::kDouble).reshape(-1);
    ASSERT_EQ(flat.numel(), static_cast<int64_t>(want[i].values.size()));
    const double* p = flat.data_ptr<double>();
    for (size_t j = 0; j < want[i].values.size(); ++j) EXPECT_EQ(p[j], want[i].values[j]) << "element " << j;
  }
}

TEST(LoadTensors, ReadsOrderedDictStateDictFromPython) {
  const auto got = load_tensors(data_dir + "/state_dict_ordered.pt");
  expect_matches(got, read_reference(data_dir + "/state_dict_ordered.txt"), at::kFloat);
  ASSERT_EQ(got.size(), 6u);
  EXPECT_EQ(got[0].first, "0.weight");
  EXPECT_EQ(got[5].first, "3.bias");
}

TEST(LoadTensors, ReadsPlainDictWithFloatLongAndStridedView) {
  const auto got = load_tensors(data_dir + "/tensors_plain.pt");
  expect_matches(got, read_reference(data_dir + "/tensors_plain.txt"), at::kFloat);
  // "xt" is a transposed slice sharing x's storage: offset and strides matter.
  ASSERT_EQ(got.size(), 3u);
  EXPECT_TRUE(at::equal(got[2].second, got[0].second.t().slice(0, 1, 3)));
}

TEST(LoadTensors, ReturnedTensorsOwnTheirMemory) {
  const auto a = load_tensors(data_dir + "/tensors_plain.pt");
  const auto b = load_tensors(data_dir + "/tensors_plain.pt");
  a[0].second.add_(1.0);  // must not disturb another load, nor crash on a freed buffer
  EXPECT_FALSE(at::equal(a[0].second, b[0].second));
  EXPECT_TRUE(a[2].second.is_contiguous());
}

TEST(SaveTensors, RoundTripsThroughLoadTensors) {
  const std::string p = temp_path("roundtrip.pt");
  named_tensors in = {
      {"w", at::randn({3, 5})},
      {"b", at::arange(7, at::kLong)},
      {"d", at::randn({4}, at::kDouble)},
      {"t", at::randn({5, 3}).t()},  // non-contiguous
      {"s", at::tensor(2.5)},        // 0-d
  };
  save_tensors(p, in);
  EXPECT_FALSE(file_exists(p + ".tmp"));
  const auto out = load_tensors(p);
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].first, in[i].first);
    EXPECT_EQ(out[i].second.scalar_type(), in[i].second.scalar_type()) << in[i].first;
    EXPECT_TRUE(at::equal(out[i].second, in[i].second)) << in[i].first;
  }
  std::remove(p.c_str());
}

bool python_torch_available() {
  return file_exists("/usr/bin/python3") &&
         std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") == 0;
}

TEST(SaveTensors, PythonTorchLoadReadsOurFile) {
  if (!python_torch_available()) GTEST_SKIP() << "/usr/bin/python3 with torch (python3-torch) is not installed";
  const std::string p = temp_path("for_python.pt");
  const named_tensors in = {{"weight", at::randn({2, 3})}, {"idx", at::arange(4, at::kLong) * 3}};
  save_tensors(p, in);
  // Python prints each entry's name, dtype, shape and exact values.
  const std::string cmd =
      "/usr/bin/python3 -c \"import sys, torch\n"
      "d = torch.load(sys.argv[1])\n"
      "assert isinstance(d, dict), type(d)\n"
      "for k, v in d.items():\n"
      "    print(k, str(v.dtype), ' '.join(map(str, v.shape)), ' '.join(repr(float(e)) for e in v.reshape(-1).tolist()))\n"
      "\" '" + p + "' 2>&1";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string text;
  char buf[4096];
  while (std::fgets(buf, sizeof buf, pipe) != nullptr) text += buf;
  ASSERT_EQ(::pclose(pipe), 0) << text;

  std::ostringstream want;
  want.precision(17);
  for (const auto& [name, t] : in) {
    want << name << ' ' << (t.scalar_type() == at::kFloat ? "torch.float32" : "torch.int64") << ' ';
    for (size_t d = 0; d < t.sizes().size(); ++d) want << (d ? " " : "") << t.size(static_cast<int64_t>(d));
    want << ' ';
    const at::Tensor flat = t.to(at::kDouble).reshape(-1);
    for (int64_t j = 0; j < flat.numel(); ++j) want << (j ? " " : "") << flat[j].item<double>();
    want << '\n';
  }
  // Parse Python's doubles back rather than comparing repr text with ours.
  std::istringstream got_lines(text), want_lines(want.str());
  std::string g, w;
  while (std::getline(want_lines, w)) {
    ASSERT_TRUE(static_cast<bool>(std::getline(got_lines, g))) << text;
    std::istringstream gs(g), ws(w);
    std::string gt, wt;
    while (ws >> wt) {
      ASSERT_TRUE(static_cast<bool>(gs >> gt)) << g;
      char* end = nullptr;
      const double wv = std::strtod(wt.c_str(), &end);
      if (*end == '\0' && !wt.empty())
        EXPECT_EQ(std::strtod(gt.c_str(), nullptr), wv) << g;
      else
        EXPECT_EQ(gt, wt) << g;
    }
  }
  std::remove(p.c_str());
}

void expect_error_naming(const std::string& path, const std::string& fragment = "") {
  try {
    load_tensors(path);
    ADD_FAILURE() << "no error for " << path;
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << "one line, no backtrace: " << what;
  }
}

TEST(LoadTensors, MissingFileNamesThePath) { expect_error_naming(temp_path("does_not_exist.pt")); }

TEST(LoadTensors, GarbageFileNamesThePath) {
  const std::string p = temp_path("garbage.pt");
  std::ofstream(p, std::ios::binary) << "this is not a zip archive at all";
  expect_error_naming(p);
  std::remove(p.c_str());
}

TEST(LoadTensors, TruncatedFileNamesThePath) {
  std::ifstream src(data_dir + "/tensors_plain.pt", std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(src)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 100u);
  for (size_t keep : {bytes.size() / 2, bytes.size() - 30, size_t(64)}) {
    const std::string p = temp_path("truncated.pt");
    std::ofstream(p, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(keep));
    expect_error_naming(p);
    std::remove(p.c_str());
  }
}

/// A zip archive in torch.save's layout holding the given pickle bytes.
std::string write_archive(const std::string& name, const std::string& pickle) {
  const std::string p = temp_path(name);
  actorpipe::hostile::write_archive(p, pickle);
  return p;
}

TEST(LoadTensors, UnsupportedGlobalIsAnErrorNotACall) {
  // PROTO 2; GLOBAL 'os system'; STOP
  const std::string p = write_archive("evil.pt", std::string("\x80\x02" "cos\nsystem\n.", 13));
  expect_error_naming(p, "unsupported pickle content: global os.system");
  std::remove(p.c_str());
}

TEST(LoadTensors, MalformedPickleIsAnError) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"unknown_opcode", std::string("\x80\x02\xff.", 4)},
      {"empty", std::string()},
      {"underflow", std::string("\x80\x02s.", 4)},               // SETITEM on an empty stack
      {"not_a_dict", std::string("\x80\x02K\x05.", 5)},         // the int 5
      {"no_stop", std::string("\x80\x02}q\x00", 5)},            // EMPTY_DICT, BINPUT, end
      {"bad_memo", std::string("\x80\x02h\x07.", 5)},           // BINGET of an unset key
      {"long_string", std::string("\x80\x02X\xff\xff\x00\x00" "ab", 10)},
      // d = {}; d["a"] = d
      {"self_containing", std::string("\x80\x02}q\x00X\x01\x00\x00\x00" "ah\x00s.", 15)},
  };
  for (const auto& [name, pickle] : cases) {
    SCOPED_TRACE(name);
    const std::string p = write_archive(name + ".pt", pickle);
    expect_error_naming(p, "unsupported pickle content");
    std::remove(p.c_str());
  }
}

// -- hostile files: refused early, in bounded memory, without recursion --

TEST(LoadTensors, ATwoMillionDeepTupleIsRefusedWhileUnpickling) {
  const std::string p = temp_path("deep.pt");
  actorpipe::hostile::deep_tuple(p);
  expect_error_naming(p, "values nested deeper than 100 at byte");
  std::remove(p.c_str());
}

TEST(LoadTensors, DictsSharedThirtyLevelsDeepAreReadOnce) {
  const std::string p = temp_path("shared.pt");
  actorpipe::hostile::shared_dicts(p);
  const auto start = std::chrono::steady_clock::now();
  expect_error_naming(p, "the same dict is stored under 'a");
  // 2^30 paths would take minutes; one visit per dict takes microseconds.
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 60.0);
  std::remove(p.c_str());
}

TEST(LoadTensors, AViewLargerThanTheFileCanHoldIsRefusedBeforeTheCopy) {
  const std::string p = temp_path("stride0.pt");
  actorpipe::hostile::stride_zero_view(p);
  expect_error_naming(p, "(the last of shape [60000, 60000]), more than a file of its size can hold");
  std::remove(p.c_str());
}

TEST(LoadTensors, ASmallStrideZeroViewStillLoads) {
  // torch.save of torch.zeros(1).expand(3, 4): within the budget, so it is
  // copied out like any view.
  const std::string p = temp_path("stride0_small.pt");
  namespace h = actorpipe::hostile;
  float one = 1.5f;
  h::write_archive(p, h::proto + "}" + h::str("e") + h::float_tensor("0", 1, 0, {3, 4}, {0, 0}) + "s.",
                   {{"0", std::string(reinterpret_cast<const char*>(&one), 4)}});
  const auto got = load_tensors(p);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_TRUE(at::equal(got[0].second, at::full({3, 4}, 1.5f)));
  std::remove(p.c_str());
}

TEST(LoadTensors, ACompressedEntryIsRefused) {
  // Deflate would let a small file claim gigabytes; torch.save stores.
  const std::string p = temp_path("deflated.pt");
  actorpipe::hostile::write_archive(p, std::string("\x80\x02}.", 4));
  std::string bytes;
  {
    std::ifstream f(p, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  }
  // Set the compression method of the central directory's first entry to 8.
  const auto cd = bytes.find(std::string("PK\x01\x02", 4));
  ASSERT_NE(cd, std::string::npos);
  bytes[cd + 10] = 8;
  std::ofstream(p, std::ios::binary | std::ios::trunc) << bytes;
  expect_error_naming(p, "is compressed (method 8)");
  std::remove(p.c_str());
}

TEST(LoadTensors, ARepeatedKeyKeepsItsFirstPlaceAndItsLastValue) {
  namespace h = actorpipe::hostile;
  const std::string p = temp_path("repeated.pt");
  float v[3] = {1, 2, 3};
  std::string pickle = h::proto + "}";
  pickle += h::str("a") + h::float_tensor("0", 1, 0, {1}, {1}) + "s";
  pickle += h::str("b") + h::float_tensor("1", 1, 0, {1}, {1}) + "s";
  pickle += h::str("a") + h::float_tensor("2", 1, 0, {1}, {1}) + "s.";
  h::write_archive(p, pickle,
                   {{"0", std::string(reinterpret_cast<const char*>(&v[0]), 4)},
                    {"1", std::string(reinterpret_cast<const char*>(&v[1]), 4)},
                    {"2", std::string(reinterpret_cast<const char*>(&v[2]), 4)}});
  const auto got = load_tensors(p);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].first, "a");
  EXPECT_EQ(got[0].second.item<float>(), 3.0f);
  EXPECT_EQ(got[1].first, "b");
  std::remove(p.c_str());
}

TEST(LoadTensors, AListThatHoldsItselfLoadsAndIsFreed) {
  // l = [l]; {"l": l}: a cycle, no tensor, no crash on the way out.
  const std::string p = write_archive("cycle.pt", std::string("\x80\x02}X\x01\x00\x00\x00l]q\x00h\x00" "as.", 17));
  EXPECT_TRUE(load_tensors(p).empty());
  std::remove(p.c_str());
}

}  // namespace
