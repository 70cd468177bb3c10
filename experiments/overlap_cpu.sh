#!/bin/sh
# The CPU time (user + system, every rank: mpirun waits for them) of plain and
# overlapped runs of experiments/overlap.yaml, ring and PS, N = 2, 1 Gbit/s, 40
# steps, 3 repeats; writes results/overlap/cpu.csv and cpu/. Run it under
# flock /tmp/psar-measure.lock from the repository root.
cd "$(dirname "$0")/.." || exit 1
out=results/overlap/cpu
mkdir -p $out
echo "rep,backend,mode,user_s,sys_s,wall_s,steps,step_ms,compute_ms,sync_ms,exposed_ms" > results/overlap/cpu.csv
for rep in 1 2 3; do
  for backend in ring ps; do
    for mode in off fifo front_first; do
      if [ $mode = off ]; then sets="--set sync.overlap=false"; else sets="--set sync.overlap=true --set sync.priority=$mode"; fi
      [ $backend = ps ] && sets="$sets --set ps.servers=2"
      /usr/bin/time -o $out/time.txt -f "%U,%S,%e" mpirun --allow-run-as-root --oversubscribe -np 2 "${PSAR_BIN:-build/trainer/psar}" train experiments/overlap.yaml \
        --out $out/${backend}_${mode}_r$rep --set train.steps=40 --set net.bandwidth=1Gbit --set net.latency=50us \
        --set sync.backend=$backend $sets > /dev/null 2>&1
      t=$(tail -1 $out/time.txt)
      med=$(/usr/bin/python3 -c "
import csv,statistics
from collections import defaultdict
by=defaultdict(list)
for x in csv.DictReader(open('$out/${backend}_${mode}_r$rep/steps.csv')): by[int(x['step'])].append(x)
st=sorted(by)[5:]
print(','.join(str(round(1e3*statistics.median(max(float(x[k]) for x in by[s]) for s in st),2)) for k in ['step_s','compute_s','sync_s','exposed_sync_s']))")
      echo "$rep,$backend,$mode,$t,40,$med" >> results/overlap/cpu.csv
    done
  done
done
cat /proc/loadavg
