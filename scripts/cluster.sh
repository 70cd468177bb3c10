#!/usr/bin/env bash
# A virtual cluster on one machine: H hosts, each a network namespace with its
# own hostname (a UTS namespace), joined by one bridge through veth links
# shaped by a tbf qdisc on both ends, and mpirun across them.
#
#   scripts/cluster.sh up --hosts H [--link 1Gbit] [--subnet 10.99.0.0/24]
#   scripts/cluster.sh mpirun -np N [--per-host K | --slots K1,K2,...] -- COMMAND...
#   scripts/cluster.sh exec HOST -- COMMAND...     (HOST: 1..H, psar-hN or its address)
#   scripts/cluster.sh status
#   scripts/cluster.sh down
#
# Every command takes --name NAME first (default psar, or $PSAR_CLUSTER_NAME),
# so that two clusters (a test's and yours) can coexist. Objects: namespaces
# NAME-h1..NAME-hH, bridge NAME-br, veth NAME-hN (host end: psar-nic inside
# NAME-hN), state in /run/psar-cluster/NAME. Host N has address N of the
# subnet, the bridge the last one (so that mpirun, in the root namespace,
# reaches its daemons). No default route, no forwarding: traffic stays in the
# subnet. `up` records every object in a manifest as it creates it; `down`
# removes exactly those, newest first, is idempotent, and runs by itself when
# `up` fails halfway. docs/network.md ("A virtual cluster") has the details.
set -euo pipefail

self=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")
name=${PSAR_CLUSTER_NAME:-psar}
if [[ ${1:-} == --name ]]; then
  name=${2:?--name needs a value}
  shift 2
fi

die() {
  echo "cluster.sh: $*" >&2
  exit 1
}
# Interface names have at most 15 characters: NAME-h999 and NAME-br must fit.
[[ $name =~ ^psar(-[a-z0-9]{1,5})?$ ]] ||
  die "--name '$name': must be psar or psar-XXXXX (up to 5 lower-case letters or digits)"

state=/run/psar-cluster/$name
manifest=$state/manifest
uts_dir=$state/uts
nic=psar-nic  # the host's end of its veth, inside its namespace

usage() {
  sed -n '2,20p' "$self" | sed 's/^# \{0,1\}//'
  exit 2
}

# ---- addresses ------------------------------------------------------------------

ip_to_int() {
  local IFS=.
  read -r a b c d <<<"$1"
  echo $(((a << 24) | (b << 16) | (c << 8) | d))
}
int_to_ip() {
  local i=$1
  echo "$(((i >> 24) & 255)).$(((i >> 16) & 255)).$(((i >> 8) & 255)).$((i & 255))"
}
# Parses SUBNET (a.b.c.d/len, 8 <= len <= 29); sets net_base, net_len, net_size.
parse_subnet() {
  [[ $1 =~ ^([0-9]{1,3}(\.[0-9]{1,3}){3})/([0-9]{1,2})$ ]] ||
    die "--subnet '$1': expected an IPv4 network like 10.99.0.0/24"
  local addr=${BASH_REMATCH[1]}
  net_len=${BASH_REMATCH[3]}
  ((net_len >= 8 && net_len <= 29)) || die "--subnet '$1': prefix length must be 8..29"
  local IFS=.
  for o in $addr; do ((o <= 255)) || die "--subnet '$1': octet $o > 255"; done
  net_size=$((1 << (32 - net_len)))
  net_base=$(($(ip_to_int "$addr") & ~(net_size - 1) & 0xffffffff))
}
host_ip() { int_to_ip $((net_base + $1)); }
bridge_ip() { int_to_ip $((net_base + net_size - 2)); }

# "1Gbit" -> tc rate "1gbit"; sets rate_bytes (bytes/s).
parse_link() {
  local l=${1,,}
  [[ $l =~ ^([0-9]+)(k|m|g)?bit$ ]] || die "--link '$1': expected a rate like 100Mbit, 1Gbit, 10Gbit"
  local n=${BASH_REMATCH[1]} mult=1
  case ${BASH_REMATCH[2]} in k) mult=1000 ;; m) mult=1000000 ;; g) mult=1000000000 ;; esac
  ((n > 0)) || die "--link '$1': must be positive"
  rate_bytes=$((n * mult / 8))
  link_rate=$l
}

# ---- state ------------------------------------------------------------------------

