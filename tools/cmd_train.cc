// psar train CONFIG.yaml [--sync NAME] [--out DIR] [--overwrite] [--resume RUN_DIR]
//            [--trace] [--quiet] [--set key=value ...]
//
// The configuration is read and checked before MPI starts, so a bad config
// fails fast and leaves nothing behind. SIGTERM and SIGINT ask the run to
// stop after the step in progress (docs/checkpoints.md); a second one ends
// the process at once.

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>

#include "comm/comm.h"
#include "core/errors.h"
#include "core/ops.h"
#include "core/rng.h"
#include "tools/cli.h"
#include "trainer/schema.h"
#include "trainer/trainer.h"

namespace psar {

namespace {

constexpr const char* kUsage =
    "usage: psar train CONFIG.yaml [--sync NAME] [--out DIR] [--overwrite] [--resume RUN_DIR]\n"
    "                  [--trace] [--quiet] [--set key=value ...]\n"
    "\n"
    "  --sync NAME       gradient synchronization backend (sync.backend)\n"
    "  --out DIR         run directory (default results/runs/<experiment>_<sync>_n<ranks>[_<sets>])\n"
    "  --overwrite       replace the run already in --out (without it such a run is refused)\n"
    "  --resume RUN_DIR  continue RUN_DIR from its latest checkpoint; with another --out, branch\n"
    "                    it there (RUN_DIR is only read)\n"
    "  --trace           write trace.json (train.trace=true)\n"
    "  --quiet           no progress lines\n"
    "  --set key=value   override a configuration key (psar keys lists them)\n"
    "\n"
    "SIGTERM or SIGINT stops after the step in progress with status terminated (and a checkpoint\n"
    "when train.checkpoint_every is on); a second one ends the process at once.\n";

// Cores per rank when several ranks share this host (OpenBLAS threads).
int blas_threads() {
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks = local ? std::max(1, std::atoi(local)) : 1;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::max(1, cores / ranks);
}

// The stop request of SIGTERM / SIGINT (TrainOptions::stop_signal). A signal
// handler can reach nothing else, hence the one process-wide flag.
std::atomic<int> stop_signal{0};

void on_stop_signal(int sig) {
  int none = 0;
  if (!stop_signal.compare_exchange_strong(none, sig)) ::_exit(128 + sig);  // the second one
}

// Threads created from here on (MPI's, ZeroMQ's) keep SIGTERM and SIGINT
// blocked, so no blocking call of theirs is interrupted; one thread waits for
// them. Threads that existed before (a BLAS pool) run the handler.
void catch_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  std::thread([set] {
    for (int sig = 0;;)
      if (sigwait(&set, &sig) == 0) on_stop_signal(sig);
  }).detach();
}

// "tp2_lr0.05": the --set overrides that tell this run from the config's
// own (sync.backend is in the name already), or "s<hash>" when that grows
// long; the resolved values are in the run's config.yaml either way.
std::string overrides_slug(const std::vector<std::string>& sets) {
  std::string slug, all;
  for (const std::string& set : sets) {
    const auto eq = set.find('=');
    if (eq == std::string::npos || set.compare(0, eq, "sync.backend") == 0) continue;
    all += set + "\n";
    const std::string key = set.substr(0, eq);
    std::string part = key.substr(key.rfind('.') + 1);
    for (char c : set.substr(eq + 1))
      part += std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' ? c : '-';
    slug += (slug.empty() ? "" : "_") + part;
  }
  if (slug.size() <= 40) return slug;
  char hash[24];
  std::snprintf(hash, sizeof hash, "s%08llx", static_cast<unsigned long long>(fnv1a(all) >> 32));
  return hash;
}

// results/runs/<experiment>_<sync>_n<ranks>[_<overrides>], and "-2", "-3", ...
// while that directory already holds something: world rank 0 chooses.
std::string default_run_dir(Comm& world, const Config& config,
                            const std::vector<std::string>& sets) {
  std::string chosen;
  if (world.rank() == 0) {
    const std::string slug = overrides_slug(sets);
    const std::string base = "results/runs/" + config.get_string("experiment.name") + "_" +
                             config.get_string("sync.backend") + "_n" +
                             std::to_string(world.size()) + (slug.empty() ? "" : "_" + slug);
    chosen = base;
    std::error_code ec;
    for (int k = 2; std::filesystem::exists(chosen, ec) && !std::filesystem::is_empty(chosen, ec);
         ++k)
      chosen = base + "-" + std::to_string(k);
  }
  const auto all = world.allgather_bytes(std::as_bytes(std::span<const char>(chosen)));
  return std::string(reinterpret_cast<const char*>(all[0].data()), all[0].size());
}

}  // namespace

