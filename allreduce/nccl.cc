// nccl — ncclAllReduce on the GPU (ring or tree: sync.nccl_algo, or NCCL's
// own cost model), and the reduce-scatter / all-gather pair a sharded
// optimizer runs (sync.zero, NcclSharded below). Data in CUDA device memory (train.device: cuda: the
// gradient arena) is reduced in place on the allreducer's own stream, which
// first waits for the work queued on the legacy default stream (the kernels
// that wrote the gradients). Host data is copied to a device buffer, reduced
// and copied back on the same stream; the copies are part of what is
// measured, as they would be for a CPU-resident model. The bytes NCCL moves
// bypass psar's Comm; they are added to its counters from the algorithm's
// formula (nccl_bytes_per_rank). The NCCL communicator is built once per psar Comm:
// rank 0 creates the unique id and the Comm's control plane broadcasts it
// (never hard-coded). Every wait has the Comm's deadline (sync.timeout): the
// communicator is created non-blocking (ncclConfig_t::blocking = 0) and its
// set-up polled with ncclCommGetAsyncError until it leaves ncclInProgress;
// each all-reduce polls both the stream and NCCL's async error. On expiry the
// NCCL communicator is aborted (ncclCommAbort) and a TimeoutError names the
// operation; the allreducer refuses further calls, and the error ends the job.
//
// Built only when CMake finds CUDA and NCCL (see the top-level CMakeLists);
// otherwise nccl_unavailable.cc provides the factory.

#include <cuda_runtime.h>
#include <nccl.h>
#include <sched.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "allreduce/algorithms.h"
#include "allreduce/program.h"
#include "allreduce/sharded.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/timer.h"

