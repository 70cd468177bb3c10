#!/usr/bin/env bash
# per_device.sh MPIRUN... -- COMMAND...
# Runs COMMAND under mpirun with one rank per visible CUDA device (NCCL
# refuses two ranks on one GPU: "Duplicate GPU"), and with one rank where
# there is none (the tests then check the error a user would see).
set -euo pipefail
mpirun=()
while (($#)) && [[ $1 != -- ]]; do mpirun+=("$1"); shift; done
shift
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
