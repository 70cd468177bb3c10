// nccl — ncclAllReduce on the GPU (NCCL picks ring or tree by its own cost
// model). The gradient lives in host memory in psar's trainer, so each call
// copies it to the device, reduces in place, and copies it back on one CUDA
// stream; the copies are part of what is measured, as they would be for a
// CPU-resident model. The NCCL communicator is built once per psar Comm:
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

#include "allreduce/algorithms.h"
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

int device_count() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) return 0;
  return devices;
}

int local_rank() {
  for (const char* v : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"})
    if (const char* s = std::getenv(v)) return std::atoi(s);
  return 0;
}

class NcclAllreducer final : public Allreducer {
 public:
  ~NcclAllreducer() override {
    // Destructors never throw: best-effort release.
    if (nccl_) ncclCommDestroy(nccl_);
    if (buffer_) cudaFree(buffer_);
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
    if (bytes > capacity_) {
      if (buffer_) PSAR_CUDA_CHECK(cudaFree(buffer_));
      buffer_ = nullptr;
      PSAR_CUDA_CHECK(cudaMalloc(&buffer_, bytes));
      capacity_ = bytes;
    }
    PSAR_CUDA_CHECK(cudaMemcpyAsync(buffer_, data.data(), bytes, cudaMemcpyHostToDevice, stream_));
    // A non-blocking communicator may answer ncclInProgress: enqueued, and wait() polls it.
    const ncclResult_t posted =
        ncclAllReduce(buffer_, buffer_, data.size(), ncclFloat, ncclSum, nccl_, stream_);
    if (posted != ncclSuccess && posted != ncclInProgress)
      throw CommError(comm.operation() + ": ncclAllReduce: " + ncclGetErrorString(posted));
    PSAR_CUDA_CHECK(cudaMemcpyAsync(data.data(), buffer_, bytes, cudaMemcpyDeviceToHost, stream_));
    wait(comm);
  }

 private:
  // Once per communicator: device, stream, NCCL communicator.
  void plan(Comm& comm) {
    if (planned_for_ == &comm) return;
    PSAR_CHECK(planned_for_ == nullptr, "one nccl allreducer serves one communicator");
    PSAR_CUDA_CHECK(cudaSetDevice(local_rank() % device_count()));
    PSAR_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
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

  const Comm* planned_for_ = nullptr;
  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  void* buffer_ = nullptr;
  size_t capacity_ = 0;
  bool broken_ = false;  // the communicator was aborted: no further calls
};

}  // namespace

std::unique_ptr<Allreducer> make_nccl_allreducer(const AllreduceOptions&) {
  // Checked here, before a run writes anything.
  if (device_count() == 0)
    throw ConfigError("sync backend 'nccl' needs a CUDA device, and none is visible here");
  return std::make_unique<NcclAllreducer>();
}

}  // namespace psar
