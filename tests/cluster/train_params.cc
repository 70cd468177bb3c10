// The training run of the cluster tests: psar::train (what `psar train`
// runs) on a small MLP, under mpirun, then the final parameters either
// written to a file (the run on one host) or compared with one (the same run
// across the hosts of scripts/cluster.sh).
//
//   train_params [--set key=value ...] --write FILE
//   train_params [--set key=value ...] --compare FILE [--tolerance 1e-6]
//                [--hosts H] [--subnet A.B.C.D/LEN]
//
// --hosts: the ranks must run on exactly H distinct hostnames (so a run that
// silently stayed on one host cannot pass). --subnet: a parameter-server job
// launched with the defaults (ps.interface auto, one dedicated server on
// rank 0) must advertise rank 0's own address inside that subnet, and one
// push_pull through it must give the workers' mean gradient. Exit 0 when every check holds,
// 1 otherwise (each failure printed), as psar's main: errors end the job.

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "comm/mpi_comm.h"
#include "core/config.h"
#include "core/errors.h"
#include "ps/address.h"
#include "ps/launch.h"
#include "trainer/schema.h"
#include "trainer/trainer.h"

namespace {

using namespace psar;

const char* kConfig =
    "model: {type: mlp, hidden: [32, 16]}\n"
    "data: {dataset: synthetic, synthetic_samples: 960, synthetic_features: 20, synthetic_classes: 5}\n"
    "optimizer: {type: sgd, lr: 0.05, momentum: 0.9}\n"
    "train: {steps: 20, batch_size: 48, seed: 3, log_every: 1000}\n"
    "sync: {backend: ring, timeout: 20s}\n"
    "ps: {timeout: 20s}\n";

struct Args {
  std::vector<std::string> overrides;
  std::string write, compare, subnet;
  double tolerance = 1e-6;
  int hosts = 0;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) throw ConfigError("train_params: " + flag + " needs a value");
    const std::string value = argv[++i];
    if (flag == "--set") a.overrides.push_back(value);
    else if (flag == "--write") a.write = value;
    else if (flag == "--compare") a.compare = value;
    else if (flag == "--tolerance") a.tolerance = std::stod(value);
    else if (flag == "--hosts") a.hosts = std::stoi(value);
    else if (flag == "--subnet") a.subnet = value;
    else throw ConfigError("train_params: unknown option '" + flag + "'");
  }
  if (a.write.empty() == a.compare.empty())
    throw ConfigError("train_params: give exactly one of --write FILE and --compare FILE");
  return a;
}

// One push_pull of a default PS job: the server (rank 0) must advertise its
// host's address in `subnet`, and plain SGD (lr 1) from zeros must give
// minus the workers' mean gradient, here −(mean worker id + 1).
void check_ps_endpoint(Comm& world, const std::vector<ps::HostInfo>& hosts,
                       const std::string& subnet,
                       const std::function<void(const std::string&)>& fail) {
  const auto slash = subnet.find('/');
  const ps::InterfaceAddress net{"", *ps::parse_ipv4(subnet.substr(0, slash)),
                                 std::stoi(subnet.substr(slash + 1))};
  std::string server_address;
  for (const auto& i : hosts[0].interfaces)
    if (net.contains(i.address)) server_address = ps::format_ipv4(i.address);
  ps::PsOptions options;  // the defaults: interface auto, one dedicated server
  options.server.optimizer.lr = 1.0f;
  options.set_timeout(20);
  constexpr size_t kFloats = 1000;
  const std::vector<float> zeros(kFloats, 0.0f);
  ps::PsRank me = ps::launch_ps(world, options, zeros);
  const std::string endpoint = me.shards.at(0).endpoint;
  if (server_address.empty() || endpoint.rfind("tcp://" + server_address + ":", 0) != 0)
    fail("the server on " + hosts[0].hostname + " advertises " + endpoint + ", not its address " +
         (server_address.empty() ? "(none)" : server_address) + " in " + subnet);
  if (me.server) {
    me.server->run();
    return;
  }
  std::vector<float> grad(kFloats, static_cast<float>(me.worker + 1)), params(kFloats);
  me.client->push_pull(grad, params);
  const float expect = -0.5f * static_cast<float>(me.workers + 1);  // −mean of 1..N
  for (float p : params)
    if (p != expect) {
      fail("push_pull through " + endpoint + " gave " + std::to_string(p) + ", expected " +
           std::to_string(expect));
      break;
    }
  me.client.reset();  // goodbye: the server's run() returns
}

int run(Comm& world, const Args& a) {
  int failures = 0;
  auto fail = [&](const std::string& what) {
    std::fprintf(stderr, "train_params: rank %d: FAIL: %s\n", world.rank(), what.c_str());
    ++failures;
  };
  const ps::HostInfo here = ps::this_host();
  const auto hosts = ps::exchange_hosts(world, here);
  if (a.hosts > 0) {
    std::set<std::string> names;
    for (const auto& h : hosts) names.insert(h.hostname);
    if (static_cast<int>(names.size()) != a.hosts)
      fail("ranks ran on " + std::to_string(names.size()) + " hostname(s), expected " +
           std::to_string(a.hosts));
  }
  if (!a.subnet.empty()) check_ps_endpoint(world, hosts, a.subnet, fail);

  const Config config = Config::load_string(kConfig, config_schema(), a.overrides);
  const TrainResult r = train(world, config);
  // The first worker writes; every worker compares its own replica.
  const int first_worker = static_cast<int>(-world.allreduce_max(r.server ? -1e9 : -world.rank()));
  if (!r.server && !a.write.empty() && world.rank() == first_worker) {
    std::ofstream out(a.write, std::ios::binary);
    out.write(reinterpret_cast<const char*>(r.params.data()),
              static_cast<std::streamsize>(r.params.size() * sizeof(float)));
    if (!out) fail("cannot write " + a.write);
  }
  if (!r.server && !a.compare.empty()) {
    std::ifstream in(a.compare, std::ios::binary);
    std::vector<float> ref(r.params.size());
    in.read(reinterpret_cast<char*>(ref.data()),
            static_cast<std::streamsize>(ref.size() * sizeof(float)));
    if (!in || in.peek() != EOF) {
      fail(a.compare + " does not hold " + std::to_string(r.params.size()) + " parameters");
    } else {
      double worst = 0;
      for (size_t i = 0; i < ref.size(); ++i)
        worst = std::max(worst, std::abs(double{ref[i]} - r.params[i]));
      std::printf("train_params: rank %d on %s: %zu parameters, max |difference| %.3g\n",
                  world.rank(), here.hostname.c_str(), ref.size(), worst);
      if (!(worst <= a.tolerance))
        fail("parameters differ from " + a.compare + " by " + std::to_string(worst));
    }
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  psar::MpiRuntime runtime(&argc, &argv);
  psar::MpiComm world(MPI_COMM_WORLD);
  try {
    const int code = run(world, parse(argc, argv));
    // Every rank's verdict: the job fails if one rank's check did.
    return world.allreduce_max(code) > 0 ? 1 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_params: error on rank %d: %s\n", world.rank(), e.what());
    std::fflush(stderr);
    psar::MpiRuntime::abort(1);
  }
}
