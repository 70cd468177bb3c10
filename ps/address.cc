#include "ps/address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <sstream>

#include "comm/comm.h"
#include "core/errors.h"

namespace psar::ps {

namespace {

bool is_loopback(uint32_t a) { return (a >> 24) == 127; }

std::string describe(const HostInfo& h) {
  std::string s;
  for (const auto& i : h.interfaces)
    s += (s.empty() ? "" : ", ") + i.name + " " + format_ipv4(i.address) + "/" +
         std::to_string(i.prefix);
  return s.empty() ? "no IPv4 interface" : s;
}

std::string field(const std::string& spec) { return "ps.interface '" + spec + "'"; }

// The address `auto` picks for `me` among `all` (every rank's host).
std::string auto_address(const std::string& spec, const HostInfo& me,
                         std::span<const HostInfo> all) {
  // Other hosts, once each, by hostname.
  std::set<std::string> seen{me.hostname};
  std::vector<const HostInfo*> others;
  for (const auto& h : all)
    if (seen.insert(h.hostname).second) others.push_back(&h);
  if (others.empty()) return "127.0.0.1";  // every rank on this host
  // The interface whose subnet holds the most other hosts (first on ties).
  const InterfaceAddress* best = nullptr;
  size_t best_hosts = 0;
  for (const auto& mine : me.interfaces) {
    if (is_loopback(mine.address)) continue;
    size_t hosts = 0;
    for (const HostInfo* h : others)
      hosts += std::any_of(h->interfaces.begin(), h->interfaces.end(), [&](const auto& theirs) {
        return !is_loopback(theirs.address) && mine.contains(theirs.address);
      });
    if (hosts > best_hosts) best = &mine, best_hosts = hosts;
  }
  if (!best) {
    std::string names;
    for (const HostInfo* h : others) names += (names.empty() ? "" : ", ") + h->hostname;
    throw ConfigError(field(spec) + ": host " + me.hostname + " (" + describe(me) +
                      ") has no interface in a subnet of the other hosts (" + names +
                      "); set ps.interface to an address they can reach");
  }
  return format_ipv4(best->address);
}

}  // namespace

bool InterfaceAddress::contains(uint32_t other) const {
  const uint32_t mask = prefix <= 0 ? 0 : ~uint32_t{0} << (32 - std::min(prefix, 32));
  return (address & mask) == (other & mask);
}

std::optional<uint32_t> parse_ipv4(const std::string& text) {
  in_addr a{};
  if (inet_pton(AF_INET, text.c_str(), &a) != 1) return std::nullopt;
  return ntohl(a.s_addr);
}

std::string format_ipv4(uint32_t address) {
  in_addr a{};
  a.s_addr = htonl(address);
  char buf[INET_ADDRSTRLEN];
  return inet_ntop(AF_INET, &a, buf, sizeof buf);
}

HostInfo this_host() {
  HostInfo h;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) h.hostname = name;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return h;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    InterfaceAddress a;
    a.name = i->ifa_name;
    a.address = ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr);
    a.prefix = 32;
    if (i->ifa_netmask)
      a.prefix = __builtin_popcount(
          ntohl(reinterpret_cast<const sockaddr_in*>(i->ifa_netmask)->sin_addr.s_addr));
    h.interfaces.push_back(a);
  }
  freeifaddrs(list);
  return h;
}

BindAddress choose_bind_address(const std::string& spec, const HostInfo& me,
                                std::span<const HostInfo> all) {
  if (spec.find("://") != std::string::npos) return {spec, ""};
  if (spec == "auto") {
    const std::string a = auto_address(spec, me, all);
    return {a, a};
  }
  if (spec == "*" || spec == "0.0.0.0") return {"*", auto_address(spec, me, all)};
  uint32_t address = 0;
  if (const auto a = parse_ipv4(spec)) {
    address = *a;
    const bool mine = std::any_of(me.interfaces.begin(), me.interfaces.end(),
                                  [&](const auto& i) { return i.address == address; });
    if (!mine && !is_loopback(address))
      throw ConfigError(field(spec) + ": not an address of host " + me.hostname + " (" +
                        describe(me) + ")");
  } else {
    const auto i = std::find_if(me.interfaces.begin(), me.interfaces.end(),
                                [&](const auto& i) { return i.name == spec; });
    if (i == me.interfaces.end())
      throw ConfigError(field(spec) + ": host " + me.hostname +
                        " has no interface of that name with an IPv4 address (" + describe(me) +
                        "); use auto, an address or an interface name");
    address = i->address;
  }
  if (is_loopback(address))
    for (const auto& h : all)
      if (h.hostname != me.hostname)
        throw ConfigError(field(spec) + ": a loopback address, but ranks run on host " +
                          h.hostname + " as well as " + me.hostname + " (use auto)");
  const std::string a = format_ipv4(address);
  return {a, a};
}

std::vector<HostInfo> exchange_hosts(Comm& world, const HostInfo& mine) {
  // One line per field: the hostname, then "name address prefix" per interface.
  std::ostringstream os;
  os << mine.hostname << '\n';
  for (const auto& i : mine.interfaces) os << i.name << ' ' << i.address << ' ' << i.prefix << '\n';
  const std::string text = os.str();
  const auto all = world.allgather_bytes(std::as_bytes(std::span<const char>(text)));
  std::vector<HostInfo> hosts;
  for (const auto& bytes : all) {
    std::istringstream is(std::string(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
    HostInfo h;
    std::getline(is, h.hostname);
    InterfaceAddress i;
    while (is >> i.name >> i.address >> i.prefix) h.interfaces.push_back(i);
    hosts.push_back(std::move(h));
  }
  return hosts;
}

}  // namespace psar::ps
