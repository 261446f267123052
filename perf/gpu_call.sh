#!/usr/bin/env bash
# The command of a lent-GPU call (after perf/gpu_stage.sh here): runs .gpu/device.sh WHAT
# under a time limit, then leaves $OUT holding one archive, out.tgz, of everything the run
# wrote there. A call returns only a few files (on 2026-11-28, 8 of about 60: the summary
# and the peers' records of the first call were lost), and nothing if the call itself is
# cut by its limit, so the limit here stays below the call's.
#   device call: command `bash perf/gpu_call.sh all 500`, carry [".gpu"], timeout_s 540
# usage: perf/gpu_call.sh [all|tests|bench] [SECONDS (default 480)]
set -u
what=${1:-all}
limit=${2:-480}
O=${OUT:-/tmp/gpu-out}
mkdir -p "$O"
timeout "$limit" bash .gpu/device.sh "$what"
rc=$?
[ $rc -eq 124 ] && echo "gpu_call: device.sh stopped at its limit of $limit s"
tar -czf /tmp/gpu-call-out.tgz -C "$O" . && find "$O" -mindepth 1 -delete &&
    mv /tmp/gpu-call-out.tgz "$O/out.tgz"
ls -la "$O"
exit $rc
