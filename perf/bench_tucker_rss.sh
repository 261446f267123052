#!/bin/sh
# Out-of-core HOOI (issue 17's target): blco-tucker on a .blco file at least 8x larger than
# --mem-limit must complete with peak RSS within the limit + 64 MiB. Generates a power-law
# tensor (6M nonzeros, segments of 65536 so a small budget can stream it), runs 3 HOOI
# iterations at rank 4 (init random: the HOSVD sketch needs more room) and prints one JSON
# line: file size, limit, their ratio, peak RSS (the tool's own VmHWM, from summary.json).
# usage: bench_tucker_rss.sh BUILD_DIR [WORK_DIR]
set -eu
b=${1:?usage: bench_tucker_rss.sh BUILD_DIR [WORK_DIR]}
w=${2:-/tmp}/blco-bench-tucker-$$
mkdir -p "$w"
trap 'rm -rf "$w"' EXIT
"$b/tools/blco-gen" --kind powerlaw --dims 11700x8800x5850 --nnz 6M --skew 1.5 -q -o "$w/x.tns"
"$b/tools/blco-pack" "$w/x.tns" --segment-nnz 65536 -q -o "$w/x.blco"
rm -f "$w/x.tns"
limit=6815744 # 6.5 MiB
"$b/tools/blco-tucker" "$w/x.blco" --rank 4 --iters 3 --tol 0 --init random -q \
    --mem-limit $limit --out "$w/tk"
size=$(stat -c %s "$w/x.blco")
rss=$(sed -n 's/.*"peak_rss_bytes":\([0-9]*\).*/\1/p' "$w/tk/summary.json")
model=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)
awk -v s="$size" -v l="$limit" -v r="$rss" -v m="$model" -v c="$(nproc)" 'BEGIN {
    printf "{\"bench\":\"tucker-rss\",\"machine\":\"%s\",\"cores\":%d,\"file_bytes\":%d,", m, c, s
    printf "\"mem_limit\":%d,\"file_over_limit\":%.2f,\"peak_rss_bytes\":%d,", l, s / l, r
    printf "\"bound_bytes\":%d,\"within\":%s}\n", l + 64 * 1048576, r <= l + 64 * 1048576 ? "true" : "false" }'
