#include "core/units.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/errors.h"

namespace psar {

namespace {

// Splits "12.5Gbit" into 12.5 and "gbit" (lower-cased, spaces dropped).
bool split_number(std::string_view text, double& value, std::string& unit) {
  std::string s;
  for (char c : text)
    if (!std::isspace(static_cast<unsigned char>(c))) s.push_back(c);
  if (s.empty()) return false;
  size_t pos = 0;
  while (pos < s.size() && (std::isdigit(static_cast<unsigned char>(s[pos])) || s[pos] == '.' ||
                            s[pos] == 'e' || s[pos] == 'E' || s[pos] == '+' || s[pos] == '-')) {
    // Stop at an 'e'/'E' that starts a unit rather than an exponent.
    if ((s[pos] == 'e' || s[pos] == 'E') &&
        (pos + 1 >= s.size() || !(std::isdigit(static_cast<unsigned char>(s[pos + 1])) ||
                                  s[pos + 1] == '-' || s[pos + 1] == '+')))
      break;
    ++pos;
  }
  if (pos == 0) return false;
  try {
    size_t used = 0;
    value = std::stod(s.substr(0, pos), &used);
    if (used != pos) return false;
  } catch (const std::exception&) {
    return false;
  }
  unit.clear();
  for (size_t i = pos; i < s.size(); ++i)
    unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(s[i]))));
  return std::isfinite(value);
}

std::string fmt(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace

int64_t parse_bytes(std::string_view text) {
  double v = 0;
  std::string unit;
  if (!split_number(text, v, unit) || v < 0)
    throw ConfigError("cannot read a size from '" + std::string(text) + "' (e.g. 4096, 4K, 64M, 1G)");
  double mult = 0;
  if (unit.empty() || unit == "b") mult = 1;
  else if (unit == "k" || unit == "kb" || unit == "kib") mult = 1024.0;
  else if (unit == "m" || unit == "mb" || unit == "mib") mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gb" || unit == "gib") mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tb" || unit == "tib") mult = 1024.0 * 1024 * 1024 * 1024;
  else
    throw ConfigError("unknown size unit '" + unit + "' in '" + std::string(text) +
                      "' (use K, M, G or T)");
  const double bytes = v * mult;
  if (bytes != std::floor(bytes))
    throw ConfigError("size '" + std::string(text) + "' is not a whole number of bytes");
  return static_cast<int64_t>(bytes);
}

double parse_duration(std::string_view text, bool bare_seconds) {
  double v = 0;
  std::string unit;
  if (!split_number(text, v, unit) || v < 0)
    throw ConfigError("cannot read a duration from '" + std::string(text) + "' (e.g. 5us, 2ms, 1s)");
  if (unit.empty() && v != 0 && !bare_seconds)
    throw ConfigError("the duration '" + std::string(text) + "' has no unit: write " +
                      std::string(text) + "s, " + std::string(text) + "ms, " + std::string(text) +
                      "us or " + std::string(text) + "ns");
  if (unit.empty() || unit == "s") return v;
  if (unit == "ms") return v * 1e-3;
  if (unit == "us" || unit == "µs") return v * 1e-6;
  if (unit == "ns") return v * 1e-9;
  if (unit == "min") return v * 60;
  throw ConfigError("unknown duration unit '" + unit + "' in '" + std::string(text) +
                    "' (use ns, us, ms, s)");
}

double parse_bandwidth(std::string_view text) {
  double v = 0;
  std::string unit;
  if (!split_number(text, v, unit) || v <= 0)
    throw ConfigError("cannot read a bandwidth from '" + std::string(text) +
                      "' (e.g. 10Gbit, 100Mbit, 1.25GB/s)");
  if (unit.empty())
    throw ConfigError("the bandwidth '" + std::string(text) + "' has no unit: write e.g. " +
                      std::string(text) + "Gbit, " + std::string(text) + "Mbit, " +
                      std::string(text) + "GB/s or " + std::string(text) + "B/s (bytes per second)");
  if (unit == "b/s") return v;
  if (unit == "kbit" || unit == "kbps" || unit == "kbit/s") return v * 1e3 / 8;
  if (unit == "mbit" || unit == "mbps" || unit == "mbit/s") return v * 1e6 / 8;
  if (unit == "gbit" || unit == "gbps" || unit == "gbit/s") return v * 1e9 / 8;
  if (unit == "tbit" || unit == "tbps" || unit == "tbit/s") return v * 1e12 / 8;
  if (unit == "kb/s") return v * 1e3;
  if (unit == "mb/s") return v * 1e6;
  if (unit == "gb/s") return v * 1e9;
  throw ConfigError("unknown bandwidth unit '" + unit + "' in '" + std::string(text) +
                    "' (use Mbit, Gbit, MB/s, GB/s)");
}

std::string format_bytes(int64_t bytes) {
  static const char* units[] = {"", "K", "M", "G", "T"};
  int u = 0;
  int64_t b = bytes;
  while (u < 4 && b >= 1024 && b % 1024 == 0) {
    b /= 1024;
    ++u;
  }
  return std::to_string(b) + units[u];
}

std::string format_duration(double s) {
  if (s >= 1) return fmt(s) + "s";
  if (s >= 1e-3) return fmt(s * 1e3) + "ms";
  if (s >= 1e-6) return fmt(s * 1e6) + "us";
  return fmt(s * 1e9) + "ns";
}

std::string format_bandwidth(double bps) {
  const double bits = bps * 8;
  if (bits >= 1e12) return fmt(bits / 1e12) + "Tbit";
  if (bits >= 1e9) return fmt(bits / 1e9) + "Gbit";
  if (bits >= 1e6) return fmt(bits / 1e6) + "Mbit";
  return fmt(bits / 1e3) + "Kbit";
}

}  // namespace psar
