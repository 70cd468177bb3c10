// ps.interface: the bind and advertised address each server picks, from
// made-up hosts (the choice is pure), and on this machine through the
// control plane; a worker that cannot reach its shard fails within the
// connect deadline, naming the endpoint and the host.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "comm/inproc_comm.h"
#include "core/errors.h"
#include "core/timer.h"
#include "ps/address.h"
#include "ps/client.h"
#include "ps/raw_echo.h"

namespace psar::ps {
namespace {

using ::testing::HasSubstr;

InterfaceAddress iface(const std::string& name, const std::string& address, int prefix) {
  return {name, *parse_ipv4(address), prefix};
}
const InterfaceAddress kLo = iface("lo", "127.0.0.1", 8);

// Two hosts of a cluster subnet, each also on a management network of its own.
HostInfo host1() { return {"psar-h1", {kLo, iface("mgmt0", "192.168.7.5", 24), iface("psar-nic", "10.99.0.1", 24)}}; }
HostInfo host2() { return {"psar-h2", {kLo, iface("mgmt0", "172.16.3.9", 16), iface("psar-nic", "10.99.0.2", 24)}}; }

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no ConfigError)";
}

TEST(Address, Ipv4TextRoundTripsAndRejectsNonAddresses) {
  EXPECT_EQ(format_ipv4(*parse_ipv4("10.99.0.254")), "10.99.0.254");
  EXPECT_EQ(*parse_ipv4("1.2.3.4"), 0x01020304u);
  EXPECT_FALSE(parse_ipv4("eth0"));
  EXPECT_FALSE(parse_ipv4("10.99.0.256"));
}

TEST(Address, ASubnetContainsExactlyItsPrefix) {
  const auto a = iface("x", "10.99.0.1", 24);
  EXPECT_TRUE(a.contains(*parse_ipv4("10.99.0.255")));
  EXPECT_FALSE(a.contains(*parse_ipv4("10.99.1.0")));
  EXPECT_TRUE(iface("x", "10.0.0.1", 0).contains(*parse_ipv4("8.8.8.8")));
  EXPECT_FALSE(iface("x", "10.0.0.1", 32).contains(*parse_ipv4("10.0.0.2")));
}

TEST(Address, AutoOnOneHostIsLoopback) {
  const HostInfo me = host1();
  const std::vector<HostInfo> all{me, me, me};
  const BindAddress b = choose_bind_address("auto", me, all);
  EXPECT_EQ(b.bind, "127.0.0.1");
  EXPECT_EQ(b.advertise, "127.0.0.1");
}

TEST(Address, AutoAcrossHostsIsTheInterfaceInThePeersSubnet) {
  const std::vector<HostInfo> all{host1(), host1(), host2(), host2()};
  EXPECT_EQ(choose_bind_address("auto", host1(), all).advertise, "10.99.0.1");
  EXPECT_EQ(choose_bind_address("auto", host2(), all).advertise, "10.99.0.2");
  EXPECT_EQ(choose_bind_address("auto", host2(), all).bind, "10.99.0.2");
}

TEST(Address, AutoPrefersTheInterfaceThatReachesMostHosts) {
  // host3 shares only the management network with host1; host2 and host4 the cluster's.
  const HostInfo host3{"h3", {kLo, iface("mgmt0", "192.168.7.6", 24)}};
  const HostInfo host4{"h4", {kLo, iface("psar-nic", "10.99.0.4", 24)}};
  EXPECT_EQ(choose_bind_address("auto", host1(), std::vector<HostInfo>{host1(), host3, host2(), host4}).advertise,
            "10.99.0.1");
  EXPECT_EQ(choose_bind_address("auto", host1(), std::vector<HostInfo>{host1(), host3}).advertise,
            "192.168.7.5");
}

TEST(Address, AWildcardBindsEverythingAndAdvertisesTheAutoAddress) {
  const std::vector<HostInfo> all{host1(), host2()};
  for (const char* spec : {"*", "0.0.0.0"}) {
    const BindAddress b = choose_bind_address(spec, host1(), all);
    EXPECT_EQ(b.bind, "*");
    EXPECT_EQ(b.advertise, "10.99.0.1");
  }
}

