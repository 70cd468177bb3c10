#pragma once
// Output files that are either complete or absent: AtomicFile writes to a
// temporary name beside the target and renames on commit(), so a crash never
// leaves a half-written CSV. CsvWriter formats rows for it.

#include <fstream>
#include <string>
#include <vector>

namespace psar {

class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // removes the temporary if commit() was never reached
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  std::ostream& stream() { return out_; }
  // Flushes, closes and renames into place. Throws Error on I/O failure.
  void commit();
  const std::string& path() const { return path_; }

 private:
  std::string path_, tmp_;
  std::ofstream out_;
  bool committed_ = false;
};

// Writes `content` to `path` atomically.
void write_file_atomic(const std::string& path, const std::string& content);

class CsvWriter {
 public:
  explicit CsvWriter(std::vector<std::string> header);
  // Appends one row; the number of fields must match the header.
  void row(const std::vector<std::string>& fields);
  const std::string& text() const { return text_; }
  void write(const std::string& path) const { write_file_atomic(path, text_); }

  // Number formatting used by every CSV psar writes.
  static std::string num(double v);
  static std::string num(int64_t v) { return std::to_string(v); }
  static std::string num(int v) { return std::to_string(v); }

 private:
  size_t columns_;
  std::string text_;
};

// Creates a directory and its parents; throws Error naming it on failure.
void make_dirs(const std::string& path);

}  // namespace psar
