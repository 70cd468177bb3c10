#pragma once
// Parsing of human quantities: sizes ("4K", "64M", "1G" — binary multiples),
// durations ("5us", "2ms", "1s"), bandwidths ("10Gbit", "1.25GB/s").
// Each throws ConfigError naming the text it could not read.

#include <cstdint>
#include <string>
#include <string_view>

namespace psar {

// Bytes: a plain integer, or with suffix K/M/G/T (powers of 1024; "KiB"/"KB" also accepted).
int64_t parse_bytes(std::string_view text);
// Seconds from "500ns", "5us", "2ms", "1.5s", "2min". A number without a
// unit is a ConfigError ("5" could be any of them) except 0, or where
// `bare_seconds` says the caller's flag is in seconds by name (--alpha SECONDS).
double parse_duration(std::string_view text, bool bare_seconds = false);
// Bytes per second from "10Gbit", "100Mbit", "1.25GB/s", "500MB/s", "100B/s"
// (decimal units, as NIC speeds are quoted). A number without a unit is a
// ConfigError.
double parse_bandwidth(std::string_view text);

std::string format_bytes(int64_t bytes);        // 4096 -> "4K"
std::string format_duration(double seconds);    // 5e-6 -> "5us"
std::string format_bandwidth(double bytes_per_s);  // 1.25e8 -> "1Gbit"

}  // namespace psar
