#include "core/csv.h"

#include <unistd.h>

#include <cstdio>
#include <filesystem>

#include "core/errors.h"

namespace psar {

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
  out_.open(tmp_, std::ios::binary | std::ios::trunc);
  if (!out_) throw Error("cannot write '" + tmp_ + "'");
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    out_.close();
    std::remove(tmp_.c_str());
  }
}

void AtomicFile::commit() {
  out_.flush();
  if (!out_) throw Error("error writing '" + tmp_ + "'");
  out_.close();
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0)
    throw Error("cannot rename '" + tmp_ + "' to '" + path_ + "'");
  committed_ = true;
}

void write_file_atomic(const std::string& path, const std::string& content) {
  AtomicFile f(path);
  f.stream() << content;
  f.commit();
}

CsvWriter::CsvWriter(std::vector<std::string> header) : columns_(header.size()) { row(header); }

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
  if (ec) throw Error("cannot create directory '" + path + "': " + ec.message());
}

}  // namespace psar
