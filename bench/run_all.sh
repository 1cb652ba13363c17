#!/bin/bash
# The sequence behind docs/benchmarks.md's rendezvous section (about 15 minutes on 2 cores).
# Results: bench/results/**/results.json, trials.log and the merged plot.
cd "$(dirname "$0")/.." && source .venv/bin/activate
echo "start $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
# Agent hosts run hundreds of threads: a longer GIL switch interval keeps GIL hand-offs from
# dominating the simulation (docs/benchmarks.md, "What hit limits"). Same value for every impl.
SI=0.2
# Main run: ours (our TCPStore) at every size, the anchors in the same run up to 128, and the
# re-rendezvous scenarios.
python bench/rendezvous_convergence.py --sizes 2,8,32,64,128,256,512,1024,2048,4096 \
  --impl ours,tensorplay,torch --anchor-max 128 --timeout 120 --switch-interval $SI \
  --scenarios leave,crash,late --scenario-sizes 64,128,512,1024 --settle-max 20 --keep-going \
  --out bench/results
# The anchors beyond 128 (slow: torch runs into its timeout at 192).
python bench/rendezvous_convergence.py --sizes 192,256,512 --impl tensorplay,torch \
  --anchor-max 512 --timeout 120 --switch-interval $SI --settle-max 30 --no-plot \
  --out bench/results/anchors-large
# Ours over tensorplay's TCPStore (store_type=tensorplay), up to where its server aborts.
python bench/rendezvous_convergence.py --sizes 2,8,32,64,128,192,256 --impl ours-tpstore \
  --timeout 120 --switch-interval $SI --settle-max 30 --no-plot --out bench/results/ours-tpstore
# A second sample of the scenarios at 64 and 128.
python bench/rendezvous_convergence.py --sizes 2 --impl ours --timeout 120 --switch-interval $SI \
  --scenarios leave,crash,late --scenario-sizes 64,128 --settle-max 5 --keep-going --no-plot \
  --out bench/results/scenarios-repeat
# The switch interval's effect (bench/results/switch-interval/ was assembled from runs like
# these, made one by one while the harness changed; see the notes in its results.json).
for si in 0.005 0.05 0.2; do
  python bench/rendezvous_convergence.py --sizes 1024,2048,4096 --impl ours --timeout 120 \
    --switch-interval $si --settle-max 1 --keep-going --no-plot --out /tmp/rdzv-si-$si
done
# One table and plot from the runs above, plus earlier runs kept for comparison:
# ours-memory (one process, MemoryStore) from before our TCPStore existed.
python bench/rendezvous_convergence.py --out bench/results --merge bench/results/results.json \
  bench/results/anchors-large/results.json bench/results/ours-tpstore/results.json \
  bench/results/memory/results.json bench/results/memory-4096/results.json
echo "all done $(date -u +%T)"
# Earlier runs, by the previous version of this script: bench/results/before-own-store/ (ours
# over tensorplay's TCPStore, now called ours-tpstore), bench/results/memory*/ and
# bench/results/limits-*/ (the limit runs with default and widened port ranges; they need root
# for the sysctl and are not repeated here: our TCPStore keeps its connections open).
