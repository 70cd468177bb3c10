#!/usr/bin/env bash
# measure.sh BUILD OUT: the CUDA/NCCL checks and measurements of results/gpu
# on a machine with a CUDA device, from a build of scripts/build.sh (BUILD:
# its build/ folder, or a folder holding the same binaries under the same
# relative paths). Writes into OUT the tests' output, the training runs'
# summary.csv and steps.csv, the GEMM benchmark's JSON and machine.txt;
# results/gpu/table.py OUT then writes table.md. Not part of CI (it needs a
# GPU). Environment: MPIRUN (default "mpirun --allow-run-as-root
# --oversubscribe"), PSAR_COMMIT (the commit BUILD was built from, recorded
# in machine.txt when there is no git checkout to ask).
set -uo pipefail
build=$(cd "$1" && pwd); out=$2
root=$(cd "$(dirname "$0")/../.." && pwd)
mkdir -p "$out/runs"
read -r -a mpirun <<<"${MPIRUN:-mpirun --allow-run-as-root --oversubscribe}"
psar=$build/trainer/psar
per_device=$root/tests/gpu/per_device.sh
commit=${PSAR_COMMIT:-$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo unknown)}
{
  echo "date: $(date -u +%FT%TZ)"
  echo "psar built at: $commit"
  echo "cpus: $(nproc)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.sm,temperature.gpu \
    --format=csv 2>&1
  echo "load: $(cat /proc/loadavg)"
} >"$out/machine.txt"

step() {  # step NAME SECONDS COMMAND...: its output in OUT/NAME.log, its status in status.txt
  local name=$1 limit=$2; shift 2
  echo "=== $name"
  timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1
  local rc=$?
  echo "$name $rc" >>"$out/status.txt"
  echo "rc=$rc"; tail -n 3 "$out/$name.log"
}
: >"$out/status.txt"

# The GPU tests (CTest label gpu, and the nccl checks under mpirun: one rank
# per device, then two ranks sharing one).
step ops_cuda_test 300 "$build/tests/gpu/ops_cuda_test"
step train_cuda_test 600 "$build/tests/gpu/train_cuda_test"
step nccl_per_device 300 "$per_device" "${mpirun[@]}" -- "$build/tests/gpu/nccl_mpi_test"
step nccl_shared_device 300 "$per_device" --shared 2 "${mpirun[@]}" -- "$build/tests/gpu/nccl_mpi_test"

# Training: the same configuration on the CPU and on the device.
mlp=(train "$root/results/gpu/mlp.yaml" --quiet --overwrite)
train() {  # train NAME SECONDS [MPI RANKS|-] PSAR-ARGS...
  local name=$1 limit=$2 ranks=$3; shift 3
  local launch=()
  [[ $ranks == - ]] || launch=("$per_device" --shared "$ranks" "${mpirun[@]}" --)
  step "train_$name" "$limit" "${launch[@]}" "$psar" "$@" --out "$out/runs/$name"
}
train mlp_cpu 120 - "${mlp[@]}"
train mlp_cuda 120 - "${mlp[@]}" --set train.device=cuda
train mlp_cpu_ring2 120 2 "${mlp[@]}" --sync ring --set experiment.ranks=2
train mlp_cuda_ring2 120 2 "${mlp[@]}" --sync ring --set experiment.ranks=2 --set train.device=cuda
train mlp_cuda_nccl2 120 2 "${mlp[@]}" --sync nccl --set experiment.ranks=2 --set train.device=cuda
gpt=(train "$root/experiments/recompute.yaml" --quiet --overwrite)
train gpt_cpu 120 - "${gpt[@]}"
train gpt_cuda 120 - "${gpt[@]}" --set train.device=cuda
zero=(train "$root/experiments/zero.yaml" --quiet --overwrite --set experiment.ranks=2 --set train.steps=10)
train zero0_ring2 120 2 "${zero[@]}" --sync ring
for stage in 1 2 3; do
  train "zero${stage}_nccl2" 120 2 "${zero[@]}" --sync nccl --set sync.zero=$stage
done
train zero3_nccl2_prefetch 120 2 "${zero[@]}" --sync nccl --set sync.zero=3 --set sync.overlap=true

# The GEMM seam against bare cuBLAS (bench/bench_cuda_gemm.cc), 8192 tokens.
step bench_cuda_gemm 300 "$build/bench/bench_cuda_gemm" --benchmark_filter='N:8192/' \
  --benchmark_min_time=0.05 --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
echo "load after: $(cat /proc/loadavg)" >>"$out/machine.txt"
