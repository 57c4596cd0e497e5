#include "runtime/files/file_io.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>

namespace actorpipe {

namespace {

std::string error_text(int err) { return std::strerror(err); }

std::string parent_of(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return p.substr(0, slash);
}

std::string base_of(const std::string& p) {
  const size_t slash = p.find_last_of('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

const char* kind_of(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISCHR(m) || S_ISBLK(m)) return "a device";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  return "not a regular file";
}

/// The process's umask, without changing it (umask(2) would, for a moment,
/// under every other thread).
mode_t current_umask() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("Umask:", 0) == 0) return static_cast<mode_t>(std::strtol(line.c_str() + 6, nullptr, 8));
  return 022;
}

/// Closes and removes the temporary file unless the write completed.
struct temporary {
  std::string name;
  int fd = -1;
  bool done = false;
  ~temporary() {
    if (fd >= 0) ::close(fd);
    if (!done) ::unlink(name.c_str());
  }
};

}  // namespace

std::string output_target(const std::string& path) {
  if (path.empty()) throw io_error("an empty path is no file to write");
  std::string p = path;
  for (int hops = 0;; ++hops) {
    struct stat st {};
    if (::lstat(p.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) break;  // the write creates it, or the directory is wrong
      throw io_error(path + ": " + error_text(errno));
    }
    if (S_ISREG(st.st_mode)) break;
    if (!S_ISLNK(st.st_mode))
      throw io_error(path + ": is " + kind_of(st.st_mode) + ", not a regular file; refusing to replace it");
    if (hops >= 40) throw io_error(path + ": too many levels of symbolic links");
    char buf[PATH_MAX];
    const ssize_t n = ::readlink(p.c_str(), buf, sizeof buf - 1);
    if (n < 0) throw io_error(path + ": " + error_text(errno));
    const std::string link(buf, static_cast<size_t>(n));
    p = link.front() == '/' ? link : parent_of(p) + "/" + link;
  }
  const std::string dir = parent_of(p);
  const std::string shown = p == path ? path : path + " (a link to " + p + ")";
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0)
    throw io_error(shown + ": the directory " + dir + " does not exist (" + error_text(errno) + ")");
  if (!S_ISDIR(st.st_mode)) throw io_error(shown + ": " + dir + " is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    throw io_error(shown + ": cannot write in " + dir + ": " + error_text(errno));
  return p;
}

void write_atomic(const std::string& path, std::string_view bytes) {
  const std::string target = output_target(path);
  const std::string dir = parent_of(target);
  temporary tmp;
  tmp.name = dir + "/" + base_of(target) + ".XXXXXX.tmp";
  tmp.fd = ::mkstemps(tmp.name.data(), 4);
  if (tmp.fd < 0) {
    const int err = errno;
    tmp.done = true;  // nothing was created
    throw io_error(path + ": cannot create a temporary file in " + dir + ": " + error_text(err));
  }
  auto fail = [&](const std::string& what) { throw io_error(path + ": " + what + ": " + error_text(errno)); };
  struct stat old {};
  const mode_t mode = ::stat(target.c_str(), &old) == 0 ? (old.st_mode & 07777) : (0666 & ~current_umask());
  if (::fchmod(tmp.fd, mode) != 0) fail("cannot set the permissions of " + tmp.name);
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(tmp.fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail("cannot write");
    done += static_cast<size_t>(n);
  }
  // The bytes reach the disk before the name does: a crash leaves the old
  // file or the new one under the final name, never a torn one.
  if (::fsync(tmp.fd) != 0) fail("cannot write (fsync)");
  const int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) fail("cannot write (close)");
  if (::rename(tmp.name.c_str(), target.c_str()) != 0) fail("cannot rename " + tmp.name + " over it");
  tmp.done = true;
  // The rename itself reaches the disk with the directory's entry.
  if (int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::vector<std::string> torn_temporaries(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  const std::string suffix = ".tmp";
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > prefix.size() + suffix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      out.push_back(dir + "/" + name);
  }
  ::closedir(d);
  return out;
}

std::string read_file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw io_error(path + ": " + error_text(errno));
  std::string out((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) throw io_error(path + ": read error");
  return out;
}

}  // namespace actorpipe
