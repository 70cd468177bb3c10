// nccl — ncclAllReduce on the GPU (NCCL picks ring or tree by its own cost
// model). The gradient lives in host memory in psar's trainer, so each call
// copies it to the device, reduces in place, and copies it back on one CUDA
// stream; the copies are part of what is measured, as they would be for a
// CPU-resident model. The NCCL communicator is built once per psar Comm:
// rank 0 creates the unique id and the Comm's control plane broadcasts it
// (never hard-coded). Every wait polls both the stream and NCCL's async
// error against the Comm's deadline; on expiry the NCCL communicator is
// aborted and a TimeoutError names the operation.
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
    PSAR_NCCL_CHECK(ncclAllReduce(buffer_, buffer_, data.size(), ncclFloat, ncclSum, nccl_, stream_));
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
    PSAR_NCCL_CHECK(ncclCommInitRank(&nccl_, comm.size(), id, comm.rank()));
    planned_for_ = &comm;
  }

  void wait(Comm& comm) {
    const double deadline = now_seconds() + comm.timeout();
    for (;;) {
      const cudaError_t q = cudaStreamQuery(stream_);
      if (q == cudaSuccess) return;
      if (q != cudaErrorNotReady) PSAR_CUDA_CHECK(q);
      ncclResult_t async = ncclSuccess;
      PSAR_NCCL_CHECK(ncclCommGetAsyncError(nccl_, &async));
      if (async != ncclSuccess)
        throw CommError(comm.operation() + ": NCCL reported: " + ncclGetErrorString(async));
      if (now_seconds() > deadline) {
        ncclCommAbort(nccl_);
        nccl_ = nullptr;
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
};

}  // namespace

std::unique_ptr<Allreducer> make_nccl_allreducer(const AllreduceOptions&) {
  // Checked here, before a run writes anything.
  if (device_count() == 0)
    throw ConfigError("sync backend 'nccl' needs a CUDA device, and none is visible here");
  return std::make_unique<NcclAllreducer>();
}

}  // namespace psar
