#!/usr/bin/env bash
# rank_failure.sh PSAR MPIRUN CONFIG
#
# An error on one rank of a 4-rank `psar train` job, not rank 0: that rank
# prints its own message (prefixed "rank R:"), and the whole job ends at once
# with the error's exit code (2 for a config or data error) — not at a
# communication deadline (the config's sync.timeout is 60 s, far beyond the
# 5 s allowed here). Open MPI's mpirun names the rank that aborted.
#  1. rank_2.ckpt of the checkpoint --resume reads is corrupt;
#  2. rank_2.ckpt is missing;
#  3. rank 3 alone is given a config file that does not exist (before MPI starts);
#  4. rank 3 alone cannot find the dataset (a relative data.path, rank 3 started
#     in another working directory), after the start-up agreement passed.
set -uo pipefail
psar=$1 mpirun=$2 config=$3
work=$(mktemp -d /tmp/psar_rank_failure.XXXXXX)
trap 'rm -rf "$work"' EXIT
fail() { echo "rank_failure: FAIL: $*"; exit 1; }
mpi=("$mpirun" --allow-run-as-root --oversubscribe)
train=("$psar" train "$config" --quiet --set sync.timeout=60s)

# expect NAME PATTERN CMD...: CMD exits with 2 within 5 s and prints PATTERN.
expect() {
  local name=$1 pattern=$2
  shift 2
  local start=$(date +%s%N)
  "$@" >"$work/$name.log" 2>&1
  local rc=$? ms=$(( ($(date +%s%N) - start) / 1000000 ))
  echo "rank_failure: $name: exit $rc after $ms ms"
  (( rc == 2 )) || { cat "$work/$name.log"; fail "$name: exit code $rc, expected 2"; }
  (( ms <= 5000 )) || { cat "$work/$name.log"; fail "$name: took $ms ms (> 5 s)"; }
  grep -Eq -- "$pattern" "$work/$name.log" || { cat "$work/$name.log"; fail "$name: no '$pattern'"; }
}

# A run with checkpoints at 20 and 40 to resume from.
"${mpi[@]}" -np 4 "${train[@]}" --set train.checkpoint_every=20 --out "$work/run" \
  >"$work/first.log" 2>&1 || { cat "$work/first.log"; fail "the first run failed"; }
ckpt="$work/run/checkpoints/step_00000040/rank_2.ckpt"
[[ -s $ckpt ]] || fail "no $ckpt"

# ---- 1, 2: a bad checkpoint file of rank 2 -------------------------------------
cp "$ckpt" "$work/rank_2.good"
head -c 200 "$work/rank_2.good" >"$ckpt"
expect corrupt_checkpoint "rank 2: data error: checkpoint file '$ckpt'.*(truncated|corrupt)" \
  "${mpi[@]}" -np 4 "${train[@]}" --set train.steps=60 --resume "$work/run"
rm "$ckpt"
expect missing_checkpoint "rank 2: data error: .*'$ckpt'" \
  "${mpi[@]}" -np 4 "${train[@]}" --set train.steps=60 --resume "$work/run"
# Nothing of the run was touched by the failed resumes but the file this test damaged.
[[ ! -e $work/run/checkpoints/step_00000060 ]] || fail "a failed resume wrote a checkpoint"

# ---- 3: a config error on rank 3 alone, before MPI starts ------------------------
expect config_on_rank_3 "rank 3: config error: cannot open config file '$work/missing.yaml'" \
  "${mpi[@]}" -np 3 "${train[@]}" --out "$work/r3" : -np 1 "$psar" train "$work/missing.yaml" --out "$work/r3"
[[ ! -e $work/r3 ]] || fail "the failed job left $work/r3"

# ---- 4: a data error on rank 3 alone, after the start-up agreement ---------------
mkdir -p "$work/here" "$work/there"
for _ in $(seq 60); do echo "the quick brown fox jumps over the lazy dog; pack my box"; done \
  >"$work/here/corpus.txt"
cat >"$work/gpt.yaml" <<'EOF'
model: {type: gpt, layers: 1, d_model: 16, heads: 2, seq_len: 8}
data: {dataset: text, path: corpus.txt}
train: {steps: 4, batch_size: 8}
sync: {backend: ring, timeout: 60s}
EOF
gpt=("$psar" train "$work/gpt.yaml" --quiet --out "$work/r4")
expect data_on_rank_3 "rank 3: data error: .*corpus.txt" \
  "${mpi[@]}" -np 3 -wdir "$work/here" "${gpt[@]}" : -np 1 -wdir "$work/there" "${gpt[@]}"
# The control: from one working directory the same job runs.
"${mpi[@]}" -np 4 -wdir "$work/here" "${gpt[@]}" --overwrite >"$work/control.log" 2>&1 ||
  { cat "$work/control.log"; fail "the same job from one working directory failed"; }
echo "rank_failure: ok"
