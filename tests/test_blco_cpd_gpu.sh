#!/bin/sh
# blco-cpd on the GPU streaming engine: --backend cuda and hybrid give the CPU's fit (to
# 1e-10) on a real and a generated tensor, with one and two devices and a --gpu-mem-limit of
# about a quarter of the tensor; CP-ALS on aminoacid converges to fit 0.97495 with cuda and
# with hybrid; a killed run resumes on the GPU bit for bit (checkpoints make the MTTKRPs
# deterministic), --deterministic runs streamed over two devices give the same bits twice and
# the CPU's fit; --json reports the devices and no pageable asynchronous copy; --fibers on
# computes on fiber copies on one GPU with the CPU's fit, --gpu-sorted on copies sorted by
# each mode, on one and two GPUs.
# Runs where a GPU answers (a real one, or the SIMT emulation with BLCO_EMU_DEVICES=2); the
# cases for two devices run where there are two and say so where there are not.
# usage: test_blco_cpd_gpu.sh BLCO-CPD BLCO-GEN BLCO-PACK [CRAFT_BLCO]
set -u
tool=$1
gen=$2
pack=$3
craft=${4:-}
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"
export BLCO_EMU_DEVICES=${BLCO_EMU_DEVICES:-2}

"$gen" --kind powerlaw --skew 1.5 --dims 400x300x200 --nnz 30K --seed 6 -q -o "$T/g.tns" ||
    bad "blco-gen"
"$pack" "$T/g.tns" --segment-nnz 1024 --force -q -o "$T/g.blco" || bad "blco-pack"
expect 2 "--backend must be auto, cpu, cuda or hybrid" -- "$tool" --rank 2 --backend gpu "$T/g.blco"
"$tool" --rank 2 --iters 1 --backend cuda "$T/g.blco" >"$T/out" 2>&1 </dev/null
if grep -q "no GPU answers\|no CUDA backend" "$T/out"; then
    grep -q "^blco-cpd: --backend cuda: " "$T/out" && ok || bad "no GPU: $(cat "$T/out")"
    expect 0 "backend cpu \(auto: " -- "$tool" --rank 2 --iters 2 "$T/g.blco"
    echo "no GPU answers: checked the refusals only"
    finish
    exit $?
fi

part budgets
# Budgets too small for the ring or for the pinned staging buffers: one reason, and
# "raise --mem-limit" once (the staging case said it twice)
"$gen" --dims 3000x2000x1000 --nnz 200K --seed 3 -q -o "$T/seg.blco" || bad "blco-gen"
staged=0
for m in 3M 6M 9M 12M; do
    "$tool" --rank 8 --iters 1 --backend cuda --mem-limit $m "$T/seg.blco" >"$T/out" 2>&1 </dev/null
    st=$?
    [ $st -eq 0 ] && continue
    [ $st -eq 1 ] && [ "$(grep -o 'raise --mem-limit' "$T/out" | wc -l)" -eq 1 ] && ok ||
        bad "--mem-limit $m: exit $st: $(cat "$T/out")"
    grep -q "no room for two pinned staging buffers" "$T/out" && staged=1
done
[ $staged -eq 1 ] && ok || bad "no --mem-limit of 3M-12M ran out of room for the staging buffers"

part fits
# The fit of each backend against the CPU's: 12 iterations from the same start, tol 0.
fit() { # FILE.json: the summary's (last line's) fit
    tail -n 1 "$1" | sed -n 's/.*"fit":\([-0-9.e+]*\),.*/\1/p'
}
same() { # A B: |a - b| <= 1e-10
    awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-10) }'
}
data=${BLCO_SHARED_DATA:-}
"$pack" "$data/aminoacid.tns" --segment-nnz 4096 --force -q -o "$T/amino.blco" 2>/dev/null ||
    cp /dev/null "$T/amino.blco"
