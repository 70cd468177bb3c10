#include "core/trace.h"

#include <cstdio>

namespace psar {

void Tracer::span(const char* name, const char* category, double start, double end, int tid,
                  const std::string& args_json) {
  if (!enabled_) return;
  events_.push_back({name, category, start, end, tid, args_json});
}

std::string Tracer::events_json(int rank) const {
  std::string out;
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"rank %d\"}}",
                rank, rank);
  out += buf;
  for (const auto& e : events_) {
    // Microseconds, as the format wants; names are psar's own (no escaping needed).
    std::snprintf(buf, sizeof buf,
                  ",\n{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,"
                  "\"ts\":%.3f,\"dur\":%.3f%s%s%s}",
                  e.name.c_str(), e.category, rank, e.tid, (e.start - origin_) * 1e6,
                  (e.end - e.start) * 1e6, e.args.empty() ? "" : ",\"args\":",
                  e.args.c_str(), "");
    out += buf;
  }
  return out;
}

std::string Tracer::document(const std::vector<std::string>& parts) {
  std::string doc = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  for (const auto& p : parts) {
    if (p.empty()) continue;
    if (!first) doc += ",\n";
    doc += p;
    first = false;
  }
  doc += "\n]}\n";
  return doc;
}

}  // namespace psar
