#!/bin/bash
# The exact sequence behind docs/benchmarks.md (needs root for the sysctl; restores it on exit).
# Takes about 15-25 minutes on 2 cores. Results: bench/results/**/results.json and the PNGs.
cd "$(dirname "$0")/.." && source .venv/bin/activate
ORIG_RANGE="$(sysctl -n net.ipv4.ip_local_port_range | tr -s '\t ' ' ')"
restore() { sysctl -w net.ipv4.ip_local_port_range="$ORIG_RANGE" >/dev/null; }
trap restore EXIT
echo "start $(date -u +%T) range=$ORIG_RANGE tw_reuse=$(sysctl -n net.ipv4.tcp_tw_reuse)"
python bench/rendezvous_convergence.py --sizes 2,8,32,64,128,192,256,512 --impl ours,tensorplay,torch \
  --timeout 120 --scenarios leave,crash,late --scenario-sizes 64,128 --out bench/results
echo "main done $(date -u +%T)"
python bench/rendezvous_convergence.py --sizes 2,8,32,128,512,1024,2048 --impl ours-memory \
  --timeout 240 --out bench/results/memory
python bench/rendezvous_convergence.py --sizes 4096 --impl ours-memory --timeout 600 --no-plot \
  --out bench/results/memory-4096
echo "memory done $(date -u +%T)"
python bench/rendezvous_convergence.py --sizes 256,512,1024,4096 --impl ours --keep-going \
  --timeout 60 --no-plot --out bench/results/limits-default-ports
sysctl -w net.ipv4.ip_local_port_range="1024 65535"
python bench/rendezvous_convergence.py --sizes 256,512,1024,4096 --impl ours --keep-going \
  --timeout 60 --no-plot --out bench/results/limits-wide-ports
restore
echo "all done $(date -u +%T) range now $(sysctl -n net.ipv4.ip_local_port_range)"
