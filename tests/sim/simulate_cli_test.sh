#!/bin/sh
# psar simulate end to end: a paper-scale config runs and prints its figures;
# a grid the cluster cannot hold exits 2 naming the field.
# usage: simulate_cli_test.sh PSAR SOURCE_DIR
set -u
psar=$1
cfg=$2/experiments/simulate/megatron_1p7b.yaml
fail() { echo "FAIL: $*"; exit 1; }

out=$("$psar" simulate "$cfg" 2>&1) || fail "simulate exited $?: $out"
echo "$out" | grep -q '^tflops_per_gpu ' || fail "no tflops_per_gpu line: $out"
echo "$out" | grep -q '^step_s ' || fail "no step_s line: $out"

err=$("$psar" simulate "$cfg" --set parallel.tp=3 2>&1)
[ $? -eq 2 ] || fail "t = 3 on 8-GPU nodes should exit 2: $err"
echo "$err" | grep -q 'parallel.tp' || fail "error does not name parallel.tp: $err"

err=$("$psar" simulate "$cfg" --set train.batch_size=500 2>&1)
[ $? -eq 2 ] || fail "a batch that d·m does not divide should exit 2: $err"
echo "$err" | grep -q 'train.batch_size' || fail "error does not name train.batch_size: $err"

err=$("$psar" simulate "$cfg" --set cluster.inter.nics_per_node=16 2>&1)
[ $? -eq 2 ] || fail "more NICs than GPUs should exit 2: $err"
echo "$err" | grep -q 'cluster.inter.nics_per_node' || fail "error does not name the NIC key: $err"
echo PASS
