#!/bin/sh
# blco-tucker with Y(1) in row blocks against Y(1) whole, same run: a 200000x50x40 tensor of
# 100K nonzeros at rank 8 (Y(1): 78739 rows with nonzeros x 64 columns, 38.4 MiB) run with
# no limit (Y whole) and with --mem-limit 40M (the tool then cuts Y(1) in row blocks), 3
# HOOI iterations from the same random start. Prints one JSON line per run (peak RSS from
# summary.json, HOOI seconds, TTM calls, final fit) and one with the ratios blocks / whole.
# usage: bench_tucker_blocks.sh BUILD_DIR [WORK_DIR]
set -eu
b=${1:?usage: bench_tucker_blocks.sh BUILD_DIR [WORK_DIR]}
w=${2:-/tmp}/blco-bench-tucker-blocks-$$
mkdir -p "$w"
trap 'rm -rf "$w"' EXIT
"$b/tools/blco-gen" --dims 200000x50x40 --nnz 100K --seed 3 -q -o "$w/x.blco"
model=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -n 1)
num() { sed -n "s/.*\"$2\":\([-0-9.eE+]*\).*/\1/p" "$1" | head -n 1; }
for case in whole blocks; do
    lim=
    [ $case = blocks ] && lim="--mem-limit 40M"
    "$b/tools/blco-tucker" "$w/x.blco" --rank 8 --iters 3 --tol 0 --init random -q $lim \
        --out "$w/$case"
    s=$w/$case/summary.json
    printf '{"bench":"tucker-blocks","machine":"%s","cores":%d,"case":"%s","peak_rss_bytes":%s,"hooi_s":%s,"ttm_calls":%s,"y_bytes":%s,"fit":%s}\n' \
        "$model" "$(nproc)" $case "$(num "$s" peak_rss_bytes)" \
        "$(sed -n 's/.*"hooi":\([0-9.]*\).*/\1/p' "$s")" "$(num "$s" ttm_calls)" \
        "$(num "$s" y_bytes)" "$(num "$s" fit)"
done | tee "$w/lines"
awk -F'[:,]' '{
    for (i = 1; i < NF; i++) { if ($i == "\"peak_rss_bytes\"") r[NR] = $(i + 1); if ($i == "\"hooi_s\"") t[NR] = $(i + 1); if ($i == "\"fit\"") f[NR] = $(i + 1) }
} END {
    d = f[2] - f[1]; if (d < 0) d = -d
    printf "{\"bench\":\"tucker-blocks\",\"case\":\"ratio\",\"rss_blocks_over_whole\":%.3f,\"time_blocks_over_whole\":%.3f,\"fit_difference\":%.3g}\n", r[2] / r[1], t[2] / t[1], d
}' "$w/lines"