for x in g amino; do
    [ -s "$T/$x.blco" ] || { echo "note: $x skipped (no ../shared/data)"; continue; }
    args="--rank 5 --iters 12 --tol 0 --seed 2"
    expect 0 "" -- "$tool" $args --backend cpu --json-out "$T/$x-cpu.json" "$T/$x.blco"
    ref=$(fit "$T/$x-cpu.json")
    # what streaming needs on a device, plus a quarter of the decoded tensor (16 bytes a
    # nonzero) to keep there
    q=$(( $(tail -n 1 "$T/$x-cpu.json" | sed -n 's/.*"nnz":\([0-9]*\).*/\1/p') * 4 ))
    "$tool" $args --backend cuda --gpu-mem-limit 4K "$T/$x.blco" >"$T/out" 2>&1 </dev/null
    need=$(sed -n 's/.* needs \([0-9]*\) bytes .*/\1/p' "$T/out")
    [ -n "$need" ] && ok || { bad "no need stated: $(cat "$T/out")"; need=2097152; }
    # every device there is first: it says how many (cases for two need two)
    ndev=0
    for b in "cuda" "cuda --gpus 0" "cuda --gpus 0,1" "hybrid --gpus 0" "hybrid"; do
        tag=$(echo "$b" | tr -c 'a-z0-9\n' '_')
        if [ "$b" = "cuda --gpus 0,1" ] && [ "$ndev" -lt 2 ]; then
            echo "skipped: $x --backend $b needs two devices, $ndev found"
            continue
        fi
        expect 0 "" -- "$tool" $args --backend $b --gpu-mem-limit $((need + q)) \
            --json-out "$T/$x-$tag.json" "$T/$x.blco"
        got=$(fit "$T/$x-$tag.json")
        same "$ref" "$got" && ok || bad "$x --backend $b: fit $got, the CPU's $ref"
        [ "$b" = cuda ] && ndev=$(tail -n 1 "$T/$x-$tag.json" | sed -n 's/.*"gpus":\[\([^]]*\)\].*/\1/p' |
            grep -o '"device":[0-9]*,' | wc -l)
        grep -q '"backend":"'"${b%% *}"'"' "$T/$x-$tag.json" && grep -q '"gpus":\[' "$T/$x-$tag.json" &&
            ok || bad "$x --backend $b: the JSON names no backend or GPUs: $(cat "$T/$x-$tag.json")"
    done
    # the emulation has two (BLCO_EMU_DEVICES above): there the case never skips
    if grep -q '"emulated":true' "$T/$x-cuda.json" && [ "$ndev" -lt 2 ]; then
        bad "$x: the emulation shows $ndev devices, not 2"
    fi
    if [ "$ndev" -ge 2 ]; then
        tail -n 1 "$T/$x-cuda___gpus_0_1.json" | sed -n 's/.*"gpus":\[\([^]]*\)\].*/\1/p' |
            grep -q '"device":1,' && ok || bad "$x: the second GPU is missing"
    fi
    # Once the tensor is resident on the device, an iteration moves only R x R matrices,
    # R-vectors and scalars over the bus: at most 64 KiB + N R^2 8 bytes (rank 5, 3 modes).
    # Streamed (a quarter resident), the tensor's batches cross but no factor or output.
    expect 0 "" -- "$tool" $args --backend cuda --gpus 0 --json-out "$T/$x-res.json" "$T/$x.blco"
    # hybrid with the whole tensor on the device: the CPU takes no batch, so no factor comes
    # back for it either (on the H100 these made hybrid 1.7-13x slower than cuda)
    expect 0 "" -- "$tool" $args --backend hybrid --gpus 0 --json-out "$T/$x-hres.json" "$T/$x.blco"
    it_bytes() { # FILE ITERATION [KIND]: the iteration's bytes over the bus (of one kind)
        grep "\"iteration\":$2," "$1" | sed -n 's/.*"gpu_bytes":\({.*}}\).*/\1/p' |
            sed "s/\"${3:-[a-z]*}\":\([0-9]*\)/@\1@/g" | tr -c '0-9@\n' ' ' | tr '@' '\n' |
            awk 'NR % 2 == 0 { s += $1 } END { print s + 0 }'
    }
    for it in 2 3 12; do
        bytes=$(it_bytes "$T/$x-res.json" $it)
        [ "$bytes" -gt 0 ] && [ "$bytes" -le $((65536 + 3 * 5 * 5 * 8)) ] && ok ||
            bad "$x: iteration $it moved $bytes bytes over the bus (at most $((65536 + 3 * 5 * 5 * 8)))"
        bytes=$(it_bytes "$T/$x-hres.json" $it)
        [ "$bytes" -gt 0 ] && [ "$bytes" -le $((65536 + 3 * 5 * 5 * 8)) ] && ok ||
            bad "$x hybrid, resident: iteration $it moved $bytes bytes over the bus (at most $((65536 + 3 * 5 * 5 * 8)))"
        f=$(it_bytes "$T/$x-cuda___gpus_0.json" $it factors)
        o=$(it_bytes "$T/$x-cuda___gpus_0.json" $it outputs)
        t=$(it_bytes "$T/$x-cuda___gpus_0.json" $it tensor)
        [ "$f" -eq 0 ] && [ "$o" -eq 0 ] && [ "$t" -gt 0 ] && ok ||
            bad "$x streamed: iteration $it moved $f bytes of factors, $o of outputs, $t of tensor"
    done
    for j in "$T/$x-cuda___gpus_0.json" "$T/$x-hybrid___gpus_0.json" "$T/$x-cuda.json"; do
        grep -q '"pageable_copies":0,' "$j" && ok || bad "$j: copies from pageable memory: $(tail -n 1 "$j")"
    done
