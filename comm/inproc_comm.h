#pragma once
// In-process transport: every rank is a thread, messages are memcpy'd from
// the sender's buffer into the receiver's (directly when the receive is
// already posted, through a queue otherwise). For fast hermetic tests that
// sweep world sizes, and for fault injection: a rank can be marked failed, and
// every rank waiting on it gets a CommError naming it at once.

#include <functional>
#include <memory>
#include <string>

#include "comm/comm.h"

namespace psar {

class InProcWorld;

struct InProcOptions {
  double timeout_s = 30.0;  // deadline of every wait
};

// Runs fn(comm) on `size` threads, one per rank, and joins them. If any rank
// throws, the others are told (their waits on it fail) and the first error is
// rethrown on the calling thread.
void run_inproc(int size, const std::function<void(Comm&)>& fn, InProcOptions options = {});

// Creates the communicators of one world without threads (the caller runs them).
std::vector<std::unique_ptr<Comm>> make_inproc_world(int size, InProcOptions options = {});

// Marks `rank` of the world that `comm` belongs to as failed with `reason`.
void inproc_fail(Comm& comm, int rank, const std::string& reason);

}  // namespace psar