load_state() {
  [[ -f $state/cluster.env ]] || die "cluster '$name' is not up (scripts/cluster.sh up --hosts H)"
  # shellcheck disable=SC1091
  source "$state/cluster.env"
  parse_subnet "$subnet"
}
record() { echo "$*" >>"$manifest"; }

# ---- down -------------------------------------------------------------------------

# Removes what the manifest lists, newest first; each removal tolerates an
# object that is already gone, so down can run any number of times.
down() {
  if [[ -f $manifest ]]; then
    tac "$manifest" | while read -r kind what; do
      case $kind in
        netns) ip netns del "$what" 2>/dev/null || true ;;  # takes its veth (and both qdiscs) along
        link) ip link del "$what" 2>/dev/null || true ;;
        mount) umount "$what" 2>/dev/null || true ;;
        file) rm -f "$what" ;;
        dir) rmdir "$what" 2>/dev/null || true ;;
      esac
    done
  fi
  rm -f "$manifest" "$state/cluster.env" "$state/hostfile" "$state/agent"
  rmdir "$uts_dir" "$state" 2>/dev/null || true
  rmdir /run/psar-cluster 2>/dev/null || true
  local left
  left=$(leftovers)
  [[ -z $left ]] || die "down: still present after removal: $left"
}

# Objects named like this cluster's that exist now (empty when clean).
leftovers() {
  local out=""
  out+=$(ip netns list 2>/dev/null | awk -v p="^$name-h[0-9]+$" '$1 ~ p {printf "netns %s ", $1}')
  out+=$(ip -o link show 2>/dev/null | awk -F': ' -v p="^$name-(h[0-9]+|br)(@|$)" \
    '$2 ~ p {sub(/@.*/, "", $2); printf "link %s ", $2}')
  [[ ! -d $state ]] || out+="dir $state "
  echo -n "$out"
}

# ---- up ---------------------------------------------------------------------------

up() {
  local hosts="" link=1Gbit subnet=10.99.0.0/24
  while (($#)); do
    case $1 in
      --hosts) hosts=${2:?}; shift 2 ;;
      --link) link=${2:?}; shift 2 ;;
      --subnet) subnet=${2:?}; shift 2 ;;
      *) die "up: unknown argument '$1'" ;;
    esac
  done
  [[ $hosts =~ ^[0-9]+$ ]] && ((hosts >= 1)) || die "up: --hosts must be a positive integer, got '$hosts'"
  parse_subnet "$subnet"
  parse_link "$link"
  ((hosts <= 999 && hosts + 2 < net_size)) || die "up: --hosts $hosts does not fit in $subnet"
  [[ $(id -u) -eq 0 ]] || die "up: needs root (network namespaces)"
  command -v ip >/dev/null && command -v tc >/dev/null || die "up: needs iproute2 (scripts/deps.sh)"
  [[ ! -e $state ]] || die "up: cluster '$name' is already up (scripts/cluster.sh${name:+ --name $name} down first)"
  local clash
  clash=$(leftovers)
  [[ -z $clash ]] || die "up: objects named like cluster '$name' exist already: $clash"
  # The subnet must not be one this machine already routes (we would shadow it).
  local route
  route=$(ip -4 route show to match "$(bridge_ip)" | grep -v '^default' || true)
  [[ -z $route ]] || die "up: $subnet overlaps a route of this machine: $route"
  # Can this kernel (and this container) make namespaces at all? Probed with a
  # throwaway namespace so that the refusal is reported as such.
  local probe=$name-probe$$
  if ! err=$(ip netns add "$probe" 2>&1); then
    echo "cluster.sh: up: ip netns add refused: $err" >&2
    exit 77
  fi
  ip netns del "$probe"

  # From here on, any failure (a command under set -e, or die) removes what
  # was made so far.
  trap 'rc=$?; trap - EXIT; echo "cluster.sh: up failed; removing what it made" >&2; down; exit $rc' EXIT
  mkdir -p "$state"
  : >"$manifest"
  record dir "$state"
  # A private mount of our own for the UTS namespace files (as ip netns does
  # for /run/netns): a persistent namespace is a bind mount of /proc/PID/ns/uts.
  mkdir -p "$uts_dir"
  record dir "$uts_dir"
  mount --bind "$uts_dir" "$uts_dir"
  record mount "$uts_dir"
  mount --make-private "$uts_dir"

  local br=$name-br burst=$((rate_bytes / 1000 > 16384 ? rate_bytes / 1000 : 16384))
  ip link add "$br" type bridge
  record link "$br"
  ip addr add "$(bridge_ip)/$net_len" dev "$br"
  ip link set "$br" up
  for ((h = 1; h <= hosts; ++h)); do
    local ns=$name-h$h
    ip netns add "$ns"
    record netns "$ns"
    # For the tests: fail halfway, after host N's namespace exists.
    [[ ${PSAR_CLUSTER_FAIL_AT:-} != "$h" ]] || die "up: failing at host $h (PSAR_CLUSTER_FAIL_AT)"
    touch "$uts_dir/h$h"
    record file "$uts_dir/h$h"
    unshare --uts="$uts_dir/h$h" hostname "$ns"
    record mount "$uts_dir/h$h"
    ip link add "$ns" type veth peer name "$nic" netns "$ns"
    record link "$ns"
    ip link set "$ns" master "$br" up
    ip -n "$ns" addr add "$(host_ip "$h")/$net_len" dev "$nic"
    ip -n "$ns" link set lo up
    ip -n "$ns" link set "$nic" up
    # Both directions shaped: the host's egress (inside) and its ingress (the
    # bridge's end, whose egress is what the host receives). burst: 1 ms of
    # the link (at least 16 KiB, a GSO frame fits); queue: 20 ms.
    tc -n "$ns" qdisc add dev "$nic" root tbf rate "$link_rate" burst "$burst" latency 20ms
    tc qdisc add dev "$ns" root tbf rate "$link_rate" burst "$burst" latency 20ms
  done
  cat >"$state/cluster.env" <<EOF