done

part rank-beyond-dense
# A rank beyond the device's dense steps (128): the algebra runs on the host, each mode's
# output comes back, and the fit is still the CPU's.
args="--rank 130 --iters 2 --tol 0 --seed 2"
expect 0 "" -- "$tool" $args --backend cpu --json-out "$T/r130-cpu.json" "$T/g.blco"
expect 0 "" -- "$tool" $args --backend cuda --gpus 0 -v --json-out "$T/r130-cuda.json" "$T/g.blco"
grep -q "dense steps run on the host" "$T/out" "$T/err" && ok || bad "rank 130: not said: $(cat "$T/err")"
same "$(fit "$T/r130-cpu.json")" "$(fit "$T/r130-cuda.json")" && ok ||
    bad "rank 130: fit $(fit "$T/r130-cuda.json"), the CPU's $(fit "$T/r130-cpu.json")"
grep '"iteration":2,' "$T/r130-cuda.json" | grep -q '"d2h":{[^}]*"outputs":[1-9]' && ok ||
    bad "rank 130: the outputs did not come back: $(grep '"iteration":2,' "$T/r130-cuda.json")"

part decode-where
# Where batches are decoded: --codec gpu files on the devices (nothing decoded by the CPU
# threads), zstd files and --gpu-decode host by the CPU threads; the same fit every way.
args="--rank 5 --iters 12 --tol 0 --seed 2"
ref=$(fit "$T/g-cpu.json")
"$pack" "$T/g.tns" --segment-nnz 1024 --codec gpu --force -q -o "$T/gg.blco" || bad "--codec gpu"
"$pack" "$T/g.tns" --segment-nnz 1024 --codec zstd --force -q -o "$T/gz.blco" || bad "--codec zstd"
for v in "gg.blco" "gz.blco" "gg.blco --gpu-decode host"; do
    tag=$(echo "$v" | tr -c 'a-z0-9\n' '_')
    expect 0 "" -- "$tool" $args --backend cuda --gpus 0 --json-out "$T/$tag.json" $T/$v
    got=$(fit "$T/$tag.json")
    same "$ref" "$got" && ok || bad "$v: fit $got, the CPU's $ref"
    dev=$(sed -n 's/.*"decode_batches":\([0-9]*\).*/\1/p' "$T/$tag.json")
    host=$(sed -n 's/.*"host_decoded_batches":\([0-9]*\).*/\1/p' "$T/$tag.json")
    case $v in
    "gg.blco") [ "${dev:-0}" -gt 0 ] && [ "${host:-1}" -eq 0 ] ;;
    *) [ "${dev:-1}" -eq 0 ] && [ "${host:-0}" -gt 0 ] ;;
    esac && ok || bad "$v: $dev batches decoded on the GPU, $host on the host"
    # a file whose batches the CPU threads decode says so, once
    n=$(grep -c "hold zstd-coded columns, which a GPU does not decode" "$T/err")
    case $v in
    "gz.blco")
        kn=$(grep -o "[0-9]* of [0-9]* batches (100%)" "$T/err")
        [ "$n" -eq 1 ] && [ -n "$kn" ] && [ "${kn%% of*}" = "$(echo "$kn" | cut -d' ' -f3)" ] &&
            grep -q "blco-pack --codec gpu" "$T/err" ;;
    *) [ "$n" -eq 0 ] ;;
    esac && ok || bad "$v: said $n times that the CPU threads decode: $(cat "$T/err")"
