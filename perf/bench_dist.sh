#!/bin/sh
# Distributed CP-ALS benchmark: blco-cpd on P = 1, 2, 4 MPI ranks (mpirun --oversubscribe,
# --threads 1 per rank) on one generated power-law tensor: seconds per iteration (the
# median, first iteration dropped) against P = 1 in the same run, and the bytes rank 0 sent
# per iteration for each mode against what a ring all-reduce of that mode's whole MTTKRP
# output would send (2 (P-1)/P x rows x rank x 8), the baseline of combining every mode the
# short way; and the whole job's wall and CPU seconds (mpirun under /usr/bin/time). Prints
# JSON Lines: the machine, then one record per P.
# usage: see usage() below.
set -eu

usage() {
    cat <<EOF
usage: bench_dist.sh [--build DIR] [--dims 200000x100000x300] [--nnz 2M] [--rank 16]
                     [--iters 6] [--ranks "1 2 4"] [--seed 1] [--dir TMPDIR]
Runs build/tools/blco-cpd under mpirun on each number of ranks (oversubscribed: on a
machine with fewer cores than ranks they share them, so the times say what the extra
processes cost, not a cluster's scaling) and prints JSON Lines on standard output.
Needs mpirun (Open MPI), python3 and /usr/bin/time; a build with -Dmpi.
EOF
}

build=$(dirname "$0")/../build
dims=200000x100000x300 nnz=2M rank=16 iters=6 ranks="1 2 4" seed=1 dir=${TMPDIR:-/tmp}
while [ $# -gt 0 ]; do
    case $1 in
    --help | -h) usage; exit 0 ;;
    --build) build=$2; shift 2 ;;
    --dims) dims=$2; shift 2 ;;
    --nnz) nnz=$2; shift 2 ;;
    --rank) rank=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    *) usage >&2; exit 2 ;;
    esac
done
command -v mpirun >/dev/null 2>&1 || { echo "bench_dist: no mpirun" >&2; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "bench_dist: no python3" >&2; exit 77; }
tools=$build/tools
[ -x "$tools/blco-cpd" ] || { echo "bench_dist: no $tools/blco-cpd (--build DIR)" >&2; exit 1; }
if [ "$(id -u)" -eq 0 ]; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
# Open MPI's defaults otherwise (its single-copy transfers between ranks of one machine, CMA,
# are several times faster than copies through shared-memory fragments).

work=$(mktemp -d "$dir/bench-dist.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM
# segments of 64Ki nonzeros: enough of them for every rank to get a balanced share
"$tools/blco-gen" --kind powerlaw --dims "$dims" --nnz "$nnz" --seed "$seed" -q -o "$work/x.tns"
"$tools/blco-pack" "$work/x.tns" --segment-nnz 65536 -q -o "$work/x.blco"
rm -f "$work/x.tns"

python3 - "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)" "$(nproc)" "$dims" "$nnz" \
    "$rank" "$iters" <<'PY'
import json, os, sys
print(json.dumps({"type": "machine", "cpu": sys.argv[1].strip(), "cores": int(sys.argv[2]),
                  "load_average_1m": os.getloadavg()[0],
                  "note": "ranks oversubscribed on these cores, shared with other work; "
                          "--threads 1 per rank",
                  "tensor": {"kind": "powerlaw", "dims": sys.argv[3], "nnz": sys.argv[4]},
                  "rank": int(sys.argv[5]), "iters": int(sys.argv[6])}))
PY

for p in $ranks; do
    # the job's CPU seconds too (mpirun reaps the ranks): on shared cores, P processes get a
    # larger share of the machine than one, so wall times alone flatter P > 1
    timeout 1800 /usr/bin/time -f '%e %U %S' -o "$work/t$p" \
        mpirun --oversubscribe -np "$p" "$tools/blco-cpd" "$work/x.blco" --rank "$rank" \
        --iters "$iters" --tol 0 --threads 1 --seed 1 --json-out "$work/r$p.json" \
        --stats "$work/s$p.jsonl" --stats-interval 60 -q
done

python3 - "$work" "$iters" "$rank" $ranks <<'PY'
import json, statistics, sys
work, iters, rank, ranks = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
base = None
ranks_first = int(ranks[0])
for p in map(int, ranks):
    summ = json.loads(open(f"{work}/r{p}.json").read().splitlines()[-1])
    final = json.loads(open(f"{work}/s{p}.jsonl").read().splitlines()[-1])
    per_iter = summ["seconds"]["per_iteration"]
    med = statistics.median(per_iter[1:] if len(per_iter) > 1 else per_iter)
    if base is None:
        base = med
    wall, user, system = map(float, open(f"{work}/t{p}").read().split()[-3:])
    if p == ranks_first:
        base_cpu = user + system
    rec = {"type": "ranks", "P": p, "seconds_per_iteration": med,
           "speedup_vs_P1": base / med, "fit": summ["fit"],
           "job_wall_seconds": wall, "job_cpu_seconds": user + system,
           "cpu_seconds_vs_P1": (user + system) / base_cpu}
    if p > 1:
        modes = []
        sent = final["comm_mode_bytes"]
        for m, rows in enumerate(summ["dims"]):
            ours = sent[m] / summ["iterations"]
            ring = 2.0 * (p - 1) / p * rows * rank * 8
            modes.append({"mode": m + 1, "rows": rows,
                          "way": "all-reduce" if rows < 4096 else "reduce-scatter + all-gather",
                          "bytes_per_iteration": ours, "allreduce_bytes": ring,
                          "ratio_vs_allreduce": ours / ring,
                          "comm_seconds_per_iteration": final["comm_mode_s"][m] / summ["iterations"]})
        rec["modes"] = modes
        rec["bytes_per_iteration"] = sum(x["bytes_per_iteration"] for x in modes)
        rec["allreduce_bytes_per_iteration"] = sum(x["allreduce_bytes"] for x in modes)
        rec["ratio_vs_allreduce"] = rec["bytes_per_iteration"] / rec["allreduce_bytes_per_iteration"]
    print(json.dumps(rec))
PY
