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
# With --base COMMIT, also that commit's blco-mttkrp, blco-cpd and bench_gpu (a CUDA build
# in a temporary worktree, a few minutes more) in .gpu/base/, and perf/gpu_ab.sh as
# .gpu/extra.sh: the call then runs the A/B (`bash perf/gpu_call.sh tests 500`).
# usage: perf/gpu_stage.sh [--peers] [--base COMMIT]
set -eu
peers=0 base=
while [ $# -gt 0 ]; do
    case $1 in
    --peers) peers=1 ;;
    --base) [ $# -ge 2 ] || { echo "gpu_stage: --base needs a commit" >&2; exit 2; }
        base=$(git rev-parse --verify "$2^{commit}") || exit 2; shift ;;
    *) echo "usage: perf/gpu_stage.sh [--peers] [--base COMMIT]" >&2; exit 2 ;;
    esac
    shift
done
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
if [ -n "$base" ]; then
    wt=$(mktemp -d "${TMPDIR:-/tmp}/blco-gpu-base.XXXXXX")
    git worktree add -q --detach "$wt" "$base"
    ( cd "$wt" && PATH=$PATH:/usr/local/cuda/bin meson setup b -Dcuda=enabled -Dnative=false \
        -Dpython=disabled -Dmpi=disabled >"$wt.setup.log" 2>&1 &&
        ninja -C b -j"$(nproc)" tools/blco-mttkrp tools/blco-cpd perf/bench_gpu \
            >"$wt.build.log" 2>&1 ) ||
        { tail -20 "$wt.setup.log" "$wt.build.log" 2>/dev/null; git worktree remove --force "$wt"; exit 1; }
    mkdir -p .gpu/base
    cp "$wt/b/tools/blco-mttkrp" "$wt/b/tools/blco-cpd" "$wt/b/perf/bench_gpu" .gpu/base/
    strip .gpu/base/* 2>/dev/null || true
    git worktree remove --force "$wt"
    rm -f "$wt.setup.log" "$wt.build.log"
    cp perf/gpu_ab.sh .gpu/extra.sh
    echo "gpu_stage: base $(git rev-parse --short "$base") in .gpu/base; .gpu/extra.sh is perf/gpu_ab.sh"
    echo "gpu_stage: one device call: command 'bash perf/gpu_call.sh tests 500', carry [\".gpu\"], timeout_s 540"
    exit 0
fi
du -sh .gpu
echo "gpu_stage: one device call: command 'bash perf/gpu_call.sh all 500', carry [\".gpu\"], timeout_s 540"