done

part default-codecs
# The default codecs (issue 31): g.blco, packed without --codec, has random values, which
# the default stores as a GPU decodes them: with nothing resident on the device, the GPU
# decodes every batch of every pass and the CPU threads none, and nothing is said.
expect 0 "" -- "$tool" $args --backend cuda --gpus 0 --residency none --json-out "$T/default.json" \
    "$T/g.blco"
last=$(tail -n 1 "$T/default.json")
nb=$(echo "$last" | grep -o '"batches":[0-9]*' | head -n 1 | tr -dc '0-9')
dev=$(echo "$last" | sed -n 's/.*"decode_batches":\([0-9]*\).*/\1/p')
host=$(echo "$last" | sed -n 's/.*"host_decoded_batches":\([0-9]*\).*/\1/p')
[ "${nb:-0}" -gt 12 ] && [ "${dev:-0}" -eq "$nb" ] && [ "${host:-1}" -eq 0 ] &&
    ! grep -q "zstd-coded" "$T/err" && ok ||
    bad "default codecs: $dev of $nb batches decoded on the GPU, $host on the host: $(cat "$T/err")"

part fibers
# --fibers on (issue 31): every mode's fiber copy on GPU 0 and each MTTKRP on it: the CPU's
# fit, the kernels named, no batch streamed, no pageable copy. With a device limit that
# holds one copy, mode 1 on its copy and the others streamed: the same fit. On two devices
# each holds a part of every copy (the rows split by nonzeros): the same fit, the parts'
# rows gathered on device 0 by peer copies. The copies' kernel has no atomics: a run killed
# after iteration 3 and resumed from its checkpoint ends with an uninterrupted run's bits
# (on two devices where there are two). A header whose norm does not match its data is
# refused before any fit.
"$tool" --rank 5 --backend cuda --gpus 0 --fibers on --gpu-mem-limit 4K "$T/g.blco" >"$T/out" 2>&1 </dev/null
gneed=$(sed -n 's/.* needs \([0-9]*\) bytes .*/\1/p' "$T/out")
[ -n "$gneed" ] && ok || { bad "no need stated: $(cat "$T/out")"; gneed=4194304; }
for v in "all" "one"; do
    lim=""
    [ $v = one ] && lim="--gpu-mem-limit $((gneed + 800000))"
    expect 0 "" -- "$tool" $args --backend cuda --gpus 0 --fibers on $lim -v \
        --json-out "$T/fib-$v.json" "$T/g.blco"
    got=$(fit "$T/fib-$v.json")
    same "$ref" "$got" && ok || bad "--fibers on ($v): fit $got, the CPU's $ref"
    kern=$(tail -n 1 "$T/fib-$v.json" | sed -n 's/.*"kernels":\[\([^]]*\)\].*/\1/p')
    grep -q '"pageable_copies":0,' "$T/fib-$v.json" && ok || bad "--fibers on ($v): pageable copies"
    case $v in
    all)
        [ "$kern" = '"gpu-fibers","gpu-fibers","gpu-fibers"' ] &&
            grep -q "fiber copies of modes 1,2,3 on GPU 0" "$T/err" &&
            tail -n 1 "$T/fib-$v.json" | grep -q '"batches":0,' ;;
    one)
        case $kern in '"gpu-fibers","gpu-'[rh]*'","gpu-'[rh]*) true ;; *) false ;; esac &&
            grep -q "fiber copies of mode 1 on GPU 0" "$T/err" &&
            grep -q "mode 2 keeps the BLCO kernel: its fiber copy needs" "$T/err" ;;
    esac && ok || bad "--fibers on ($v): kernels $kern: $(cat "$T/err")"
