#!/usr/bin/env bash
# A second lent-GPU call after a fix: the gpu suite (device.sh tests), then this tree's
# blco-mttkrp and blco-cpd against a baseline build's (BASE, default .gpu/base: the two
# binaries of an earlier stage, same libraries) in the same run, alternating, then what the
# first call lost or did not reach (upstream BLCO on both shapes, CP-ALS cuda and hybrid,
# compute-sanitizer on the changed kernels). Everything lands in one archive, $OUT/ab.tgz,
# beside summary.log (a call returns only a few files).
# Here: PATH=/usr/local/cuda/bin:$PATH perf/gpu_stage.sh --peers
#       mkdir -p .gpu/base && cp <old stage>/tools/blco-{mttkrp,cpd} .gpu/base/
#       cp perf/gpu_ab.sh .gpu/extra.sh
# (or both at once: perf/gpu_stage.sh --base COMMIT, which builds bench_gpu there too)
# then one device call: bash perf/gpu_call.sh tests 500 (device.sh runs .gpu/extra.sh last,
# B=build; everything comes back as one archive).
# Used for the second call of 2026-11-28 (perf/results/README.md, "An H200, 2026-11-28");
# since then its steps are those of the second session of 2026-11-28 (no GPU then): the
# host's share of a pass (factor checksums and copies on the pool's threads) and the
# MTTKRP kernel's stage (coordinates decoded once), with base = a stage of 149e038. Since the
# fourth session of 2026-11-29 its steps run most wanted first (the call's limit cuts the
# tail): the kernels (schedules, sorted copies), upstream BLCO, CP-ALS base/new/--gpu-sorted,
# the kernels on the real count tensors of .gpu/large (since the fifth), racecheck and
# memcheck of gpu_mttkrp, the device-memory and host-resident passes, hybrid
# with the tensor streamed to the GPU (never timed on one), the other sanitizers. Since the
# sixth, CP-ALS also runs --gpu-schedule interleaved and --gpu-sorted=auto, and prints the
# choices auto made (each mode's chunk schedule and sorted copy, timed on the run).
set -u
R=${R:-$(cd "$(dirname "$0")/.." && pwd)}
O=${OUT:-/tmp/gpu-out}; L=$O/ab; mkdir -p "$L"
BASE=${BASE:-$R/.gpu/base}
T0=$(date +%s); step() { echo "=== ab [$(( $(date +%s) - T0 ))s] $*"; }
# A dry run of the script's plumbing on the SIMT emulation (no figure means anything there):
# AB_NNZ=20K AB_EMU="--allow-emulation 1 --bw-bytes 16M" AB_EMU_CPD="--emulation 1"
# B=<emulation build> BASE=<its tools' copies> R=<a folder with .gpu/large> OUT=<a folder>
NNZ=${AB_NNZ:-20M}; EMU=${AB_EMU:-}; EMU_CPD=${AB_EMU_CPD:-}
pack() { tar -czf "$O/ab.tgz" -C "$O" ab /tmp/gpu-logs 2>/dev/null; }
G=/tmp/gpu-ab; mkdir -p "$G"
py_best() { python3 -c "
import json,sys
j=json.loads(open(sys.argv[1]).read().splitlines()[-1])
g=(j.get('gpus') or [{}])[0]
print('best', j.get('total_best_seconds'), 's; residency', j.get('residency'), '; staged', j.get('staged_bytes'),
      '; resident_pinned', j.get('resident_pinned'), '; overlap', g.get('overlap'), '; kernel s', g.get('kernel_seconds'), '; copy s', g.get('copy_seconds'),
      '; host s before/after batches', j.get('host_begin_seconds'), j.get('host_end_seconds'))" "$1" 2>&1 | tail -1; }
py_phases() { python3 -c "
import json,sys,collections
ev=json.load(open(sys.argv[1]))['traceEvents']
d=collections.defaultdict(list)
for e in ev:
    if e['cat']=='pass' and e['args']['pass']>=3: d[e['name']].append(e['dur']/1e3)
print('; '.join('%s %.1f ms' % (k, sorted(v)[len(v)//2]) for k,v in d.items()), '(median ms per pass, passes 4+)')" "$1" 2>&1 | tail -1; }
py_cpd() { python3 -c "
import json,sys
j=json.loads(open(sys.argv[1]).read().splitlines()[-1])
if not isinstance(j.get('seconds'), dict): sys.exit('no summary line (the run did not finish)')
s=sorted(j['seconds']['per_iteration'][1:])
print('median s/it', round(s[len(s)//2],5), 'fit', j['fit'], 'solve s', j['seconds'].get('solve'), 'mttkrp s', j['seconds'].get('mttkrp'), 'kernels', j.get('kernels'),
      'schedules', ' '.join('%d:%d/%d(%.3g/%.3g ns)' % (x['mode'], x['contiguous_passes'], x['interleaved_passes'], x['contiguous_ns_per_nnz'], x['interleaved_ns_per_nnz']) for x in j.get('schedules', [])))" "$1" 2>&1 | tail -1; }

step "make the tensors: nell2 and long, 20M nonzeros"
"$B/tools/blco-gen" --kind powerlaw --skew 2 --dims 12092x9184x28818 --nnz "$NNZ" --seed 1 -o "$G/nell2.blco" 2>&1 | tail -1
"$B/tools/blco-gen" --kind uniform --dims 4000000x2000000x1000000 --nnz "$NNZ" --seed 1 -o "$G/long.blco" 2>&1 | tail -1

step "in-memory MTTKRP kernels (bench_gpu, 20M, rank 32, both shapes, 5 reps, no streamed pass, no fiber kernel): base, new, base, new (the MTTKRP kernel's stage; the new one also times its two chunk schedules in turns, interleaved/contiguous, and each mode on a copy sorted by it, speedup over the BLCO kernel)"
if [ -x "$BASE/bench_gpu" ]; then for round in 1 2; do for v in base new; do
  bin="$B/perf/bench_gpu"; [ $v = base ] && bin="$BASE/bench_gpu"
  chk=0; [ $v = new ] && [ $round = 1 ] && chk=1 # the new kernel against the CPU, once
  timeout 150 "$bin" --nnz "$NNZ" --rank 32 --reps 5 --shape all --stream-dir none --fibers 0 --check $chk $EMU > "$L/bgpu_${v}_$round.jsonl" 2> "$L/bgpu_${v}_$round.err"
  echo "$v round $round rc=$? $(python3 -c "
import json,sys
for l in open(sys.argv[1]):
    j=json.loads(l)
    if j.get('what')=='mode': print(j['shape'], j['mode'], j['best_s'], j['ratio_to_d2d'], j.get('max_rel_diff_vs_cpu', ''), end='; ')
    if j.get('what')=='mode_schedule': print(j['shape'], j['mode'], 'interleaved/contiguous', j['interleaved_over_contiguous'], j['interleaved_ratio_to_d2d'], j.get('interleaved_max_rel_diff_vs_cpu', ''), end='; ')
    if j.get('what')=='mode_sorted': print(j['shape'], j['mode'], 'sorted', j.get('best_s', j.get('skipped')), j.get('speedup_over_blco', ''), j.get('max_rel_diff_vs_cpu', ''), end='; ')" "$L/bgpu_${v}_$round.jsonl" 2>&1 | tail -1)"
done; done; else echo "no $BASE/bench_gpu: skipped"; fi
pack

if [ -f "$R/.gpu/peers/run.sh" ]; then
  step "upstream BLCO side by side (64-bit, both shapes): MTTKRP and CP-ALS"
  timeout 150 bash "$R/.gpu/peers/run.sh" --upstream-bits 64 --gpu-shape all > "$L/peers.log" 2>&1
  echo "rc=$?"; cp "$O"/peers_gpu.jsonl "$O"/peers_gpu.log "$L/" 2>/dev/null
  grep -hE '"what": "(gpu_mttkrp|gpu_cpd)"' "$L/peers.log" "$L/peers_gpu.jsonl" 2>/dev/null | sort -u | cut -c1-700
  pack
fi

step "CP-ALS rank 32, 6 iterations, --backend cuda: base, new (--gpu-schedule auto: each mode's chunk schedule timed on the run, passes contiguous/interleaved and their kernels' ns a nonzero), new --gpu-schedule interleaved, new --gpu-sorted (every mode on its copy sorted by the mode), new --gpu-sorted=auto (each mode timed on BLCO and on its copy, the faster kept: its choices), twice"
for s in nell2 long; do for round in 1 2; do for v in base new inter sorted sauto; do
  bin="$B/tools/blco-cpd"; [ $v = base ] && bin="$BASE/blco-cpd"
  extra=""; [ $v = sorted ] && extra="--gpu-sorted -v"; [ $v = inter ] && extra="--gpu-schedule interleaved"
  [ $v = sauto ] && extra="--gpu-sorted=auto -v"
  timeout 60 "$bin" "$G/$s.blco" --rank 32 --iters 6 --tol 0 --backend cuda -q $extra --json-out "$L/cpd_${s}_${v}_$round.json" > /dev/null 2> "$L/cpd_${s}_${v}_$round.err"
  echo "$s $v round $round rc=$? $(py_cpd "$L/cpd_${s}_${v}_$round.json")"
  [ $v = sorted ] && grep -o "sorted copies of.*" "$L/cpd_${s}_${v}_$round.err"
  [ $v = sauto ] && grep -o "gpu-sorted auto: mode .*" "$L/cpd_${s}_${v}_$round.err"
done; done; done
pack

step "the kernels on real count tensors (.gpu/large: the git histories' long skewed modes), bench_gpu --tensor, rank 32: the chunk schedules and the sorted copies against the BLCO kernel (gpu_l2_model: interleaved 0.72-0.99x the contiguous order's bytes, sorted 3-13x fewer output flushes there)"
for f in "$R"/.gpu/large/*.tns.zst; do
  [ -f "$f" ] || continue
  n=$(basename "$f" .tns.zst)
  timeout 60 "$B/tools/blco-pack" "$f" -o "$G/$n.blco" -q --force 2>&1 | tail -1
  timeout 60 "$B/perf/bench_gpu" --tensor "$G/$n.blco" --rank 32 --reps 5 --stream-dir none --fibers 0 --check 1 $EMU > "$L/bgpu_real_$n.jsonl" 2> "$L/bgpu_real_$n.err"
  echo "$n rc=$? $(python3 -c "
import json,sys
for l in open(sys.argv[1]):
    j=json.loads(l)
    if j.get('what')=='mode_schedule': print(j['mode'], 'interleaved/contiguous', j['interleaved_over_contiguous'], end='; ')
    if j.get('what')=='mode_sorted': print(j['mode'], 'sorted', j.get('speedup_over_blco', j.get('skipped')), 'upload_s', j.get('upload_s'), j.get('max_rel_diff_vs_cpu', ''), end='; ')" "$L/bgpu_real_$n.jsonl" 2>&1 | tail -1)"
done
pack

CS=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
san() { # tool test timeout
  c=$(python3 -c "
import json,sys,shlex
for t in json.load(open(sys.argv[1])):
    if t['name']==sys.argv[2]: print(' '.join(['env','BLCO_TEST_QUICK=1']+[shlex.quote(k+'='+v) for k,v in (t.get('env') or {}).items()]+[shlex.quote(sys.argv[3]),'--tool',sys.argv[4],'--error-exitcode','99','--print-limit','20']+[shlex.quote(c) for c in t['cmd']])); break" "$R/.gpu/gpu_tests.json" "$2" "$CS" "$1")
  [ -n "$c" ] || { echo "no test $2"; return; }
  step "compute-sanitizer --tool $1 $2 (BLCO_TEST_QUICK=1)"
  ( cd "$B" && eval timeout "$3" $c ) > "$L/san_$1_$2.log" 2>&1
  echo "rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|passed, ' "$L/san_$1_$2.log" | tail -3 | tr '\n' ' ')"
}
san racecheck gpu_mttkrp 90
san memcheck gpu_mttkrp 60
pack

step "in device memory (--residency auto, no limit: the tensor stays on the device after the first pass), rank 32, 6 iterations: base, new, base, new (the MTTKRP kernel's stage)"
for s in nell2 long; do for round in 1 2; do for v in base new; do
  bin="$B/tools/blco-mttkrp"; [ $v = base ] && bin="$BASE/blco-mttkrp"
  timeout 60 "$bin" --backend cuda --gpus 0 --residency auto --iters 6 --rank 32 --json "$G/$s.blco" > "$L/dev_${s}_${v}_$round.json" 2> "$L/dev_${s}_${v}_$round.err"
  echo "$s $v round $round rc=$? $(py_best "$L/dev_${s}_${v}_$round.json") modes $(python3 -c "import json,sys; j=json.loads(open(sys.argv[1]).read().splitlines()[-1]); print([m['best_seconds'] for m in j['modes']])" "$L/dev_${s}_${v}_$round.json" 2>&1 | tail -1)"
done; done; done
pack

step "host-resident streaming (the device holds none: --gpu-mem-limit at the least it needs), rank 32, 4 iterations: base, new, base, new"
for s in nell2 long; do
  "$B/tools/blco-mttkrp" --backend cuda --gpus 0 --gpu-mem-limit 4K --rank 32 "$G/$s.blco" > "$L/need_$s.txt" 2>&1
  need=$(sed -n 's/.* needs \([0-9]*\) bytes .*/\1/p' "$L/need_$s.txt")
  echo "$s: the device needs $need bytes"
  for round in 1 2; do for v in base new; do
    bin="$B/tools/blco-mttkrp"; [ $v = base ] && bin="$BASE/blco-mttkrp"
    timeout 60 "$bin" --backend cuda --gpus 0 --gpu-mem-limit "$need" --residency auto --iters 4 --rank 32 --json "$G/$s.blco" > "$L/res_${s}_${v}_$round.json" 2> "$L/res_${s}_${v}_$round.err"
    echo "$s $v round $round rc=$? $(py_best "$L/res_${s}_${v}_$round.json")"
  done; done
  # Where a pass's time goes on the host (the trace's pass phases, since the third session
  # of 2026-11-29): median per phase over the passes after the first iteration.
  timeout 60 "$B/tools/blco-mttkrp" --backend cuda --gpus 0 --gpu-mem-limit "$need" --residency auto --iters 4 --rank 32 --trace "$L/trace_$s.json" "$G/$s.blco" > /dev/null 2>&1
  echo "$s traced rc=$? $(py_phases "$L/trace_$s.json")"
done
pack

step "bench_cpd_gpu: cpu, cuda and hybrid with the tensor streamed to the GPU (--gpu-mem-limit 256M), its batches decoded there (--codec gpu) and by the CPU threads (--codec zstd), nell2 shape, 20M, rank 32: the cases where issue 31 wants hybrid faster than both (this_over_best < 1)"
for codec in gpu zstd; do
  timeout 75 "$B/perf/bench_cpd_gpu" --nnz "$NNZ" --rank 32 --iters 4 --shape nell2 --backends cpu,cuda,hybrid --gpu-mem-limit 256M --codec $codec --dir /tmp $EMU_CPD > "$L/bench_cpd_gpu_streamed_$codec.jsonl" 2> "$L/bench_cpd_gpu_streamed_$codec.err"
  echo "$codec rc=$?"; python3 -c "
import json,sys
for l in open(sys.argv[1]):
    j=json.loads(l)
    if j.get('what')=='skipped': print(l.strip()[:300])
    if j.get('what')!='summary': continue
    print(j['backend'], 's/it', j['seconds_per_iteration'], 'this_over_best', j.get('this_over_best'), 'cpu_batches', j.get('cpu_batches'), 'host_decoded', j.get('host_decoded_batches'), 'residency', j.get('residency'), 'kernel s/it', j.get('gpu_kernel_seconds_per_iteration'))" "$L/bench_cpd_gpu_streamed_$codec.jsonl" 2>&1 | tail -4
done
rm -f /tmp/*.blco
pack

san memcheck gpu_decode 40
san memcheck stream_gpu 30
pack
step "ab done"