#define PSAR_CUDA_CHECK(call)                                                              \
  do {                                                                                     \
    const cudaError_t psar_err_ = (call);                                                  \
    if (psar_err_ != cudaSuccess)                                                          \
      throw ::psar::CommError(std::string(#call) + ": " + cudaGetErrorString(psar_err_));  \
  } while (0)

#define PSAR_NCCL_CHECK(call)                                                              \
  do {                                                                                     \
    const ncclResult_t psar_res_ = (call);                                                 \
    if (psar_res_ != ncclSuccess)                                                          \
      throw ::psar::CommError(std::string(#call) + ": " + ncclGetErrorString(psar_res_));  \
  } while (0)

namespace psar {

namespace {

bool on_device(const float* p) {
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // a plain host pointer on older runtimes: clear the error
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

// NCCL_ALGO / NCCL_PROTO values for the sync.nccl_* choices ("" = leave as is).
std::string nccl_env_value(const std::string& choice) {
  if (choice == "auto") return "";
  if (choice == "ring") return "Ring";
  if (choice == "tree") return "Tree";
  return choice;  // LL, LL128, Simple: NCCL's own spelling
}

// One NCCL communicator for one psar Comm, with its stream, the event that
// orders its work after the default stream's, and a device buffer for host
// data. Every NCCL call goes through settle(): a non-blocking communicator
// may answer ncclInProgress, and the operation is then on the stream only
// once ncclCommGetAsyncError leaves that state — NCCL refuses any other call
// on the communicator before it ("Attempt to use communicator before the
// previous operation returned ncclSuccess"), and work queued behind it on
// the stream would run first.
class NcclChannel {
 public:
  explicit NcclChannel(const AllreduceOptions& options) : options_(options) {}
  NcclChannel(const NcclChannel&) = delete;
  NcclChannel& operator=(const NcclChannel&) = delete;
  ~NcclChannel() {
    // Destructors never throw: best-effort release.
    if (nccl_) ncclCommDestroy(nccl_);
    if (buffer_) cudaFree(buffer_);
    if (produced_) cudaEventDestroy(produced_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  // Runs enqueue(device_data) — NCCL calls on stream() over the whole of
  // `data` — and waits for it: in place when `data` is device memory (after
  // the kernels that wrote it), else through the device buffer, copied in
  // and out on the same stream. `what` names the NCCL call in errors.
  template <class Enqueue>
  void run(Comm& comm, std::span<float> data, const std::string& what, Enqueue enqueue) {
    if (broken_)
      throw CommError(comm.operation() +
                      ": the NCCL communicator was aborted after an earlier failure on rank " +
                      std::to_string(comm.rank()));
    plan(comm);
    // The caller may be another thread than the one that planned (an
    // overlap's communication thread): the communicator's device, each call.
    PSAR_CUDA_CHECK(cudaSetDevice(device_));
    const size_t bytes = data.size_bytes();
    if (on_device(data.data())) {
      PSAR_CUDA_CHECK(cudaEventRecord(produced_, cudaStreamLegacy));
      PSAR_CUDA_CHECK(cudaStreamWaitEvent(stream_, produced_, 0));
      settle(comm, what, enqueue(data.data()));
      wait(comm, what);
      return;
    }
    if (bytes > capacity_) {
      if (buffer_) PSAR_CUDA_CHECK(cudaFree(buffer_));
      buffer_ = nullptr;
      PSAR_CUDA_CHECK(cudaMalloc(&buffer_, bytes));
      capacity_ = bytes;
    }
    auto* device_data = static_cast<float*>(buffer_);
    PSAR_CUDA_CHECK(cudaMemcpyAsync(device_data, data.data(), bytes, cudaMemcpyHostToDevice, stream_));
    settle(comm, what, enqueue(device_data));
    PSAR_CUDA_CHECK(cudaMemcpyAsync(data.data(), device_data, bytes, cudaMemcpyDeviceToHost, stream_));
    wait(comm, what);
  }

  ncclComm_t nccl() const { return nccl_; }
  cudaStream_t stream() const { return stream_; }

 private:
  // NCCL reads NCCL_ALGO / NCCL_PROTO when a process creates its first
  // communicator; they are set before that, from sync.nccl_algo / nccl_proto.
  void set_nccl_environment() const {
    for (const auto& [variable, choice] :
         {std::pair<const char*, const std::string&>{"NCCL_ALGO", options_.nccl_algo},
          std::pair<const char*, const std::string&>{"NCCL_PROTO", options_.nccl_proto}}) {
      const std::string value = nccl_env_value(choice);
      if (!value.empty()) setenv(variable, value.c_str(), /*overwrite=*/1);
    }
  }

  // Once per communicator: device, stream, NCCL communicator.
  void plan(Comm& comm) {
    if (planned_for_ == &comm) return;
    PSAR_CHECK(planned_for_ == nullptr, "one nccl allreducer serves one communicator");
    device_ = local_cuda_device();
    PSAR_CUDA_CHECK(cudaSetDevice(device_));
    PSAR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    PSAR_CUDA_CHECK(cudaEventCreateWithFlags(&produced_, cudaEventDisableTiming));
    set_nccl_environment();
    ncclUniqueId id;
    if (comm.rank() == 0) PSAR_NCCL_CHECK(ncclGetUniqueId(&id));
    comm.broadcast_bytes(std::as_writable_bytes(std::span<ncclUniqueId>(&id, 1)), 0);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // returns at once; the set-up is polled, with a deadline
    settle(comm,
           "NCCL communicator set-up (ncclCommInitRankConfig, " + std::to_string(comm.size()) +
               " ranks)",
           ncclCommInitRankConfig(&nccl_, comm.size(), id, comm.rank(), &config));
    planned_for_ = &comm;
  }

  // Until the call that returned `started` has left ncclInProgress, polled
  // against the Comm's deadline.
  void settle(Comm& comm, const std::string& what, ncclResult_t started) {
    if (started != ncclSuccess && started != ncclInProgress) {
      abort_communicator();
      throw CommError(comm.operation() + ": " + what + ": " + ncclGetErrorString(started));
    }
    const double deadline = now_seconds() + comm.timeout();
    for (;;) {
      ncclResult_t state = ncclInProgress;
      PSAR_NCCL_CHECK(ncclCommGetAsyncError(nccl_, &state));
      if (state == ncclSuccess) return;
      if (state != ncclInProgress) {
        abort_communicator();
        throw CommError(comm.operation() + ": " + what + " failed: " + ncclGetErrorString(state));
      }
      if (now_seconds() > deadline) {
        abort_communicator();
        throw TimeoutError(comm.operation() + ": " + what + " did not finish within " +
                           std::to_string(comm.timeout()) + " s (a peer is gone or stuck)");
      }
      sched_yield();
    }
  }

  void abort_communicator() {
    if (nccl_) ncclCommAbort(nccl_);
    nccl_ = nullptr;
    broken_ = true;
  }

  // Until the stream has run what run() queued (the collective and the copy
  // back), watching NCCL's async error, against the Comm's deadline.
  void wait(Comm& comm, const std::string& what) {
    const double deadline = now_seconds() + comm.timeout();
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) PSAR_CUDA_CHECK(q);
      ncclResult_t async = ncclSuccess;
      PSAR_NCCL_CHECK(ncclCommGetAsyncError(nccl_, &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        abort_communicator();
        throw CommError(comm.operation() + ": NCCL reported: " + ncclGetErrorString(async));
      }
      if (now_seconds() > deadline) {
        abort_communicator();
        throw TimeoutError(comm.operation() + ": " + what + " did not finish within " +
                           std::to_string(comm.timeout()) + " s (a peer is gone or stuck)");
      }
      sched_yield();
    }
  }

  AllreduceOptions options_;
  const Comm* planned_for_ = nullptr;
  int device_ = 0;
  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t produced_ = nullptr;
  void* buffer_ = nullptr;
  size_t capacity_ = 0;
  bool broken_ = false;  // the communicator was aborted: no further calls
};

void check_options(const AllreduceOptions& options) {
  // Checked here, before a run writes anything.
  if (cuda_device_count() == 0)
    throw ConfigError("sync backend 'nccl' needs a CUDA device, and none is visible here");
  if (options.dtype != ElementType::kFp32)
    throw ConfigError(std::string("sync backend 'nccl' sums float32 here: sync.dtype ") +
                      element_type_name(options.dtype) + " is for psar's program algorithms");
}

class NcclAllreducer final : public Allreducer {
 public:
  explicit NcclAllreducer(const AllreduceOptions& options) : channel_(options) {}

  std::string name() const override { return "nccl"; }

  void allreduce(Comm& comm, std::span<float> data) override {
    Comm::OpScope op(comm, "nccl allreduce");
    if (data.empty() || comm.size() == 1) return;
    channel_.run(comm, data, "ncclAllReduce", [&](float* d) {
      return ncclAllReduce(d, d, data.size(), ncclFloat, ncclSum, channel_.nccl(),
                           channel_.stream());
    });
    // NCCL's traffic, from the formula (it bypasses psar's Comm).
    const int64_t bytes = nccl_bytes_per_rank(comm.size(), static_cast<int64_t>(data.size()));
    comm.add_counters({bytes, bytes, 0, 0});
  }

 private:
  NcclChannel channel_;
};

// The reduce-scatter and all-gather of a sharded optimizer (allreduce/sharded.h)
// on NCCL, in place. Equal pieces (ProgramShape's partition of a count that
// N divides, or such a split) are one ncclReduceScatter / ncclAllGather in
// place (the rank's piece at rank·count/N of the buffer, as NCCL's in-place
// forms want); unequal pieces are a group of N ncclReduce (piece r to rank
// r) or ncclBroadcast (piece r from rank r) calls, one launch. Bytes, from
// the ring's volume (they bypass psar's Comm): each rank sends and receives
// the vector less its own piece, (N−1)/N of it for equal pieces.
class NcclSharded final : public ShardedCollectives {
 public:
  explicit NcclSharded(const AllreduceOptions& options) : channel_(options) {}

  std::string name() const override { return "nccl"; }

  void reduce_scatter(Comm& comm, std::span<float> data,
                      const std::vector<int64_t>& split) override {
    Comm::OpScope op(comm, "nccl reduce-scatter");
    collective(comm, data, split, /*reduce=*/true);
  }

  void all_gather(Comm& comm, std::span<float> data, const std::vector<int64_t>& split) override {
    Comm::OpScope op(comm, "nccl all-gather");
    collective(comm, data, split, /*reduce=*/false);
  }

 private:
  void collective(Comm& comm, std::span<float> data, const std::vector<int64_t>& split,
                  bool reduce) {
    if (data.empty() || comm.size() == 1) return;
    ProgramShape shape;
    shape.ranks = comm.size();
    shape.count = static_cast<int64_t>(data.size());
    shape.split = split;
    const int n = comm.size();
    bool equal = true;
    for (int r = 0; r < n; ++r)
      equal = equal && shape.piece_size(r) == shape.piece_size(0) &&
              shape.piece_offset(r) == r * shape.piece_size(0);
    const auto piece = [&](int r) { return static_cast<size_t>(shape.piece_size(r)); };
    const auto offset = [&](int r) { return static_cast<size_t>(shape.piece_offset(r)); };
    const std::string what = equal ? (reduce ? "ncclReduceScatter" : "ncclAllGather")
                                   : (reduce ? "ncclGroupEnd (ncclReduce per piece)"
                                             : "ncclGroupEnd (ncclBroadcast per piece)");
    channel_.run(comm, data, what, [&](float* d) -> ncclResult_t {
      const ncclComm_t c = channel_.nccl();
      const cudaStream_t s = channel_.stream();
      float* mine = d + offset(comm.rank());
      if (equal)
        return reduce ? ncclReduceScatter(d, mine, piece(0), ncclFloat, ncclSum, c, s)
                      : ncclAllGather(mine, d, piece(0), ncclFloat, c, s);
      ncclResult_t state = ncclGroupStart();
      for (int r = 0; r < n && (state == ncclSuccess || state == ncclInProgress); ++r) {
        if (piece(r) == 0) continue;
        float* at = d + offset(r);
        state = reduce ? ncclReduce(at, at, piece(r), ncclFloat, ncclSum, r, c, s)
                       : ncclBroadcast(at, at, piece(r), ncclFloat, r, c, s);
      }
      const ncclResult_t ended = ncclGroupEnd();
      return state == ncclSuccess || state == ncclInProgress ? ended : state;
    });
    const auto bytes = static_cast<int64_t>((data.size() - piece(comm.rank())) * sizeof(float));
    comm.add_counters({bytes, bytes, 0, 0});
  }

  NcclChannel channel_;
};

}  // namespace

std::unique_ptr<Allreducer> make_nccl_allreducer(const AllreduceOptions& options) {
  check_options(options);
  return std::make_unique<NcclAllreducer>(options);
}

std::unique_ptr<ShardedCollectives> make_nccl_sharded(const AllreduceOptions& options) {
  check_options(options);
  return std::make_unique<NcclSharded>(options);
}

}  // namespace psar