hosts=$hosts
subnet=$(int_to_ip "$net_base")/$net_len
link=$link
EOF
  record file "$state/cluster.env"
  trap - EXIT
  echo "cluster '$name' up: $hosts host(s) in $(int_to_ip "$net_base")/$net_len, $link links"
  status
}

# ---- using it ---------------------------------------------------------------------

# HOST as 1..H, NAME-hN or an address of the subnet -> N (or dies).
host_index() {
  local h=$1 i=""
  if [[ $h =~ ^[0-9]+$ ]]; then
    i=$h
  elif [[ $h =~ ^$name-h([0-9]+)$ ]]; then
    i=${BASH_REMATCH[1]}
  elif [[ $h =~ ^[0-9]{1,3}(\.[0-9]{1,3}){3}$ ]]; then
    i=$(($(ip_to_int "$h") - net_base))
  fi
  [[ -n $i ]] && ((i >= 1 && i <= hosts)) || die "no host '$h' in cluster '$name' (1..$hosts)"
  echo "$i"
}

# Runs COMMAND inside host N: its network and its hostname.
in_host() {
  local i=$1
  shift
  exec nsenter --net="/run/netns/$name-h$i" --uts="$uts_dir/h$i" -- "$@"
}

# Open MPI's remote shell: `agent HOST WORDS...`, where WORDS form one shell
# command line, as ssh would pass them on.
rsh() {
  load_state
  local i
  i=$(host_index "${1:?rsh: no host}")
  shift
  in_host "$i" /bin/sh -c "$*"
}