int cmd_train(CliContext& ctx) {
  std::string config_path, out_dir, resume_dir;
  bool quiet = false, overwrite = false;
  std::vector<std::string> overrides = ctx.overrides;
  for (size_t i = 0; i < ctx.args.size(); ++i) {
    const std::string& a = ctx.args[i];
    auto value = [&](const char* flag) -> std::string {
      if (i + 1 >= ctx.args.size()) throw ConfigError(std::string(flag) + " needs a value");
      return ctx.args[++i];
    };
    if (a == "-h" || a == "--help") {
      if (ctx.world_rank_hint() == 0) std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--sync") overrides.push_back("sync.backend=" + value("--sync"));
    else if (a == "--out") out_dir = value("--out");
    else if (a == "--resume")
      resume_dir = value("--resume");
    else if (a == "--overwrite") overwrite = true;
    else if (a == "--quiet") quiet = true;
    else if (a == "--trace") overrides.push_back("train.trace=true");
    else if (!a.empty() && a[0] == '-')
      throw ConfigError("psar train: unknown option '" + a + "'\n" + kUsage);
    else if (config_path.empty()) config_path = a;
    else throw ConfigError("psar train: more than one config file given ('" + config_path +
                           "', '" + a + "')");
  }
  if (config_path.empty()) throw ConfigError(std::string("psar train: no config file\n") + kUsage);
  if (overwrite && !resume_dir.empty())
    throw ConfigError("psar train: --overwrite and --resume together: --resume " + resume_dir +
                      " continues or branches a run, --overwrite would replace one");
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
  // --resume RUN_DIR continues that run directory (its latest checkpoint),
  // or with --out NEW branches it into NEW.
  if (!resume_dir.empty() && out_dir.empty()) out_dir = resume_dir;

  ops::set_blas_threads(blas_threads());
  catch_stop_signals();
  Comm& world = ctx.world(/*threads=*/config.get_bool("sync.overlap"));
  if (out_dir.empty()) out_dir = default_run_dir(world, config, ctx.overrides);
  TrainOptions options;
  options.out_dir = out_dir;
  options.verbose = !quiet;
  options.resume_from = resume_dir;
  options.overwrite = overwrite;
  options.stop_signal = &stop_signal;
  const TrainResult r = train(world, config, options);
  if (r.server || world.rank() != 0) return r.stop_signal ? 128 + r.stop_signal : 0;
  if (r.status == "finished") {
    if (!quiet)
      std::printf("done: %ld steps, final loss %.4f, test accuracy %.2f%%, %.1f s -> %s\n",
                  static_cast<long>(r.steps), r.final_loss, 100.0 * r.test_accuracy, r.wall_s,
                  out_dir.c_str());
    return 0;
  }
  // Stopped early: say where and how to go on (to stderr, also under --quiet).
  std::fprintf(stderr, "psar: %s after step %ld (%s) -> %s; --resume %s continues from its latest "
                       "checkpoint\n",
               r.status.c_str(), static_cast<long>(r.steps),
               r.stop_signal ? (r.stop_signal == SIGINT ? "SIGINT" : "SIGTERM")
                             : "train.exit_at_step / train.exit_after",
               out_dir.c_str(), out_dir.c_str());
  return r.stop_signal ? 128 + r.stop_signal : 0;
}

}  // namespace psar