done
fgpus=0
if [ "$ndev" -ge 2 ]; then
    fgpus=0,1
    expect 0 "fiber copies of modes 1,2,3 on the GPUs, a part of the rows on each" -- "$tool" \
        $args --backend cuda --gpus 0,1 --fibers on -v --json-out "$T/fib-2.json" "$T/g.blco"
    same "$ref" "$(fit "$T/fib-2.json")" && ok || bad "--fibers on, 2 GPUs: fit $(fit "$T/fib-2.json")"
    kern=$(tail -n 1 "$T/fib-2.json" | sed -n 's/.*"kernels":\[\([^]]*\)\].*/\1/p')
    peer=$(tail -n 1 "$T/fib-2.json" | sed -n 's/.*"peer":\([0-9]*\).*/\1/p')
    [ "$kern" = '"gpu-fibers","gpu-fibers","gpu-fibers"' ] && [ "${peer:-0}" -gt 0 ] && ok ||
        bad "--fibers on, 2 GPUs: kernels $kern, $peer bytes between the GPUs"
else
    echo "skipped: --fibers on with two GPUs ($ndev found)"
fi
fargs="--rank 4 --iters 6 --tol 0 --seed 3 --backend cuda --gpus $fgpus --fibers on"
BLCO_CPD_KILL_AFTER_ITER=3 "$tool" $fargs --checkpoint "$T/fck" "$T/g.blco" >"$T/out" 2>&1 </dev/null
[ $? -eq 137 ] && ok || bad "--fibers on, the killed run: $(cat "$T/out")"
expect 0 "stopped at --iters 6" -- "$tool" $fargs --checkpoint "$T/fck" --resume -v \
    --json-out "$T/fres.json" --out "$T/fres" "$T/g.blco"
grep -q "fiber copies of modes 1,2,3 on" "$T/err" && ok || bad "resumed: no copies: $(cat "$T/err")"
expect 0 "" -- "$tool" $fargs --deterministic --json-out "$T/fstr.json" --out "$T/fstr" "$T/g.blco"
diffs=""
for f in A1 A2 A3 lambda; do
    cmp -s "$T/fres/$f.npy" "$T/fstr/$f.npy" || diffs="$diffs $f"
done
[ -z "$diffs" ] && ok || bad "--fibers on: the resumed run's$diffs differ from the straight run's"
if [ -n "$craft" ]; then
    "$craft" norm4 "$T/g.blco" "$T/norm4.blco" || bad "craft norm4"
    expect 1 "the header's sum of squares .* is not the data's .* \(a damaged header\)" -- \
        "$tool" $args --backend cuda --gpus 0 --fibers on "$T/norm4.blco"
fi

