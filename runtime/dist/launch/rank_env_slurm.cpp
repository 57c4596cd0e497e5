// Slurm's compressed lists (runtime/dist/launch/rank_env.hpp): host lists such as
// "gpu[01-04,07],cpu5" and per-node task counts such as "4(x2),3".
#include <cstdint>

#include "runtime/dist/launch/rank_env.hpp"
#include "runtime/util/text.hpp"

namespace actorpipe {

namespace {

constexpr int64_t max_nodes = 1000000;

bool is_digit(char c) { return c >= '0' && c <= '9'; }

bool host_char(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '.' || c == '_';
}

/// Decimal digit strings compared as numbers ("009" < "10").
bool number_less(std::string a, std::string b) {
  auto strip = [](std::string& s) {
    const auto nz = s.find_first_not_of('0');
    s = nz == std::string::npos ? "0" : s.substr(nz);
  };
  strip(a);
  strip(b);
  return a.size() != b.size() ? a.size() < b.size() : a < b;
}

/// Reads a host list, keeping the first host; throws on any malformation.
class hostlist_reader {
 public:
  hostlist_reader(const std::string& list, const std::string& variable) : s_(list), var_(variable) {}

  std::string first_host() {
    if (s_.empty()) bad("it is empty");
    std::string first;
    for (bool first_item = true;; first_item = false) {
      std::string host = item();
      if (first_item) first = host;
      if (i_ == s_.size()) return first;
      ++i_;  // the ',' between hosts
    }
  }

 private:
  [[noreturn]] void bad(const std::string& why) const {
    throw rank_env_error(var_ + " " + quoted_input(s_) + " is malformed: " + why);
  }

  /// One host pattern up to a top-level ',' or the end; its first host.
  std::string item() {
    std::string host;
    while (i_ < s_.size() && s_[i_] != ',') {
      const char c = s_[i_];
      if (c == '[') {
        host += bracket();
      } else if (c == ']') {
        bad("']' without '['");
      } else if (host_char(c)) {
        host += c;
        ++i_;
      } else {
        bad("character " + quoted_input(std::string(1, c)) + " is not allowed in a host name");
      }
    }
    if (host.empty()) bad("a host name is empty");
    return host;
  }

  std::string digits() {
    const size_t begin = i_;
    while (i_ < s_.size() && is_digit(s_[i_])) ++i_;
    if (i_ == begin) bad("a range in '[...]' is not a number or LOW-HIGH");
    return s_.substr(begin, i_ - begin);
  }

  /// "[01-04,07]": checked; its first number, padding kept.
  std::string bracket() {
    ++i_;  // '['
    std::string first;
    for (bool first_range = true;; first_range = false) {
      const std::string low = digits();
      if (i_ < s_.size() && s_[i_] == '-') {
        ++i_;
        const std::string high = digits();
        if (number_less(high, low)) bad("range " + low + "-" + high + " goes down");
      }
      if (first_range) first = low;
      if (i_ >= s_.size()) bad("'[' without ']'");
      if (s_[i_] == ']') {
        ++i_;
        return first;
      }
      if (s_[i_] != ',') bad("a range in '[...]' is not a number or LOW-HIGH");
      ++i_;
    }
  }

  const std::string& s_;
  const std::string& var_;
  size_t i_ = 0;
};

/// Reads digits at `i` as a positive count, or throws with `why`.
int64_t read_count(const std::string& s, size_t& i, const std::function<void()>& bad) {
  const size_t begin = i;
  int64_t v = 0;
  while (i < s.size() && is_digit(s[i])) {
    v = v * 10 + (s[i++] - '0');
    if (v > max_nodes) bad();
  }
  if (i == begin || v == 0) bad();
  return v;
}

}  // namespace

std::string first_slurm_host(const std::string& nodelist, const std::string& variable) {
  return hostlist_reader(nodelist, variable).first_host();
}

std::vector<int> slurm_tasks_per_node(const std::string& value, const std::string& variable) {
  auto bad = [&] {
    throw rank_env_error(variable + " " + quoted_input(value) + " is not a list of COUNT or COUNT(xNODES)");
  };
  std::vector<int> out;
  size_t i = 0;
  for (;;) {
    const int64_t count = read_count(value, i, bad);
    int64_t times = 1;
    if (i < value.size() && value[i] == '(') {
      if (value.compare(i, 2, "(x") != 0) bad();
      i += 2;
      times = read_count(value, i, bad);
      if (i >= value.size() || value[i] != ')') bad();
      ++i;
    }
    if (static_cast<int64_t>(out.size()) + times > max_nodes) bad();
    out.insert(out.end(), static_cast<size_t>(times), static_cast<int>(count));
    if (i == value.size()) return out;
    if (value[i] != ',') bad();
    ++i;
  }
}

}  // namespace actorpipe
