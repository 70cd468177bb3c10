// nccl — ncclAllReduce on the GPU (ring or tree: sync.nccl_algo, or NCCL's
// own cost model). Data in CUDA device memory (train.device: cuda: the
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

class NcclAllreducer final : public Allreducer {
 public:
  explicit NcclAllreducer(const AllreduceOptions& options) : options_(options) {}
  ~NcclAllreducer() override {
    // Destructors never throw: best-effort release.
    if (nccl_) ncclCommDestroy(nccl_);
    if (buffer_) cudaFree(buffer_);
    if (produced_) cudaEventDestroy(produced_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return "nccl"; }

  void allreduce(Comm& comm, std::span<float> data) override {
    Comm::OpScope op(comm, "nccl allreduce");
    if (broken_)
      throw CommError(
          "nccl allreduce: the NCCL communicator was aborted after an earlier "
          "failure on rank " +
          std::to_string(comm.rank()));
    plan(comm);
    if (data.empty() || comm.size() == 1) return;
    const size_t bytes = data.size_bytes();
    if (on_device(data.data())) {
      // In place on the device: after the kernels that wrote it, on our stream.
      PSAR_CUDA_CHECK(cudaEventRecord(produced_, cudaStreamLegacy));
      PSAR_CUDA_CHECK(cudaStreamWaitEvent(stream_, produced_, 0));
      post(comm, data.data(), data.size());
      wait(comm);
      count(comm, data.size());
      return;
    }
    if (bytes > capacity_) {
      if (buffer_) PSAR_CUDA_CHECK(cudaFree(buffer_));
      buffer_ = nullptr;
      PSAR_CUDA_CHECK(cudaMalloc(&buffer_, bytes));
      capacity_ = bytes;
    }
    PSAR_CUDA_CHECK(cudaMemcpyAsync(buffer_, data.data(), bytes, cudaMemcpyHostToDevice, stream_));
    post(comm, static_cast<float*>(buffer_), data.size());
    PSAR_CUDA_CHECK(cudaMemcpyAsync(data.data(), buffer_, bytes, cudaMemcpyDeviceToHost, stream_));
    wait(comm);
    count(comm, data.size());
  }

 private:
  void post(Comm& comm, float* device_data, size_t count) {
    // A non-blocking communicator may answer ncclInProgress: enqueued, and wait() polls it.
    const ncclResult_t posted =
        ncclAllReduce(device_data, device_data, count, ncclFloat, ncclSum, nccl_, stream_);
    if (posted != ncclSuccess && posted != ncclInProgress)
      throw CommError(comm.operation() + ": ncclAllReduce: " + ncclGetErrorString(posted));
  }

  // NCCL's traffic, from the formula (it bypasses psar's Comm).
  static void count(Comm& comm, size_t floats) {
    const int64_t bytes = nccl_bytes_per_rank(comm.size(), static_cast<int64_t>(floats));
    comm.add_counters({bytes, bytes, 0, 0});
  }

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
    PSAR_CUDA_CHECK(cudaSetDevice(local_cuda_device()));
    PSAR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    PSAR_CUDA_CHECK(cudaEventCreateWithFlags(&produced_, cudaEventDisableTiming));
    set_nccl_environment();
    ncclUniqueId id;
    if (comm.rank() == 0) PSAR_NCCL_CHECK(ncclGetUniqueId(&id));
    comm.broadcast_bytes(std::as_writable_bytes(std::span<ncclUniqueId>(&id, 1)), 0);
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;  // returns at once; the set-up is polled below, with a deadline
    const ncclResult_t started =
        ncclCommInitRankConfig(&nccl_, comm.size(), id, comm.rank(), &config);
    if (started != ncclSuccess && started != ncclInProgress)
      throw CommError(comm.operation() +
                      ": ncclCommInitRankConfig: " + ncclGetErrorString(started));
    const double deadline = now_seconds() + comm.timeout();
    for (;;) {
      ncclResult_t state = ncclInProgress;
      PSAR_NCCL_CHECK(ncclCommGetAsyncError(nccl_, &state));
      if (state == ncclSuccess) break;
      if (state != ncclInProgress) {
        abort_communicator();
        throw CommError(comm.operation() +
                        ": NCCL communicator set-up failed: " + ncclGetErrorString(state));
      }
      if (now_seconds() > deadline) {
        abort_communicator();
        throw TimeoutError(comm.operation() +
                           ": NCCL communicator set-up (ncclCommInitRankConfig, " +
                           std::to_string(comm.size()) + " ranks) did not finish within " +
                           std::to_string(comm.timeout()) + " s (a peer is gone or stuck)");
      }
      sched_yield();
    }
    planned_for_ = &comm;
  }

  void abort_communicator() {
    if (nccl_) ncclCommAbort(nccl_);
    nccl_ = nullptr;
    broken_ = true;
  }

  void wait(Comm& comm) {
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
        throw TimeoutError(comm.operation() + ": ncclAllReduce did not finish within " +
                           std::to_string(comm.timeout()) + " s (a peer is gone or stuck)");
      }
      sched_yield();
    }
  }

  AllreduceOptions options_;
  const Comm* planned_for_ = nullptr;
  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t produced_ = nullptr;
  void* buffer_ = nullptr;
  size_t capacity_ = 0;
  bool broken_ = false;  // the communicator was aborted: no further calls
};

}  // namespace

std::unique_ptr<Allreducer> make_nccl_allreducer(const AllreduceOptions& options) {
  // Checked here, before a run writes anything.
  if (cuda_device_count() == 0)
    throw ConfigError("sync backend 'nccl' needs a CUDA device, and none is visible here");
  if (options.dtype != ElementType::kFp32)
    throw ConfigError(std::string("sync backend 'nccl' sums float32 here: sync.dtype ") +
                      element_type_name(options.dtype) + " is for psar's program algorithms");
  return std::make_unique<NcclAllreducer>(options);
}

}  // namespace psar
