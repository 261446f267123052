#!/usr/bin/env bash
# The host's share of a cuda MTTKRP pass, two builds side by side in one run: a long-mode
# tensor with few nonzeros (the kernels cost little), rank 32, every mode, builds
# alternating round by round; one JSON line per run with each mode's best pass. Meant for
# the SIMT emulation (-Dcuda-emulation=true --buildtype=release), where the host code is
# the real one and the device's work is small; on a real GPU it runs as it is.
#   perf/gpu_host_ab.sh OLD_BUILD NEW_BUILD [ROUNDS] [NNZ]
# e.g. perf/gpu_host_ab.sh /tmp/old/b build-rel 5 20K > perf/results/<date>-host-ab.jsonl
set -eu
OLD=$1 NEW=$2 ROUNDS=${3:-5} NNZ=${4:-20K}
T=$(mktemp -d "${TMPDIR:-/tmp}/blco-host-ab.XXXXXX"); trap 'rm -rf "$T"' EXIT
"$NEW/tools/blco-gen" -q --dims 4000000x2000000x1000000 --nnz "$NNZ" -o "$T/long.blco"
export BLCO_EMU_MEM=${BLCO_EMU_MEM:-4G} # the emulated device holds a 1 GB factor, output
# The race finders cost host time, and builds of different commits check different things.
export BLCO_EMU_RACECHECK=${BLCO_EMU_RACECHECK:-0}
for r in $(seq "$ROUNDS"); do
  for b in old new; do
    dir=$OLD; [ $b = new ] && dir=$NEW
    "$dir/tools/blco-mttkrp" "$T/long.blco" --backend cuda --rank 32 --iters 4 --json \
      2>"$T/err" >"$T/out.json" || { cat "$T/err" >&2; exit 1; }
    python3 - "$T/out.json" "$b" "$r" "$dir" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
g = (d.get('gpus') or [{}])[0]
print(json.dumps({'bench': 'gpu_host_ab', 'build': sys.argv[2], 'dir': sys.argv[4],
                  'round': int(sys.argv[3]), 'device': g.get('name'), 'nnz': d['nnz'],
                  'threads': d['threads'], 'rank': d['rank'],
                  'mode_best_seconds': [m['best_seconds'] for m in d['modes']],
                  'kernel_seconds': g.get('kernel_seconds')}))
PY
  done
done
