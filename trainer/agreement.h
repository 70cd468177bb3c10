#pragma once
// Start-up agreement: before step 1 every rank checks that all ranks of the
// job run the same psar version, the same sync backend, the same run
// directory (--out, as an absolute path) and the same resolved configuration
// (its record's digest, taken once at the start: core/checkpoint.h's
// ConfigRecord), and that the ranks holding the same slice of the model hold
// the same number of parameters. Each check is one small all-gather over the
// control plane (where the digests differ, a second one of the values names
// the keys); every rank sees every record and throws the same ConfigError
// (an agreed one, core/errors.h), naming the first rank that differs from
// rank 0 (or from the first rank of its slice) and the field — so the whole
// job ends at once, with one message.

#include <cstdint>
#include <string>

#include "comm/comm.h"
#include "core/checkpoint.h"

namespace psar {

// Collective over `world`: version, backend, run directory, configuration.
void check_agreement(Comm& world, const ConfigRecord& config, const std::string& out_dir);
// `out_dir` as an absolute path without "." or ".." ("" stays "").
std::string absolute_run_dir(const std::string& out_dir);
// Collective over `world`: `slice` identifies the part of the model this rank
// holds (its (pp, tp) coordinate; every rank 0 with data parallelism alone),
// `params` its parameter count.
void check_parameter_counts(Comm& world, int slice, int64_t params);

}  // namespace psar
