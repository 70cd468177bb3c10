#include "comm/mpi_comm.h"

#include <sched.h>

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "core/errors.h"
#include "core/timer.h"

namespace psar {

namespace {

std::string mpi_error_string(int rc) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, buf, &len);
  return std::string(buf, static_cast<size_t>(len));
}

}  // namespace

// Whether a wait should give the core away between polls. The same policy as
// the MPI library's own blocking calls, so that custom collectives and
// MPI_Allreduce wait alike: Open MPI yields only when mpirun found the node
// oversubscribed (it exports that decision); other MPIs: when the ranks on this
// host outnumber its cores; unknown: yield.
bool yield_when_idle() {
  static const bool yield = [] {
    if (const char* v = std::getenv("OMPI_MCA_mpi_yield_when_idle")) return std::atoi(v) != 0;
    if (const char* v = std::getenv("OMPI_MCA_mpi_oversubscribe")) return std::atoi(v) != 0;
    for (const char* var : {"MPI_LOCALNRANKS", "MPICH_LOCALNRANKS"})
      if (const char* v = std::getenv(var))
        return std::atoi(v) > static_cast<int>(std::thread::hardware_concurrency());
    return true;
  }();
  return yield;
}

namespace {

int checked_count(size_t bytes) {
  if (bytes > static_cast<size_t>(INT_MAX))
    throw CommError("message of " + std::to_string(bytes) + " bytes exceeds MPI's int count");
  return static_cast<int>(bytes);
}

void cancel(MPI_Request& req) {
  if (req != MPI_REQUEST_NULL) {
    MPI_Cancel(&req);
    MPI_Request_free(&req);
  }
}

// An MPI request, with an optional second one for its timestamp (network
// emulation); cancelled and freed if abandoned while pending.
class MpiRequest final : public RequestImpl {
 public:
  MpiRequest(MPI_Request req, bool is_recv, int peer, int tag, size_t bytes)
      : req_(req), is_recv_(is_recv), peer_(peer), tag_(tag), bytes_(bytes) {}

  ~MpiRequest() override {
    cancel(req_);
    cancel(stamp_req_);
  }

  // The timestamp travels in `*stamp_buffer()` through `stamp_req`.
  double* stamp_buffer() { return &stamp_; }
  void set_stamp_request(MPI_Request r) { stamp_req_ = r; }
  double stamp() const override { return stamp_; }

  bool test() override {
    if (stamp_req_ != MPI_REQUEST_NULL) {
      int flag = 0;
      const int rc = MPI_Test(&stamp_req_, &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) throw CommError(describe() + ": timestamp: " + mpi_error_string(rc));
      if (!flag) return false;
    }
    if (req_ == MPI_REQUEST_NULL) return true;
    int flag = 0;
    MPI_Status status;
    const int rc = MPI_Test(&req_, &flag, &status);
    if (rc != MPI_SUCCESS) {
      req_ = MPI_REQUEST_NULL;
      if (is_recv_ && (rc == MPI_ERR_TRUNCATE || status.MPI_ERROR == MPI_ERR_TRUNCATE))
        throw CommError(describe() + ": the message is larger than expected (sizes disagree "
                                     "across ranks)");
      throw CommError(describe() + ": " + mpi_error_string(rc));
    }
    if (!flag) return false;
    if (is_recv_) {
      int got = 0;
      MPI_Get_count(&status, MPI_BYTE, &got);
      if (static_cast<size_t>(got) != bytes_)
        throw CommError(describe() + ": expected " + std::to_string(bytes_) + " bytes, got " +
                        std::to_string(got) + " (sizes disagree across ranks)");
    }
    return true;
  }

  bool wait_for(double seconds) override {
    if (test()) return true;  // the common case, without reading the clock
    const double deadline = now_seconds() + seconds;
    for (;;) {
      if (yield_when_idle()) sched_yield();
      if (test()) return true;
      if (now_seconds() >= deadline) return false;
    }
  }

  std::string describe() const override {
    return std::string(is_recv_ ? "recv from" : "send to") + " rank " + std::to_string(peer_) +
           " (tag " + std::to_string(tag_) + ", " + std::to_string(bytes_) + " bytes)";
  }

 private:
  MPI_Request req_;
  MPI_Request stamp_req_ = MPI_REQUEST_NULL;
  double stamp_ = 0;
  bool is_recv_;
  int peer_, tag_;
  size_t bytes_;
};

}  // namespace

void mpi_check(int rc, const char* what, const char* file, int line) {
  if (rc != MPI_SUCCESS)
    throw CommError(std::string(what) + " failed at " + file + ":" + std::to_string(line) + ": " +
                    mpi_error_string(rc));
}

