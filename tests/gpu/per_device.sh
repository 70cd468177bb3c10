#!/usr/bin/env bash
# per_device.sh [--shared N] MPIRUN... -- COMMAND...
# Runs COMMAND under mpirun with one rank per visible CUDA device (NCCL
# refuses two ranks on one GPU: "Duplicate GPU"), and with one rank where
# there is none (the tests then check the error a user would see).
# --shared N: N ranks whatever the devices, each with its own NCCL_HOSTID,
# so that NCCL takes them for ranks on N hosts and lets them share a GPU
# (they talk over sockets on loopback): the multi-rank checks on a machine
# with one GPU. Without a device the tests skip, saying why.
set -euo pipefail
shared=0
if [[ ${1:-} == --shared ]]; then shared=$2; shift 2; fi
mpirun=()
while (($#)) && [[ $1 != -- ]]; do mpirun+=("$1"); shift; done
shift
if ((shared > 0)); then
  echo "per_device: $shared rank(s) sharing the visible device(s), one NCCL_HOSTID each"
  exec "${mpirun[@]}" -np "$shared" -x NCCL_SOCKET_IFNAME=lo -x NCCL_IB_DISABLE=1 \
    bash -c 'NCCL_HOSTID=psar-rank-${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-0}} exec "$@"' per_device "$@"
fi
devices=0
if [[ -n ${CUDA_VISIBLE_DEVICES+x} ]]; then
  [[ -z $CUDA_VISIBLE_DEVICES || $CUDA_VISIBLE_DEVICES == -1 ]] ||
    devices=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
elif command -v nvidia-smi >/dev/null; then
  devices=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
np=$((devices > 0 ? devices : 1))
echo "per_device: $devices CUDA device(s) visible: $np rank(s)"
exec "${mpirun[@]}" -np "$np" "$@"
