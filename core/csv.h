#pragma once
// Output files that are either complete or absent, and durable once written.
// AtomicFile collects the content in memory; commit() writes it to an
// unnamed file in the target's directory (O_TMPFILE: a process killed while
// writing leaves no name behind; a named "*.tmp.<pid>" where the file system
// has no O_TMPFILE), fsyncs it, gives it the target's name in one rename and
// fsyncs the directory. append_file_durable() is for files that grow while a
// run goes on (steps.csv): whole blocks of lines, each fsynced.
// CsvWriter formats rows for both.

#include <sstream>
#include <string>
#include <vector>

namespace psar {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile() = default;  // without commit() nothing was written
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  std::ostream& stream() { return out_; }
  // Writes, fsyncs and renames into place. Throws Error on I/O failure.
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::ostringstream out_;
  bool committed_ = false;
};

// Writes `content` to `path` atomically and durably.
void write_file_atomic(const std::string& path, const std::string& content);
// Appends `content` to `path` (created if absent) with one write and fsyncs
// it. When the write or the fsync fails (a full disk), the file is cut back
// to its length before the call and the error thrown: the file holds whole
// appends only. A process killed inside the write may leave a last line
// without its newline; readers drop such a line (docs/outputs.md).
void append_file_durable(const std::string& path, const std::string& content);

class CsvWriter {
 public:
  explicit CsvWriter(std::vector<std::string> header);
  // Appends one row; the number of fields must match the header.
  void row(const std::vector<std::string>& fields);
  const std::string& text() const { return text_; }
  void write(const std::string& path) const { write_file_atomic(path, text_); }
  // The header line alone, and the rows added since the last call (for a
  // file appended to as a run goes on).
  std::string header() const { return text_.substr(0, header_end_); }
  std::string take_new_rows();

  // Number formatting used by every CSV psar writes.
  static std::string num(double v);
  static std::string num(int64_t v) { return std::to_string(v); }
  static std::string num(int v) { return std::to_string(v); }

 private:
  size_t columns_;
  std::string text_;
  size_t header_end_ = 0;
  size_t taken_ = 0;
};

// Creates a directory and its parents; throws Error naming it on failure.
void make_dirs(const std::string& path);

}  // namespace psar
