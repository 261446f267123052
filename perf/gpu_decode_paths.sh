#!/bin/sh
# Which decode path each codec takes on the GPU streaming engine, and the bytes each
# nonzero costs on the bus: packs each tensor with every --codec, streams one all-mode
# MTTKRP through `blco-mttkrp --backend cuda --residency none` (nothing stays on the
# device, so every pass copies) and prints one JSON line per tensor and codec: batches
# decoded on the GPU and by the CPU threads, bytes copied to the device per nonzero and
# per pass (the factor matrices, each uploaded once, not counted). No times: on the SIMT emulation (-Dcuda-emulation=true) they are not a GPU's.
# usage: perf/gpu_decode_paths.sh BUILD-DIR [TENSOR.tns[.zst] ...]
#   (default: every tensor of ../shared/data)
set -eu
b=${1:?usage: perf/gpu_decode_paths.sh BUILD-DIR [TENSOR ...]}
shift
[ $# -gt 0 ] || set -- "$(dirname "$0")"/../../shared/data/*.tns*
export BLCO_EMU_DEVICES=${BLCO_EMU_DEVICES:-1}
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
field() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p" "$2" | head -n 1; }
for x in "$@"; do
    name=$(basename "$x" | sed 's/\.tns.*//')
    for c in auto compact raw narrow delta zstd gpu; do
        "$b/tools/blco-pack" "$x" --codec "$c" --segment-nnz 65536 --force -q -o "$t/x.blco"
        "$b/tools/blco-mttkrp" "$t/x.blco" --rank 8 --mode all --iters 1 --backend cuda \
            --gpus 0 --residency none --json >"$t/out" 2>"$t/err" || {
            echo "{\"tensor\":\"$name\",\"codec\":\"$c\",\"error\":\"$(tr -d '"\\' <"$t/err" | head -c 300)\"}"
            continue
        }
        nnz=$(field nnz "$t/out")
        h2d=$(field h2d_bytes "$t/out")
        dev=$(field decode_batches "$t/out")
        host=$(field host_decoded_batches "$t/out")
        order=$(sed -n 's/.*"order":\([0-9]*\).*/\1/p' "$t/out")
        dsum=$("$b/tools/blco-info" --json "$t/x.blco" |
            sed -n 's/.*"dims":\[\([0-9,]*\)\].*/\1/p' | tr ',' '\n' | awk '{ s += $1 } END { print s }')
        size=$(wc -c <"$t/x.blco")
        awk -v n="$name" -v c="$c" -v nnz="$nnz" -v h="$h2d" -v d="$dev" -v hd="$host" \
            -v o="$order" -v s="$size" -v f="$dsum" 'BEGIN {
            h -= f * 8 * 8 # the factor matrices at rank 8, each sent once
            printf "{\"tensor\":\"%s\",\"codec\":\"%s\",\"nnz\":%d,\"file_bytes\":%d,", n, c, nnz, s
            printf "\"gpu_decoded_batches\":%d,\"host_decoded_batches\":%d,", d, hd
            printf "\"h2d_bytes_per_pass\":%.0f,\"h2d_bytes_per_nnz\":%.3f}\n", h / o, h / o / nnz }'
    done
done