MpiRuntime::MpiRuntime(int* argc, char*** argv, bool threads) {
  int provided = 0;
  // Only the main thread calls MPI (PS server threads use ZeroMQ), unless a
  // communication thread overlaps the gradient sync with the backward.
  const int required = threads ? MPI_THREAD_MULTIPLE : MPI_THREAD_FUNNELED;
  PSAR_MPI_CHECK(MPI_Init_thread(argc, argv, required, &provided));
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  if (provided < required)
    throw ConfigError("sync.overlap runs MPI from a communication thread and needs "
                      "MPI_THREAD_MULTIPLE; this MPI library provides thread level " +
                      std::to_string(provided));
}

namespace {
std::atomic<double> finalize_deadline_s{MpiRuntime::kFinalizeDeadline};
std::atomic<int> exit_code{0};
}  // namespace

void MpiRuntime::finalize_within(double seconds) { finalize_deadline_s.store(seconds); }
void MpiRuntime::set_exit_code(int code) { exit_code.store(code); }

MpiRuntime::~MpiRuntime() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // A watchdog: a finalize that returns in time lets it go; one that does
  // not ends the process (nothing is left to do but return the code).
  static std::atomic<bool> returned{false};
  const double limit = finalize_deadline_s.load();
  std::thread([limit] {
    const double deadline = now_seconds() + limit;
    while (!returned.load()) {
      if (now_seconds() >= deadline) {
        std::fprintf(stderr,
                     "psar: MPI_Finalize did not return within %g s (a process of the job that "
                     "died keeps the runtime's closing fence waiting); exiting without it\n",
                     limit);
        std::fflush(nullptr);
        std::_Exit(exit_code.load());
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }).detach();
  MPI_Finalize();
  returned.store(true);
}

void MpiRuntime::abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

bool MpiRuntime::initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}

MpiComm::MpiComm(MPI_Comm comm) : Comm(0, 1) {
  PSAR_MPI_CHECK(MPI_Comm_dup(comm, &comm_));
  PSAR_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  PSAR_MPI_CHECK(MPI_Comm_dup(comm, &stamps_));
  PSAR_MPI_CHECK(MPI_Comm_set_errhandler(stamps_, MPI_ERRORS_RETURN));
  PSAR_MPI_CHECK(MPI_Comm_rank(comm_, &rank_));
  PSAR_MPI_CHECK(MPI_Comm_size(comm_, &size_));
}

MpiComm::~MpiComm() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (comm_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&comm_);
  if (stamps_ != MPI_COMM_NULL && !finalized) MPI_Comm_free(&stamps_);
}

std::unique_ptr<Comm> MpiComm::split(int color, int key) {
  // MPI_Comm_split has no deadline: the ranks first meet at a barrier that
  // has one, so a rank that never comes is named instead of hanging the job.
  barrier();
  MPI_Comm sub = MPI_COMM_NULL;
  PSAR_MPI_CHECK(MPI_Comm_split(comm_, color, key, &sub));
  auto c = std::make_unique<MpiComm>(sub);
  MPI_Comm_free(&sub);
  c->inherit(*this);
  return c;
}

std::unique_ptr<RequestImpl> MpiComm::post_send(int peer, std::span<const std::byte> data,
                                                int tag, double stamp) {
  MPI_Request req;
  PSAR_MPI_CHECK(MPI_Isend(data.data(), checked_count(data.size()), MPI_BYTE, peer, tag, comm_,
                           &req));
  auto r = std::make_unique<MpiRequest>(req, false, peer, tag, data.size());
  if (network()) {
    *r->stamp_buffer() = stamp;
    MPI_Request sreq;
    PSAR_MPI_CHECK(MPI_Isend(r->stamp_buffer(), 1, MPI_DOUBLE, peer, tag, stamps_, &sreq));
    r->set_stamp_request(sreq);
  }
  return r;
}

std::unique_ptr<RequestImpl> MpiComm::post_recv(int peer, std::span<std::byte> data, int tag) {
  MPI_Request req;
  PSAR_MPI_CHECK(MPI_Irecv(data.data(), checked_count(data.size()), MPI_BYTE, peer, tag, comm_,
                           &req));
  auto r = std::make_unique<MpiRequest>(req, true, peer, tag, data.size());
  if (network()) {
    MPI_Request sreq;
    PSAR_MPI_CHECK(MPI_Irecv(r->stamp_buffer(), 1, MPI_DOUBLE, peer, tag, stamps_, &sreq));
    r->set_stamp_request(sreq);
  }
  return r;
}

}  // namespace psar
