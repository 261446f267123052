#!/bin/sh
# Stages one lent-GPU call from the project's root, in one command:
#   ../shared/gpu-check/stage.sh (this tree's CUDA build in .gpu/), perf/gpu_extra.sh as
#   .gpu/extra.sh, the large count tensors of ../shared/data/large/ (*-author-token-month)
#   in .gpu/large/, device.sh's blco-cpd calls switched to --json-out (blco-cpd's --json
#   prints to standard output and takes no file), and with --peers upstream BLCO's builds
#   (perf/peers --gpu-stage .gpu/peers: 3-4 minutes more).
# Then one device call: command `bash perf/gpu_call.sh all 500`, carry [".gpu"], timeout_s
# 540 (about 5-8 minutes on an H100 or H200 with the extras): device.sh under a limit, and
# everything it wrote in $OUT packed into one archive (a call returns only a few files).
# usage: perf/gpu_stage.sh [--peers]
set -eu
peers=0
case ${1:-} in
--peers) peers=1 ;;
"") ;;
*) echo "usage: perf/gpu_stage.sh [--peers]" >&2; exit 2 ;;
esac
[ -x ../shared/gpu-check/stage.sh ] || { echo "gpu_stage: no ../shared/gpu-check/stage.sh" >&2; exit 1; }
../shared/gpu-check/stage.sh
cp perf/gpu_extra.sh .gpu/extra.sh
mkdir -p .gpu/large
n=0
for f in ../shared/data/large/*-author-token-month.tns.zst; do
    [ -f "$f" ] || continue
    cp "$f" .gpu/large/
    n=$((n + 1))
done
echo "gpu_stage: $n large tensors in .gpu/large"
sed -i 's/ --json "\$L/ --json-out "$L/' .gpu/device.sh
grep -q -- '--json-out' .gpu/device.sh || echo "gpu_stage: note: device.sh has no blco-cpd --json-out call" >&2
[ $peers -eq 0 ] || perf/peers --gpu-stage .gpu/peers
du -sh .gpu
echo "gpu_stage: one device call: command 'bash perf/gpu_call.sh all 500', carry [\".gpu\"], timeout_s 540"