cluster_exec() {
  load_state
  local i
  i=$(host_index "${1:?exec: no host}")
  shift
  [[ ${1:-} != -- ]] || shift
  (($#)) || die "exec: no command"
  in_host "$i" "$@"
}

cluster_mpirun() {
  load_state
  local np="" per_host="" slots=""
  while (($#)); do
    case $1 in
      -np | -n) np=${2:?}; shift 2 ;;
      --per-host) per_host=${2:?}; shift 2 ;;
      --slots) slots=${2:?}; shift 2 ;;
      --) shift; break ;;
      *) break ;;
    esac
  done
  [[ $np =~ ^[0-9]+$ ]] && ((np >= 1)) || die "mpirun: -np must be a positive integer, got '$np'"
  (($#)) || die "mpirun: no command (cluster.sh mpirun -np N [--per-host K | --slots K1,K2,...] -- COMMAND...)"
  [[ -z $per_host || -z $slots ]] || die "mpirun: --per-host and --slots exclude each other"
  # counts[h-1]: ranks on host h. --slots K1,K2,... gives them host by host
  # (a parameter server's shards on hosts of their own beside K workers per
  # host); --per-host K puts K on every host used.
  local -a counts=()
  if [[ -n $slots ]]; then
    [[ $slots =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] ||
      die "mpirun: --slots '$slots': expected positive integers, one per host (2,2,1)"
    IFS=, read -r -a counts <<<"$slots"
    local total=0 k
    for k in "${counts[@]}"; do total=$((total + k)); done
    ((total == np)) || die "mpirun: --slots $slots places $total ranks, -np is $np"
    ((${#counts[@]} <= hosts)) || die "mpirun: --slots $slots names ${#counts[@]} hosts, the cluster has $hosts"
  else
    if [[ -z $per_host ]]; then per_host=$(((np + hosts - 1) / hosts)); fi
    [[ $per_host =~ ^[0-9]+$ ]] && ((per_host >= 1)) || die "mpirun: --per-host must be a positive integer"
    local used=$(((np + per_host - 1) / per_host))
    ((used <= hosts)) || die "mpirun: $np ranks at $per_host per host need $used hosts, the cluster has $hosts"
    for ((h = 1; h <= used; ++h)); do counts+=("$per_host"); done
  fi
  # Ranks fill host 1, then host 2, ... (by slot): ranks 0..K1-1 on host 1.
  local hostfile=$state/hostfile agent=$state/agent
  : >"$hostfile"
  for ((h = 1; h <= ${#counts[@]}; ++h)); do echo "$(host_ip "$h") slots=${counts[h - 1]}" >>"$hostfile"; done
  printf '#!/bin/sh\nexec %q --name %q rsh "$@"\n' "$self" "$name" >"$agent"
  chmod +x "$agent"
  local cidr eager=${PSAR_CLUSTER_TCP_EAGER:-1048576}
  [[ $eager =~ ^[0-9]+$ ]] && ((eager >= 1024)) ||
    die "PSAR_CLUSTER_TCP_EAGER '$eager': expected bytes, at least 1024"
  cidr=$(int_to_ip "$net_base")/$net_len
  # TCP only inside the cluster subnet (data and Open MPI's own out-of-band
  # channel); shared memory between ranks of one host; yield when idle:
  # busy polling starves the kernel's packet processing between namespaces.
  # Messages up to 1 MiB eager (Open MPI's TCP default: 64 KiB): a larger
  # message waits for the receiver's go-ahead, which queues behind the
  # receiver's own data to the sender on their one socket, so two ranks that
  # send to each other take turns (docs/network.md, "Two ranks that send to
  # each other"); psar's segments (sync.segment_bytes, 512 KiB) fit.
  # PSAR_CLUSTER_TCP_EAGER=BYTES sets another limit (65536: Open MPI's).
  exec mpirun --allow-run-as-root --oversubscribe \
    --hostfile "$hostfile" -np "$np" --map-by slot \
    --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl self,vader,tcp --mca btl_tcp_if_include "$cidr" --mca oob_tcp_if_include "$cidr" \
    --mca mpi_yield_when_idle 1 \
    --mca btl_tcp_eager_limit "$eager" --mca btl_tcp_rndv_eager_limit "$eager" \
    --mca btl_tcp_max_send_size $((eager > 131072 ? eager : 131072)) \
    "$@"
}

status() {
  if [[ ! -f $state/cluster.env ]]; then
    local left
    left=$(leftovers)
    echo "cluster '$name': down${left:+ (but present: $left)}"
    return 0
  fi
  load_state
  echo "cluster '$name': $hosts host(s), subnet $subnet, link $link, bridge $name-br $(bridge_ip)"
  for ((h = 1; h <= hosts; ++h)); do
    local ns=$name-h$h
    local hn addr q_in q_out
    hn=$(nsenter --uts="$uts_dir/h$h" hostname 2>/dev/null || echo '?')
    addr=$(ip -n "$ns" -4 -o addr show dev "$nic" 2>/dev/null | awk '{print $4}')
    q_out=$(tc -n "$ns" qdisc show dev "$nic" 2>/dev/null | grep -o 'rate [^ ]*' | head -1 | cut -d' ' -f2)
    q_in=$(tc qdisc show dev "$ns" 2>/dev/null | grep -o 'rate [^ ]*' | head -1 | cut -d' ' -f2)
    echo "  $ns  hostname $hn  $addr  tbf out ${q_out:-none} in ${q_in:-none}"
  done
}

cmd=${1:-}
(($#)) && shift
case $cmd in
  up) up "$@" ;;
  down) down ;;
  status) status ;;
  mpirun) cluster_mpirun "$@" ;;
  exec) cluster_exec "$@" ;;
  rsh) rsh "$@" ;;
  -h | --help | help | "") usage ;;
  *) die "unknown command '$cmd' (up, mpirun, exec, status, down)" ;;
esac
