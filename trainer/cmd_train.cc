// psar train CONFIG.yaml [--sync NAME] [--out DIR] [--resume RUN_DIR] [--trace] [--quiet]
//            [--set key=value ...]
//
// The configuration is read and checked before MPI starts, so a bad config
// fails fast with one message and leaves nothing behind.

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "comm/comm.h"
#include "core/errors.h"
#include "core/ops.h"
#include "trainer/cli.h"
#include "trainer/schema.h"
#include "trainer/trainer.h"

namespace psar {

namespace {

// Cores per rank when several ranks share this host (OpenBLAS threads).
int blas_threads() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks = local ? std::max(1, std::atoi(local)) : 1;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / ranks);
}

}  // namespace

int cmd_train(CliContext& ctx) {
  std::string config_path, out_dir, resume_dir;
  bool quiet = false;
  std::vector<std::string> overrides = ctx.overrides;
  for (size_t i = 0; i < ctx.args.size(); ++i) {
    const std::string& a = ctx.args[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= ctx.args.size()) throw ConfigError(std::string(flag) + " needs a value");
      return ctx.args[++i];
    };
    if (a == "--sync") overrides.push_back("sync.backend=" + value("--sync"));
    else if (a == "--out") out_dir = value("--out");
    else if (a == "--resume")
      resume_dir = value("--resume");
    else if (a == "--quiet") quiet = true;
    else if (a == "--trace") overrides.push_back("train.trace=true");
    else if (!a.empty() && a[0] == '-') throw ConfigError("psar train: unknown option '" + a + "'");
    else if (config_path.empty()) config_path = a;
    else throw ConfigError("psar train: more than one config file given ('" + config_path +
                           "', '" + a + "')");
  }
  if (config_path.empty())
    throw ConfigError(
        "usage: psar train CONFIG.yaml [--sync NAME] [--out DIR] [--resume RUN_DIR] "
        "[--set key=value]");
  // Steps and epochs are two ways to say how long: setting one on the
  // command line replaces the other from the file.
  auto overridden = [&](const std::string& key) {
    for (const auto& o : overrides)
      if (o.rfind(key + "=", 0) == 0) return true;
    return false;
  };
  if (overridden("train.steps") && !overridden("train.epochs")) overrides.push_back("train.epochs=~");
  if (overridden("train.epochs") && !overridden("train.steps")) overrides.push_back("train.steps=~");
  const Config config = Config::load_file(config_path, config_schema(), overrides);
  // --resume RUN_DIR continues that run directory (its latest checkpoint).
  if (!resume_dir.empty()) {
    if (!out_dir.empty() && out_dir != resume_dir)
      throw ConfigError("psar train: --resume " + resume_dir + " continues that directory; --out " +
                        out_dir + " names another");
    out_dir = resume_dir;
  }

  ops::set_blas_threads(blas_threads());
  Comm& world = ctx.world(/*threads=*/config.get_bool("sync.overlap"));
  if (out_dir.empty())
    out_dir = "results/runs/" + config.get_string("experiment.name") + "_" +
              config.get_string("sync.backend") + "_n" + std::to_string(world.size());
  TrainOptions options;
  options.out_dir = out_dir;
  options.verbose = !quiet;
  options.resume = !resume_dir.empty();
  const TrainResult r = train(world, config, options);
  if (!r.server && world.rank() == 0 && !quiet)
    std::printf("done: %ld steps, final loss %.4f, test accuracy %.2f%%, %.1f s -> %s\n",
                static_cast<long>(r.steps), r.final_loss, 100.0 * r.test_accuracy, r.wall_s,
                out_dir.c_str());
  return 0;
}

}  // namespace psar