TEST(Address, AnInterfaceNameOrOwnAddressIsUsedAsGiven) {
  const std::vector<HostInfo> all{host1(), host2()};
  EXPECT_EQ(choose_bind_address("psar-nic", host1(), all).advertise, "10.99.0.1");
  EXPECT_EQ(choose_bind_address("mgmt0", host1(), all).bind, "192.168.7.5");
  EXPECT_EQ(choose_bind_address("10.99.0.1", host1(), all).advertise, "10.99.0.1");
  EXPECT_EQ(choose_bind_address("inproc://x", host1(), all).bind, "inproc://x");
}

TEST(Address, ChoicesThatCannotWorkNameTheFieldAndTheHost) {
  const std::vector<HostInfo> all{host1(), host2()};
  const std::string loop = error_of([&] { choose_bind_address("127.0.0.1", host1(), all); });
  EXPECT_THAT(loop, HasSubstr("ps.interface '127.0.0.1'"));
  EXPECT_THAT(loop, HasSubstr("psar-h2"));
  const std::string foreign = error_of([&] { choose_bind_address("10.99.0.2", host1(), all); });
  EXPECT_THAT(foreign, HasSubstr("not an address of host psar-h1"));
  EXPECT_THAT(foreign, HasSubstr("psar-nic 10.99.0.1/24"));
  const std::string name = error_of([&] { choose_bind_address("eth7", host1(), all); });
  EXPECT_THAT(name, HasSubstr("ps.interface 'eth7': host psar-h1 has no interface"));
  const HostInfo island{"island", {kLo, iface("eth0", "10.1.0.1", 24)}};
  const std::string none =
      error_of([&] { choose_bind_address("auto", island, std::vector<HostInfo>{island, host2()}); });
  EXPECT_THAT(none, HasSubstr("host island"));
  EXPECT_THAT(none, HasSubstr("psar-h2"));
}

TEST(Address, ThisHostHasLoopbackAndEveryRankSeesEveryRanksHost) {
  const HostInfo me = this_host();
  EXPECT_FALSE(me.hostname.empty());
  EXPECT_TRUE(std::any_of(me.interfaces.begin(), me.interfaces.end(),
                          [](const auto& i) { return i.address == *parse_ipv4("127.0.0.1"); }));
  run_inproc(3, [&](Comm& comm) {
    HostInfo mine = me;
    mine.hostname += "-" + std::to_string(comm.rank());  // tell the ranks apart
    const auto all = exchange_hosts(comm, mine);
    ASSERT_EQ(all.size(), 3u);
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(all[r].hostname, me.hostname + "-" + std::to_string(r));
      ASSERT_EQ(all[r].interfaces.size(), me.interfaces.size());
      for (size_t i = 0; i < me.interfaces.size(); ++i) {
        EXPECT_EQ(all[r].interfaces[i].name, me.interfaces[i].name);
        EXPECT_EQ(all[r].interfaces[i].address, me.interfaces[i].address);
        EXPECT_EQ(all[r].interfaces[i].prefix, me.interfaces[i].prefix);
      }
    }
  });
}

TEST(Address, AWorkerThatCannotConnectFailsFastNamingTheEndpointAndTheHost) {
  ClientOptions o;
  o.timeout_s = 60;  // the reply deadline: far beyond what this may take
  o.connect_timeout_s = 1.5;
  o.host = "psar-h2";
  o.shards = {{0, "tcp://127.0.0.1:1", {0, 8}, "psar-h1", ""}};  // port 1: nobody listens
  Stopwatch clock;
  try {
    Client client(o);
    FAIL() << "connected to nothing";
  } catch (const TimeoutError& e) {
    EXPECT_LT(clock.seconds(), 3.0);
    EXPECT_GE(clock.seconds(), 1.4);
    EXPECT_THAT(e.what(), HasSubstr("shard 0 at tcp://127.0.0.1:1 (host psar-h1)"));
    EXPECT_THAT(e.what(), HasSubstr("ps worker 0 on host psar-h2: cannot connect within"));
  }
}

TEST(Address, TheBenchmarksEchoClientFailsFastToo) {
  Stopwatch clock;
  try {
    EchoClient client({"tcp://127.0.0.1:1"}, {ShardLayout{0, {0, 8}, 0}}, 1.0);
    FAIL() << "connected to nothing";
  } catch (const TimeoutError& e) {
    EXPECT_LT(clock.seconds(), 3.0);
    EXPECT_THAT(e.what(), HasSubstr("echo client: cannot connect to tcp://127.0.0.1:1: "));
  }
}

}  // namespace
}  // namespace psar::ps
