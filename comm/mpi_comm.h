#pragma once
// MPI transport: real runs under mpirun. MpiRuntime owns MPI_Init/Finalize;
// MpiComm wraps a duplicated MPI communicator (errors returned, never fatal,
// so every failure becomes a CommError with the peer's name).

#include <mpi.h>

#include <memory>
#include <string>

#include "comm/comm.h"

namespace psar {

class MpiRuntime {
 public:
  // threads: MPI_THREAD_MULTIPLE (a communication thread beside the main
  // thread, sync.overlap); otherwise MPI_THREAD_FUNNELED. ConfigError when the
  // library provides less than asked.
  MpiRuntime(int* argc, char*** argv, bool threads = false);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;
  // Ends every process of the job now (after an unrecoverable error on one rank).
  [[noreturn]] static void abort(int code);
  static bool initialized();
  // MPI_Finalize's closing fence includes every process of the job, and
  // one that died (a worker killed under mpirun --enable-recovery) can keep
  // it waiting forever: the destructor gives MPI_Finalize `seconds` (default
  // kFinalizeDeadline), then ends the process with the code main returned
  // (set_exit_code), saying so on stderr.
  static constexpr double kFinalizeDeadline = 60.0;
  static void finalize_within(double seconds);
  static void set_exit_code(int code);
};

class MpiComm final : public Comm {
 public:
  // Duplicates `comm` (the caller keeps ownership of its handle).
  explicit MpiComm(MPI_Comm comm);
  ~MpiComm() override;

  std::string transport() const override { return "mpi"; }
  std::unique_ptr<Comm> split(int color, int key) override;
  // The raw handle, for the `mpi` allreduce backend (the measured peer) only.
  MPI_Comm handle() const { return comm_; }

 protected:
  std::unique_ptr<RequestImpl> post_send(int peer, std::span<const std::byte> data, int tag,
                                         double stamp) override;
  std::unique_ptr<RequestImpl> post_recv(int peer, std::span<std::byte> data, int tag) override;

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  // Carries the emulated-network timestamp of each message (same tag, same
  // order as the payloads on comm_) when network emulation is on.
  MPI_Comm stamps_ = MPI_COMM_NULL;
};

// Whether a polling wait should yield the core between tests: ranks may
// outnumber cores (mpirun --oversubscribe, or more local ranks than cores).
bool yield_when_idle();

// Throws CommError with MPI's error string if rc is not MPI_SUCCESS.
void mpi_check(int rc, const char* what, const char* file, int line);

}  // namespace psar

#define PSAR_MPI_CHECK(call) ::psar::mpi_check((call), #call, __FILE__, __LINE__)
