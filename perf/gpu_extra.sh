#!/usr/bin/env bash
# The extra commands of a lent-GPU call (../shared/gpu-check/): compute-sanitizer's racecheck,
# memcheck and synccheck over the GPU tests in BLCO_TEST_QUICK mode, CP-ALS cuda against
# hybrid (perf/bench_cpd_gpu), upstream BLCO side by side (perf/peers, when staged), and the
# fiber copies' kernel against the BLCO kernel (perf/bench_gpu: chunk sizes on the generated
# shapes; real count tensors, those of ../shared/data and any in .gpu/large/), in that order
# (most wanted first: a call cut by its time limit keeps what ran); with STREAM_NNZ set (e.g.
# STREAM_NNZ=300M bash perf/gpu_call.sh all 500) last the streamed pass on that many nonzeros
# (STREAM_PLACES=6 too: its values rounded to 6 decimal places, three codecs). Before that, a
# 20M streamed pass with 6-place values (the decimal codec against plain and zstd).
# Used as the second call of 2026-11-26 (perf/results/README.md, "Issues 29-31 on an H100")
# and the first of 2026-11-28 ("An H200, 2026-11-28").
# Here: ../shared/gpu-check/stage.sh; [perf/peers --gpu-stage .gpu/peers;]
#       cp perf/gpu_extra.sh .gpu/extra.sh
#       [mkdir -p .gpu/large; cp ../shared/data/large/*-author-token-month.tns.zst .gpu/large/]
# then one device call: bash perf/gpu_call.sh all 500 (device.sh runs .gpu/extra.sh last,
# B=build; gpu_call.sh packs $OUT into one archive; perf/gpu_stage.sh does the staging in one
# command).
set -u
R=${R:-$(cd "$(dirname "$0")/.." && pwd)}
O=${OUT:-/tmp/gpu-out}; L=$O; mkdir -p "$L/extra"
T0=$(date +%s); step() { echo "=== extra [$(( $(date +%s) - T0 ))s] $*"; }
CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
cmd_of() { python3 -c "
import json,sys,shlex
for t in json.load(open(sys.argv[1])):
    if t['name']==sys.argv[2]: print(' '.join(['env','BLCO_TEST_QUICK=1']+[shlex.quote(k+'='+v) for k,v in (t.get('env') or {}).items()]+['\"$CS\" --tool \"$TOOL\" --error-exitcode 99 --print-limit 20']+[shlex.quote(c) for c in t['cmd']])); break" "$R/.gpu/gpu_tests.json" "$1"; }
san() { # tool test timeout
  TOOL=$1; c=$(cmd_of "$2"); [ -n "$c" ] || { echo "no test $2"; return; }
  step "compute-sanitizer --tool $1 $2 (BLCO_TEST_QUICK=1)"
  ( cd "$B" && eval timeout "$3" $c ) > "$L/extra/san_$1_$2.log" 2>&1
  echo "rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|checks passed|passed, |QUICK' "$L/extra/san_$1_$2.log" | tail -3 | tr '\n' ' ')"
}
san racecheck gpu_mttkrp 75
san racecheck gpu_decode 25
san racecheck gpu_ttm 25
san racecheck stream_gpu 40
san memcheck gpu_mttkrp 30
san memcheck gpu_ttm 20
san memcheck gpu_decode 20
san memcheck gpu_dense 20
san memcheck stream_gpu 30
san synccheck stream_gpu 25
step "bench_cpd_gpu: cuda, hybrid, cuda-det (deterministic sums) and cuda-fibers (fiber copies), 20M, rank 32, both shapes"
timeout 150 "$B/perf/bench_cpd_gpu" --nnz 20M --rank 32 --iters 4 --shape all --backends cuda,hybrid,cuda-det,cuda-fibers --dir /tmp > "$L/extra/bench_cpd_gpu_hybrid.jsonl" 2> "$L/extra/bench_cpd_gpu_hybrid.err"
echo "rc=$?"; grep -E '"what":"summary"' "$L/extra/bench_cpd_gpu_hybrid.jsonl" | cut -c1-420; tail -2 "$L/extra/bench_cpd_gpu_hybrid.err"
rm -f /tmp/*.blco
step "bench_cpd_gpu: cpu, cuda and hybrid with the tensor streamed to the GPU (--gpu-mem-limit 256M), its batches decoded there (--codec gpu) and by the CPU threads (--codec zstd): the cases where hybrid is to beat both (issue 31)"
for codec in gpu zstd; do
  timeout 120 "$B/perf/bench_cpd_gpu" --nnz 20M --rank 32 --iters 4 --shape nell2 --backends cpu,cuda,hybrid --gpu-mem-limit 256M --codec $codec --dir /tmp > "$L/extra/bench_cpd_gpu_streamed_$codec.jsonl" 2> "$L/extra/bench_cpd_gpu_streamed_$codec.err"
  echo "$codec rc=$?"; grep -E '"what":"(summary|skipped)"' "$L/extra/bench_cpd_gpu_streamed_$codec.jsonl" | cut -c1-300
done
rm -f /tmp/*.blco
step "bench_gpu: fiber copies against the BLCO kernel, chunks 64/256/1024, 20M, rank 32"
timeout 150 "$B/perf/bench_gpu" --nnz 20M --reps 10 --shape all --stream-dir none --fiber-chunks 64,256,1024 > "$L/extra/bench_gpu_fibers.jsonl" 2> "$L/extra/bench_gpu_fibers.err"
echo "rc=$?"; grep -E '"what":"(summary|summary_fibers)"' "$L/extra/bench_gpu_fibers.jsonl" | cut -c1-300; tail -2 "$L/extra/bench_gpu_fibers.err"
step "bench_gpu: fiber copies at rank 16 (two groups of 16 lanes a warp), nell2, 20M"
timeout 60 "$B/perf/bench_gpu" --nnz 20M --rank 16 --reps 10 --shape nell2 --stream-dir none --bw-bytes 256M > "$L/extra/bench_gpu_fibers_r16.jsonl" 2> "$L/extra/bench_gpu_fibers_r16.err"
echo "rc=$?"; grep -E '"what":"(summary|summary_fibers)"' "$L/extra/bench_gpu_fibers_r16.jsonl" | cut -c1-300
if [ -f "$R/.gpu/peers/run.sh" ]; then
  step "upstream BLCO side by side (64-bit, both shapes): MTTKRP and CP-ALS"
  timeout 150 bash "$R/.gpu/peers/run.sh" --upstream-bits 64 --gpu-shape all > "$L/extra/peers.log" 2>&1
  echo "rc=$?"; grep -E 'gpu_cpd|Error|error|exited' "$L/extra/peers.log" | cut -c1-600 | tail -6
fi
for f in /tmp/blco-gpu/shared/data/redis-author-token-month.tns.zst /tmp/blco-gpu/shared/data/redis-author-file-token-month.tns.zst "$R"/.gpu/large/*.tns.zst; do
  [ -f "$f" ] || continue
  n=$(basename "$f" .tns.zst)
  step "bench_gpu --tensor $n (rank 32, chunks 64/256/1024)"
  timeout 60 "$B/tools/blco-pack" -q "$f" -o "/tmp/$n.blco" || { echo "pack rc=$?"; continue; }
  timeout 90 "$B/perf/bench_gpu" --tensor "/tmp/$n.blco" --reps 10 --stream-dir none --bw-bytes 256M --fiber-chunks 64,256,1024 > "$L/extra/bench_gpu_$n.jsonl" 2> "$L/extra/bench_gpu_$n.err"
  echo "rc=$?"; grep -E '"what":"(summary|summary_fibers)"' "$L/extra/bench_gpu_$n.jsonl" | cut -c1-300; tail -2 "$L/extra/bench_gpu_$n.err"
  step "CP-ALS on $n: --backend cuda, then --fibers on (rank 16, 10 iterations)"
  for fb in off on; do
    timeout 60 "$B/tools/blco-cpd" "/tmp/$n.blco" --rank 16 --iters 10 --tol 0 --backend cuda --fibers $fb -q --json-out "$L/extra/cpd_${n}_$fb.json" > /dev/null 2>&1
    echo "fibers $fb rc=$? $(python3 -c "import json,sys; j=json.loads(open(sys.argv[1]).read().splitlines()[-1]); s=sorted(j['seconds']['per_iteration'][1:]); print('median s/it', round(s[len(s)//2],5), 'fit', j['fit'], 'kernels', j.get('kernels'))" "$L/extra/cpd_${n}_$fb.json" 2>&1 | tail -1)"
  done
  step "streamed MTTKRP on $n, nothing resident (rank 32, 3 passes): the default file (integer values, decoded on the GPU) against --codec zstd (decoded by the CPU threads)"
  timeout 60 "$B/tools/blco-pack" -q --codec zstd "$f" -o "/tmp/$n.z.blco" || echo "pack zstd rc=$?"
  for v in "$n.blco" "$n.z.blco"; do
    timeout 60 "$B/tools/blco-mttkrp" "/tmp/$v" --backend cuda --residency none --rank 32 --iters 3 --json > "$L/extra/stream_$v.json" 2> "$L/extra/stream_$v.err"
    echo "$v rc=$? $(python3 -c "import json,sys; j=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print('all modes', j.get('total_best_seconds'), 's; read', j.get('bytes_read'), 'B; host-decoded', j.get('host_decoded_batches'), '; per GPU (decoded there, kernel s, copy s, overlap):', [(g.get('decode_batches'), g.get('kernel_seconds'), g.get('copy_seconds'), g.get('overlap')) for g in j.get('gpus', [])])" "$L/extra/stream_$v.json" 2>&1 | tail -1)"
  done
  rm -f "/tmp/$n.blco" "/tmp/$n.z.blco"
done
step "bench_gpu: streamed pass, 20M of the NELL-2 shape with values of 6 decimal places: --codec gpu (decimal values, decoded on the GPU), zstd (CPU threads), delta (plain values: what gpu wrote before the decimal codec)"
timeout 120 "$B/perf/bench_gpu" --nnz 1M --fibers 0 --schedules 0 --sorted 0 --check 0 --bw-bytes 256M --stream-nnz 20M --stream-places 6 --reps 3 --shape nell2 --stream-dir /tmp > "$L/extra/bench_gpu_stream_places6.jsonl" 2> "$L/extra/bench_gpu_stream_places6.err"
echo "rc=$?"; grep '"what":"stream"' "$L/extra/bench_gpu_stream_places6.jsonl" | cut -c1-600; tail -2 "$L/extra/bench_gpu_stream_places6.err"
rm -f /tmp/*.blco
cp "$L"/extra/bench_gpu_*.jsonl "$O/" 2>/dev/null
if [ -n "${STREAM_NNZ:-}" ]; then
  step "bench_gpu: streamed pass from disk, $STREAM_NNZ nonzeros, nell2, both codecs (STREAM_NNZ)"
  timeout 240 "$B/perf/bench_gpu" --nnz 20M --fibers 0 --stream-nnz "$STREAM_NNZ" --stream-places "${STREAM_PLACES:-0}" --reps 2 --shape nell2 --stream-dir /tmp > "$L/extra/bench_gpu_stream_$STREAM_NNZ.jsonl" 2> "$L/extra/bench_gpu_stream.err"
  echo "rc=$?"; grep '"what":"stream"' "$L/extra/bench_gpu_stream_$STREAM_NNZ.jsonl" | cut -c1-600; tail -2 "$L/extra/bench_gpu_stream.err"
  cp "$L/extra/bench_gpu_stream_$STREAM_NNZ.jsonl" "$O/" 2>/dev/null; rm -f /tmp/*.blco
fi
step "extra done"
