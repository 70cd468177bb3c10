#!/usr/bin/env bash
# cluster_test.sh CLUSTER_SH TRAIN_PARAMS
# On a virtual cluster of 2 hosts (scripts/cluster.sh, its own name and
# subnet): a training run with --sync ring, ps (a dedicated server on host 1,
# workers on both hosts), mpi and hierarchical across the hosts ends with the parameters of
# the same run on one host (within 1e-6); a run that fails across the hosts
# fails with its cause (an emulated node spanning hosts too); `down` leaves no namespace, link or qdisc behind,
# and an `up` that fails halfway removes what it made.
# Exit 77 (CTest: skipped) where network namespaces cannot be made.
set -uo pipefail
cluster=$1 probe=$2
export PSAR_CLUSTER_NAME=psar-t
subnet=10.99.200.0/24
work=$(mktemp -d /tmp/psar-cluster-test.XXXXXX)
mpirun_local=(mpirun --allow-run-as-root --oversubscribe)

fail() {
  echo "cluster_test: FAIL: $*"
  exit 1
}
# Names of this test's cluster present on the machine, qdiscs included.
leftovers() {
  {
    ip netns list | grep -E "^$PSAR_CLUSTER_NAME-"
    ip -o link show | grep -E ": $PSAR_CLUSTER_NAME-"
    tc qdisc show | grep -E "dev $PSAR_CLUSTER_NAME-"
    [[ ! -e /run/psar-cluster/$PSAR_CLUSTER_NAME ]] || echo "/run/psar-cluster/$PSAR_CLUSTER_NAME"
  } 2>/dev/null
}
cleanup() {
  "$cluster" down >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

[[ $(id -u) -eq 0 ]] || { echo "cluster_test: skipped: needs root for network namespaces"; exit 77; }
[[ -z $(leftovers) ]] || fail "a cluster named $PSAR_CLUSTER_NAME exists already: $(leftovers)"

# An up that fails halfway (at host 2) removes everything it made.
out=$(PSAR_CLUSTER_FAIL_AT=2 "$cluster" up --hosts 3 --subnet "$subnet" 2>&1)
rc=$?
[[ $rc -ne 77 ]] || { echo "cluster_test: skipped: $out"; exit 77; }
[[ $rc -ne 0 ]] || fail "up with an injected failure succeeded"
grep -q "up failed; removing what it made" <<<"$out" || fail "up did not clean up: $out"
[[ -z $(leftovers) ]] || fail "a failed up left behind: $(leftovers)"

"$cluster" up --hosts 2 --link 1Gbit --subnet "$subnet" || fail "up failed"
status=$("$cluster" status)
echo "$status"
grep -q "hostname $PSAR_CLUSTER_NAME-h2  10.99.200.2/24  tbf out 1Gbit in 1Gbit" <<<"$status" ||
  fail "status does not show host 2 with its hostname, address and shaped link"

# --slots places ranks host by host: 1 on host 1, 2 on host 2; a count that
# does not add up to -np is refused before anything starts.
hosts_of=$("$cluster" mpirun -np 3 --slots 1,2 -- hostname | sort | uniq -c | awk '{print $2 "=" $1}' | xargs)
[[ $hosts_of == "$PSAR_CLUSTER_NAME-h1=1 $PSAR_CLUSTER_NAME-h2=2" ]] ||
  fail "--slots 1,2 put the 3 ranks on: $hosts_of"
out=$("$cluster" mpirun -np 4 --slots 1,2 -- hostname 2>&1) && fail "--slots 1,2 with -np 4 ran: $out"
grep -q "slots 1,2 places 3 ranks, -np is 4" <<<"$out" || fail "--slots mismatch not named: $out"

# name NP PER_HOST HOSTS SET...: the run on one host, then across the cluster.
compare() {
  local name=$1 np=$2 per_host=$3 hosts=$4
  shift 4
  local sets=()
  for s in "$@"; do sets+=(--set "$s"); done
  echo "== $name: $np ranks, one host vs $hosts host(s) at $per_host per host"
  "${mpirun_local[@]}" -np "$np" "$probe" "${sets[@]}" --write "$work/$name.bin" ||
    fail "$name: the run on one host failed"
  "$cluster" mpirun -np "$np" --per-host "$per_host" -- \
    "$probe" "${sets[@]}" --compare "$work/$name.bin" --tolerance 1e-6 --hosts "$hosts" \
    --subnet "$subnet" || fail "$name: the run across the cluster differs or failed"
}
compare ring 4 2 2 sync.backend=ring
# The control: another seed's parameters are told apart by the same check.
out=$("${mpirun_local[@]}" -np 4 "$probe" --set train.seed=4 --compare "$work/ring.bin" 2>&1) &&
  fail "a run with another seed passed the comparison: $out"
grep -q "parameters differ from" <<<"$out" || fail "the control failed for another reason: $out"
compare mpi 4 2 2 sync.backend=mpi
# Nodes from the hostnames: one node of 4 on one host, 2 nodes of 2 across
# the cluster (another order of addition, hence a tolerance and not bits).
compare hierarchical 4 2 2 sync.backend=hierarchical
# Ranks 0 (the server) and 1 on host 1, rank 2 on host 2.
compare ps 3 2 2 sync.backend=ps ps.servers=1

# A run that cannot work across hosts fails with its cause, and down still cleans up.
out=$("$cluster" mpirun -np 3 --per-host 2 -- "$probe" --set sync.backend=ps \
  --set ps.interface=127.0.0.1 --compare "$work/ps.bin" 2>&1)
rc=$?
[[ $rc -ne 0 ]] || fail "a loopback parameter server across hosts succeeded"
grep -q "ps.interface '127.0.0.1': a loopback address, but ranks run on host" <<<"$out" ||
  fail "the failed run does not name its cause: $out"

# An emulated node (net.node_size) whose ranks are on two hosts is refused,
# naming the hosts: its NIC is shared memory of one host.
out=$("$cluster" mpirun -np 2 --per-host 1 -- "$probe" --set net.bandwidth=1Gbit \
  --set net.node_size=2 --compare "$work/ring.bin" 2>&1)
rc=$?
[[ $rc -ne 0 ]] || fail "an emulated node across two hosts was accepted"
grep -q "net.node_size = 2: rank 1 runs on host $PSAR_CLUSTER_NAME-h2, rank 0 of its node on $PSAR_CLUSTER_NAME-h1" <<<"$out" ||
  fail "the refused node does not name its hosts: $out"

"$cluster" down || fail "down failed"
[[ -z $(leftovers) ]] || fail "down left behind: $(leftovers)"
"$cluster" down || fail "a second down failed (must be idempotent)"
echo "cluster_test: ok"
