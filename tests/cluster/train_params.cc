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
// silently stayed on one host cannot pass). --subnet: the address every
// rank's parameter server would advertise (ps.interface auto) must be one of
// this host's addresses inside that subnet. Exit 0 when every check holds,
// 1 otherwise (each failure printed), as psar's main: errors end the job.

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "comm/mpi_comm.h"
#include "core/config.h"
#include "core/errors.h"
#include "ps/address.h"
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
  if (!a.subnet.empty()) {
    const std::string advertised = ps::choose_bind_address("auto", here, hosts).advertise;
    const auto slash = a.subnet.find('/');
    const ps::InterfaceAddress net{"", *ps::parse_ipv4(a.subnet.substr(0, slash)),
                                   std::stoi(a.subnet.substr(slash + 1))};
    bool mine = false;
    for (const auto& i : here.interfaces)
      mine |= ps::format_ipv4(i.address) == advertised && net.contains(i.address);
    if (!mine)
      fail("ps.interface auto advertises " + advertised + " on host " + here.hostname +
           ", not this host's address in " + a.subnet);
  }

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
