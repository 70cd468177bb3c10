#pragma once
// Where a parameter server listens and what it tells the workers: the bind
// address (what the ROUTER socket binds) apart from the advertised one (what
// the workers connect to), chosen from `ps.interface`:
//
//   auto (default)   the address this host uses to reach the other ranks:
//                    127.0.0.1 when every rank runs on this host (same
//                    hostname); otherwise the address of the interface whose
//                    subnet holds the most of the other hosts' addresses.
//                    Bound and advertised.
//   * or 0.0.0.0     bind every interface, advertise what `auto` would.
//   an IPv4 address  bound and advertised; must be one of this host's.
//   an interface     its IPv4 address, bound and advertised ("eth0", "psar-nic").
//   scheme://...     a full ZeroMQ address ("inproc://x", "tcp://10.0.0.1:5555"), as is.
//
// Every rank learns the others' hostnames and interface addresses over the
// Comm control plane (exchange_hosts), so nothing depends on name resolution.
// A choice that cannot work — loopback while ranks run on other hosts, an
// address or interface this host lacks, no interface sharing a subnet with
// the other hosts — is a ConfigError naming ps.interface, the host and what it has.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace psar {
class Comm;
}

namespace psar::ps {

struct InterfaceAddress {
  std::string name;      // "eth0"
  uint32_t address = 0;  // IPv4, host byte order
  int prefix = 32;       // subnet prefix length
  bool contains(uint32_t other) const;  // `other` lies in this interface's subnet
};

struct HostInfo {
  std::string hostname;
  std::vector<InterfaceAddress> interfaces;  // IPv4 ones that are up, loopback included
};

struct BindAddress {
  std::string bind;       // for bind_endpoint(): "10.99.0.1", "*", or a full ZeroMQ address
  std::string advertise;  // the host workers connect to: "10.99.0.1" ("" = the bound endpoint's)
};

std::optional<uint32_t> parse_ipv4(const std::string& text);
std::string format_ipv4(uint32_t address);

// This process's host: gethostname() and getifaddrs().
HostInfo this_host();

// The pure choice (unit-tested with made-up hosts): `me` is this rank's host,
// `all` every rank's, this one included.
BindAddress choose_bind_address(const std::string& spec, const HostInfo& me,
                                std::span<const HostInfo> all);

// Collective over `world`: every rank's HostInfo, in rank order.
std::vector<HostInfo> exchange_hosts(Comm& world, const HostInfo& mine);

}  // namespace psar::ps