part gpu-sorted
# --gpu-sorted: every mode's copy sorted by the mode on the GPU(s), the register kernel on
# it: the CPU's fit, the kernels named, no batch streamed, no pageable copy; on two devices a
# part of the rows on each, gathered on device 0. --fibers on takes precedence; a
# deterministic run keeps BLCO batches; the CPU backend says it ignores the option.
for g in 0 0,1; do
    [ "$g" = 0,1 ] && [ "$ndev" -lt 2 ] && { echo "skipped: --gpu-sorted on two GPUs"; continue; }
    expect 0 "" -- "$tool" $args --backend cuda --gpus $g --gpu-sorted -v \
        --json-out "$T/srt.json" "$T/g.blco"
    same "$ref" "$(fit "$T/srt.json")" && ok || bad "--gpu-sorted ($g): fit $(fit "$T/srt.json"), the CPU's $ref"
    kern=$(tail -n 1 "$T/srt.json" | sed -n 's/.*"kernels":\[\([^]]*\)\].*/\1/p')
    where="GPU 0"
    [ "$g" = 0,1 ] && where="the GPUs, a part of the rows on each"
    [ "$kern" = '"gpu-sorted","gpu-sorted","gpu-sorted"' ] &&
        grep -q "sorted copies of modes 1,2,3 on $where" "$T/err" &&
        tail -n 1 "$T/srt.json" | grep -q '"batches":0,' &&
        tail -n 1 "$T/srt.json" | grep -Eq '"bytes_read":[1-9]' &&
        grep -q '"pageable_copies":0,' "$T/srt.json" && ok ||
        bad "--gpu-sorted ($g): kernels $kern: $(cat "$T/err")"
    if [ "$g" = 0,1 ]; then
        peer=$(tail -n 1 "$T/srt.json" | sed -n 's/.*"peer":\([0-9]*\).*/\1/p')
        [ "${peer:-0}" -gt 0 ] && ok || bad "--gpu-sorted on 2 GPUs: no rows gathered"
    fi
