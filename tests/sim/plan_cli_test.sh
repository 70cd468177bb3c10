#!/bin/sh
# psar plan end to end: a table with the memory and time breakdown and the
# rules as checks, --top and --format csv|json, and exit 2 naming the field
# for a tensor degree that does not divide the node, a memory no grid fits,
# a GPU count no grid can use and an unknown format.
# usage: plan_cli_test.sh PSAR SOURCE_DIR
set -u
psar=$1
cfg=$2/experiments/simulate/megatron_1p7b.yaml
fail() { echo "FAIL: $*"; exit 1; }

out=$("$psar" plan "$cfg" --top 3 2>&1) || fail "plan exited $?: $out"
for want in '^candidates ' '^rank ' '^check t <= GPUs per node ' '^check p just large to fit ' \
            '^check d to scale ' "^rule's grid "; do
  echo "$out" | grep -q "$want" || fail "no line matching '$want': $out"
done
rows=$(echo "$out" | grep -cE '^ +[0-9]+ +[0-9]+ +[0-9]+ ')
[ "$rows" -eq 3 ] || fail "--top 3 printed $rows rows: $out"

csv=$("$psar" plan "$cfg" --top 2 --format csv 2>&1) || fail "csv exited $?: $csv"
[ "$(echo "$csv" | wc -l)" -eq 3 ] || fail "csv: a header and 2 rows expected: $csv"
echo "$csv" | head -1 | grep -q '^rank,p,t,d,b,m,v,schedule,scatter_gather,mem_weights_gib' ||
  fail "csv header: $csv"

json=$("$psar" plan "$cfg" --top 1 --format json 2>&1) || fail "json exited $?: $json"
echo "$json" | grep -q '"tflops_per_gpu": ' || fail "json: $json"

# The flags that stand for config keys reach the model and the batch.
model=$("$psar" plan "$cfg" --top 1 --layers 12 --hidden 1024 --heads 16 --seq 512 --vocab 32000 \
        --batch 256 2>&1) || fail "flags exited $?: $model"
echo "$model" | grep -q '^model  *L=12 h=1024 a=16 s=512 V=32000 .*B=256' || fail "flags: $model"

# BLOOM 176B's grid from a cluster config with sync.zero: 1 is proposed
# (p = 12, d = 8 at t = 4, b = 2); with sync.zero=0 no p = 12 grid fits.
bloom=$2/experiments/simulate/bloom_176b.yaml
plan=$("$psar" plan "$bloom" --tp 4 --microbatch 2 --chunks 1 --top 100 2>&1) ||
  fail "bloom exited $?: $plan"
echo "$plan" | grep -qE '^ +[0-9]+ +12 +4 +8 +2 ' || fail "bloom: no t=4 p=12 d=8 b=2 row: $plan"
plan=$("$psar" plan "$bloom" --tp 4 --microbatch 2 --chunks 1 --top 100 --set sync.zero=0 2>&1) ||
  fail "bloom zero 0 exited $?: $plan"
echo "$plan" | grep -qE '^ +[0-9]+ +12 +4 +8 +2 ' && fail "bloom: p=12 fits without ZeRO: $plan"

expect_error() {  # expect_error FIELD ARGS...
  field=$1; shift
  err=$("$psar" plan "$cfg" "$@" 2>&1)
  [ $? -eq 2 ] || fail "'$*' should exit 2: $err"
  echo "$err" | grep -q -- "$field" || fail "'$*': error does not name $field: $err"
}
expect_error parallel.tp --tp 3
expect_error cluster.gpu.memory --memory 1G
expect_error --gpus --gpus 12
expect_error --format --format xml
expect_error model.heads --heads 25 --tp 2,4,8
echo PASS
