#include "core/csv.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/errors.h"

namespace psar {

namespace {

std::string errno_text() { return std::strerror(errno); }

// The directory holding `path` ("." for a bare name).
std::string parent_of(const std::string& path) {
  const auto p = std::filesystem::path(path).parent_path();
  return p.empty() ? "." : p.string();
}

// Writes all of `content` to `fd`; false (errno set) on failure.
bool write_all(int fd, const std::string& content) {
  const char* p = content.data();
  size_t left = content.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

void fsync_dir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;  // best effort: the file itself is already durable
  ::fsync(fd);
  ::close(fd);
}

// Closes the descriptor on every path out.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {}

void AtomicFile::commit() {
  PSAR_CHECK(!committed_, "AtomicFile '", path_, "' committed twice");
  const std::string content = out_.str();
  const std::string dir = parent_of(path_);
  const std::string tmp = path_ + ".tmp." + std::to_string(::getpid());
  // An unnamed file first: until it is linked, a crash leaves nothing behind.
  Fd f{::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644)};
  const bool unnamed = f.fd >= 0;
  if (!unnamed) f.fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (f.fd < 0) throw Error("cannot write '" + path_ + "': " + errno_text());
  if (!write_all(f.fd, content) || ::fsync(f.fd) != 0) {
    const std::string why = errno_text();
    if (!unnamed) std::remove(tmp.c_str());
    throw Error("error writing '" + path_ + "': " + why);
  }
  if (unnamed) {
    // linkat cannot replace an existing name: link beside it, then rename over.
    const std::string self = "/proc/self/fd/" + std::to_string(f.fd);
    if (::linkat(AT_FDCWD, self.c_str(), AT_FDCWD, tmp.c_str(), AT_SYMLINK_FOLLOW) != 0)
      throw Error("cannot link '" + tmp + "': " + errno_text());
  }
  if (std::rename(tmp.c_str(), path_.c_str()) != 0) {
    const std::string why = errno_text();
    std::remove(tmp.c_str());
    throw Error("cannot rename '" + tmp + "' to '" + path_ + "': " + why);
  }
  fsync_dir(dir);
  committed_ = true;
}

void write_file_atomic(const std::string& path, const std::string& content) {
  AtomicFile f(path);
  f.stream() << content;
  f.commit();
}

void append_file_durable(const std::string& path, const std::string& content) {
  Fd f{::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644)};
  if (f.fd < 0) throw Error("cannot append to '" + path + "': " + errno_text());
  struct stat before {};
  if (::fstat(f.fd, &before) != 0) throw Error("cannot append to '" + path + "': " + errno_text());
  if (!write_all(f.fd, content) || ::fdatasync(f.fd) != 0) {
    // Part of the block may be in the file (a full disk): cut it back to the
    // rows it held, so that readers see whole blocks only.
    const std::string why = errno_text();
    const bool cut = ::ftruncate(f.fd, before.st_size) == 0 && ::fdatasync(f.fd) == 0;
    throw Error("error appending to '" + path + "': " + why +
                (cut ? " (the file is cut back to its last whole row)"
                     : " (and it could not be cut back to its last whole row)"));
  }
}

CsvWriter::CsvWriter(std::vector<std::string> header) : columns_(header.size()) {
  row(header);
  header_end_ = taken_ = text_.size();
}

std::string CsvWriter::take_new_rows() {
  std::string rows = text_.substr(taken_);
  taken_ = text_.size();
  return rows;
}

void CsvWriter::row(const std::vector<std::string>& fields) {
  PSAR_CHECK(fields.size() == columns_, "CSV row has ", fields.size(), " fields, header has ",
             columns_);
  for (size_t i = 0; i < fields.size(); ++i) {
    if (i) text_ += ',';
    const std::string& f = fields[i];
    if (f.find_first_of(",\"\n") != std::string::npos) {
      text_ += '"';
      for (char c : f) {
        if (c == '"') text_ += '"';
        text_ += c;
      }
      text_ += '"';
    } else {
      text_ += f;
    }
  }
  text_ += '\n';
}

std::string CsvWriter::num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec && !std::filesystem::is_directory(path))
    throw Error("cannot create directory '" + path + "': " + ec.message());
}

}  // namespace psar