done
part gpu-sorted-auto
# --gpu-sorted=auto: each mode timed on its BLCO batches (twice) and its copy (once), then on
# the faster, the loser's copy freed; the emulation's BLCO_EMU_SLOW makes one side slower
# (the sorted copies' kernel names end in "true>", the BLCO kernels' in "false>"), so the
# choice is known: the copies lose (freed, on two devices where there are two, the room given
# back) or win; where every mode won its copy the BLCO batches the devices held are freed.
# The CPU's fit either way.
gs=0
[ "$ndev" -ge 2 ] && gs=0,1
for side in sorted blco; do
    if [ $side = sorted ]; then
        slow="true>=300000" choice="keeps the BLCO batches" k=gpu-register
        res="\"residency\":\"resident on the GPU" freed=0
    else
        slow="false>=300000" choice="on its sorted copy" k=gpu-sorted
        res="\"residency\":\"sorted copies on the GPU" freed=1
    fi
    kern="\"$k\",\"$k\",\"$k\""
    export BLCO_EMU_SLOW="$slow"
    expect 0 "" -- "$tool" $args --backend cuda --gpus $gs --gpu-sorted=auto -v \
        --json-out "$T/auto-$side.json" "$T/g.blco"
    unset BLCO_EMU_SLOW
    n=$(grep -c -- "--gpu-sorted auto: mode [123] $choice" "$T/err")
    f=$(grep -c -- "--gpu-sorted auto: every mode runs on a copy: the BLCO batches on the GPUs\{0,1\} are freed ([1-9]" "$T/err")
    same "$ref" "$(fit "$T/auto-$side.json")" && [ "$n" = 3 ] && [ "$f" = $freed ] &&
        tail -n 1 "$T/auto-$side.json" | grep -q "$res" &&
        tail -n 1 "$T/auto-$side.json" | grep -q "\"kernels\":\[$kern\]" && ok ||
        bad "--gpu-sorted=auto, $side slowed: $n modes '$choice', $f lines 'batches freed', $(tail -n 1 "$T/auto-$side.json" | grep -o '"residency":"[^"]*"'), fit $(fit "$T/auto-$side.json"): $(cat "$T/err")"
done
grep -q "the copy is freed" "$T/err" && bad "--gpu-sorted=auto: a copy freed that won" || ok
expect 2 "--gpu-sorted takes no value, =on or =auto \(got 'yes'\)" -- "$tool" --rank 2 \
    --gpu-sorted=yes "$T/g.blco"

part host-sort-threads
# The host sort's threaded grouping (over 32768 nonzeros, modes of over 4096 rows; g.blco
# takes the one-thread sort), its parts on two devices: the CPU's fit.
if [ "$ndev" -ge 2 ]; then
    "$gen" --dims 6000x300x5000 --nnz 40000 --kind powerlaw --seed 4 -q -o "$T/g40.blco" ||
        bad "blco-gen"
    sargs="--rank 4 --iters 3 --tol 0 --seed 2 --threads 2 --json-out"
    expect 0 "" -- "$tool" $sargs "$T/g40-cpu.json" --backend cpu "$T/g40.blco"
    expect 0 "sorted copies of modes 1,2,3 on the GPUs" -- "$tool" $sargs "$T/g40-srt.json" \
        --backend cuda --gpu-sorted -v "$T/g40.blco"
    same "$(fit "$T/g40-cpu.json")" "$(fit "$T/g40-srt.json")" && ok ||
        bad "--gpu-sorted, grouped on 2 threads: fit $(fit "$T/g40-srt.json"), the CPU's $(fit "$T/g40-cpu.json")"
fi
expect 0 "" -- "$tool" $args --backend cuda --gpus 0 --gpu-sorted --fibers on -v \
    --json-out "$T/srt-fib.json" "$T/g.blco"
tail -n 1 "$T/srt-fib.json" | grep -q '"kernels":\["gpu-fibers","gpu-fibers","gpu-fibers"\]' &&
    same "$ref" "$(fit "$T/srt-fib.json")" && ok || bad "--gpu-sorted --fibers on: $(tail -n 1 "$T/srt-fib.json")"
expect 0 "a deterministic run keeps the BLCO kernel" -- "$tool" $args --backend cuda --gpus 0 \
    --gpu-sorted --deterministic -v "$T/g.blco"
expect 0 "warning: --gpu-sorted: the CPU backend runs" -- "$tool" --rank 2 --iters 1 \
    --backend cpu --gpu-sorted "$T/g.blco"
part auto-too-short
# --gpu-sorted=auto on a run too short to time every mode: no copies, said once.
expect 0 "warning: --gpu-sorted=auto: 4 iterations end before it has timed every mode" -- \
    "$tool" --rank 2 --iters 4 --tol 0 --backend cuda --gpus 0 --gpu-sorted=auto -v "$T/g.blco"
grep -q "sorted copies of mode" "$T/err" && bad "--gpu-sorted=auto, 4 iterations: copies made: $(cat "$T/err")" || ok
expect 0 "" -- "$tool" --rank 2 --iters 5 --tol 0 --backend cuda --gpus 0 --gpu-sorted=auto -v "$T/g.blco"
grep -q "sorted copies of modes 1,2,3" "$T/err" && ! grep -q "iterations end before" "$T/err" && ok ||
    bad "--gpu-sorted=auto, 5 iterations: $(cat "$T/err")"

part aminoacid
# aminoacid converges to the published fit on the GPU and on GPU + CPU. (About 110
# iterations each of the kernels that "fits" above race-checks on this tensor at rank 5: the
# emulation's race finder is off here; with it these two runs took 310 s of a 2-core fresh
# clone's ./bootstrap test, 2026-11-30.)
if [ -s "$T/amino.blco" ]; then
    for b in cuda hybrid; do
        expect 0 "converged .*fit 0\.97495" -- env BLCO_EMU_RACECHECK=0 \
            "$tool" --rank 3 --iters 500 --tol 1e-9 --backend $b "$T/amino.blco"
    done
fi

part resume
# Killed after iteration 3 on the GPU, resumed on the GPU: the checkpoint's run goes on, and
# (checkpoints make the MTTKRPs deterministic) ends with an uninterrupted run's bits.
same_out() { # DIR DIR: the same factors and lambda, byte for byte
    for f in A1 A2 A3 lambda; do
        cmp -s "$1/$f.npy" "$2/$f.npy" || return 1
    done
}
args="--rank 4 --iters 6 --tol 0 --seed 3 --backend cuda"
BLCO_CPD_KILL_AFTER_ITER=3 "$tool" $args --checkpoint "$T/ck" "$T/g.blco" >"$T/out" 2>&1 </dev/null
[ $? -eq 137 ] && ok || bad "the killed run: $(cat "$T/out")"
expect 0 "stopped at --iters 6" -- "$tool" $args --checkpoint "$T/ck" --resume \
    --json-out "$T/res.json" --out "$T/res" "$T/g.blco"
grep -q '^ *4  ' "$T/out" && ! grep -q '^ *3  ' "$T/out" && ok ||
    bad "the resumed run did not start at iteration 4: $(cat "$T/out")"
expect 0 "" -- "$tool" $args --deterministic --json-out "$T/str.json" --out "$T/str" "$T/g.blco"
same "$(fit "$T/str.json")" "$(fit "$T/res.json")" && ok ||
    bad "resumed fit $(fit "$T/res.json"), straight $(fit "$T/str.json")"
same_out "$T/res" "$T/str" && ok || bad "the resumed GPU run's factors differ from the straight run's"

part deterministic
# --deterministic streamed over every device (a limit that keeps a quarter resident, as
# above): the same bits twice, and the CPU's fit.
args="--rank 5 --iters 8 --tol 0 --seed 2"
expect 0 "" -- "$tool" $args --backend cpu --json-out "$T/dc.json" "$T/g.blco"
"$tool" $args --backend cuda --deterministic --gpu-mem-limit 4K "$T/g.blco" >"$T/out" 2>&1 </dev/null
dneed=$(sed -n 's/.* needs \([0-9]*\) bytes .*/\1/p' "$T/out")
grep -q "deterministic sums" "$T/out" && [ -n "$dneed" ] && ok || bad "the need: $(cat "$T/out")"
for k in 1 2; do
    expect 0 "" -- "$tool" $args --backend cuda --deterministic \
        --gpu-mem-limit $((${dneed:-0} + 29953 * 4)) \
        --json-out "$T/d$k.json" --out "$T/d$k" "$T/g.blco"
done
same_out "$T/d1" "$T/d2" && ok || bad "two --deterministic runs gave other bits"
same "$(fit "$T/d1.json")" "$(fit "$T/dc.json")" && ok ||
    bad "--deterministic fit $(fit "$T/d1.json"), the CPU's $(fit "$T/dc.json")"
if [ "$ndev" -ge 2 ]; then
    n1=$(tail -n 1 "$T/d1.json" | sed -n 's/.*"device":1,[^}]*"batches":\([0-9]*\).*/\1/p')
    [ "${n1:-0}" -gt 0 ] && ok || bad "the second device computed no batch: $(tail -n 1 "$T/d1.json")"
fi

part signals
# SIGINT and SIGTERM stop a GPU run between batches: exit 130/143, the final record written.
for b in "INT 130 cuda" "TERM 143 hybrid"; do
    set -- $b
    rm -f "$T/s.jsonl"
    "$tool" --rank 4 --iters 100000 --tol 0 --backend $3 --stats "$T/s.jsonl" \
        --stats-interval 0.05 --no-progress "$T/g.blco" >/dev/null 2>"$T/err" </dev/null &
    pid=$!
    n=0
    while [ $n -lt 600 ] && ! grep -q '"passes":[1-9]' "$T/s.jsonl" 2>/dev/null; do
        sleep 0.05
        n=$((n + 1))
    done
    kill -"$1" $pid
    (sleep 20; kill -KILL $pid) >/dev/null 2>&1 &
    dog=$!
    wait $pid
    st=$?
    kill $dog 2>/dev/null
    [ $st -eq "$2" ] && grep -q "stopped by SIG$1" "$T/err" &&
        tail -n 1 "$T/s.jsonl" | grep -q '"type":"final".*"error":"canceled"' && ok ||
        bad "SIG$1 to blco-cpd --backend $3: exit $st: $(cat "$T/err"); $(tail -n 1 "$T/s.jsonl")"
done

part device-memory
# Too little device memory: the need in bytes, and which limit to raise.
expect 1 "needs [0-9]+ bytes .* of device memory.*--gpu-mem-limit" -- \
    "$tool" --rank 8 --iters 2 --backend cuda --gpu-mem-limit 64K "$T/g.blco"
for j in "$T"/g-cuda*.json "$T"/g-hybrid*.json; do
    grep -q '"pageable_async_copies":0,' "$j" && ok || bad "$j: pageable async copies: $(cat "$j")"
done
finish
