#!/bin/sh
# perf/bench_gpu on the SIMT emulation (the emulated build only): it refuses to time the
# emulation unless told (--allow-emulation 1), and then runs its own logic end to end on a
# small tensor: every mode with the BLCO kernel (both chunk schedules), on its fiber copies
# for each chunk size and on its sorted copy, each result checked against the CPU kernel.
# The times are the emulation's, never a GPU's.
# usage: test_bench_gpu_emu.sh BENCH_GPU DATA_DIR BLCO_PACK
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"
B=$1 D=$2 P=$3
expect_run 77 "SIMT emulation" any -- "$B" --nnz 1000 --stream-dir none

# Rel. differences from the CPU kernel: every one printed, all below 1e-12.
check_diffs() { # WHAT COUNT
    n=$(grep -c "\"what\":\"$1\"" "$T/out")
    [ "$n" -eq "$2" ] && ok || bad "$n '$1' records, expected $2: $(cat "$T/out" "$T/err")"
    big=$(grep "\"what\":\"$1\"" "$T/out" | sed -n 's/.*"max_rel_diff_vs_cpu":\([^,}]*\).*/\1/p' |
        awk '$1 + 0 > 1e-12 || $1 + 0 < 0' | wc -l)
    [ "$big" -eq 0 ] && ok || bad "$1: $big results off the CPU's: $(grep "$1" "$T/out")"
    d=$(grep "\"what\":\"$1\"" "$T/out" | grep -c max_rel_diff_vs_cpu)
    [ "$d" -eq "$2" ] && ok || bad "$1: $d of $2 records checked against the CPU"
}

expect_run 0 '"emulated":true' any -- "$B" --allow-emulation 1 --shape nell2 --nnz 20000 \
    --reps 1 --bw-bytes 1M --stream-dir none --fiber-chunks 1,37,256
check_diffs mode 3
check_diffs mode_fibers 9
check_diffs mode_sorted 3
# both chunk schedules, each mode: the interleaved output checked against the CPU's too
n=$(grep -c '"what":"mode_schedule"' "$T/out")
[ "$n" -eq 3 ] && ok || bad "$n schedule records, expected 3"
big=$(grep '"what":"mode_schedule"' "$T/out" |
    sed -n 's/.*"interleaved_max_rel_diff_vs_cpu":\([^,}]*\).*/\1/p' |
    awk '$1 + 0 > 1e-12 || $1 + 0 < 0' | wc -l)
d=$(grep '"what":"mode_schedule"' "$T/out" | grep -c '"interleaved_max_rel_diff_vs_cpu"')
[ "$big" -eq 0 ] && [ "$d" -eq 3 ] && ok || bad "interleaved schedule: $d checked, $big off"
n=$(grep -c '"what":"summary_fibers"' "$T/out")
[ "$n" -eq 3 ] && ok || bad "$n fiber summaries, expected 3"
grep '"what":"mode_fibers"' "$T/out" | grep -q '"chunk":37,' && ok || bad "no chunk 37 record"

# A real tensor from a file, and the options' checks.
expect_run 0 '"shape":"tiny3.tns"' any -- "$B" --allow-emulation 1 --tensor "$D/tiny3.tns" \
    --reps 1 --bw-bytes 1M --stream-dir none
check_diffs mode_fibers 3
expect_run 0 "" any -- "$B" --allow-emulation 1 --tensor "$D/tiny3.tns" --reps 1 --bw-bytes 1M \
    --stream-dir none --fibers 0
grep -q mode_fibers "$T/out" && bad "--fibers 0 still ran the fiber copies" || ok
expect_run 0 "" any -- "$B" --allow-emulation 1 --tensor "$D/tiny3.tns" --reps 1 --bw-bytes 1M \
    --stream-dir none --fibers 0 --sorted 0 --schedules 0
grep -qE 'mode_sorted|mode_schedule' "$T/out" && bad "--sorted 0 --schedules 0 still ran them" || ok
# the same tensor as a .blco file
"$P" -q "$D/tiny3.tns" -o "$T/tiny3.blco" && ok || bad "blco-pack tiny3.tns"
expect_run 0 '"shape":"tiny3.blco"' any -- "$B" --allow-emulation 1 --tensor "$T/tiny3.blco" \
    --reps 1 --bw-bytes 1M --stream-dir none
check_diffs mode_fibers 3
# The streamed pass with values of 3 decimal places: --codec gpu stores them as decimals
# (decoded on the device, smaller than the delta file's plain values), zstd by the CPU.
expect_run 0 '"what":"stream"' any -- "$B" --allow-emulation 1 --shape nell2 --nnz 2000 \
    --stream-nnz 20000 --stream-places 3 --reps 1 --bw-bytes 1M --fibers 0 --sorted 0 \
    --schedules 0 --check 0 --stream-dir "$T"
rec() { grep '"what":"stream"' "$T/out" | grep "\"codec\":\"$1\"" | sed -n "s/.*\"$2\":\([^,}]*\).*/\1/p"; }
[ "$(grep -c '"what":"stream".*"value_places":3' "$T/out")" -eq 3 ] && ok ||
    bad "three streamed records with 3 places: $(grep stream "$T/out")"
[ "$(rec gpu host_decoded_batches)" = 0 ] && [ "$(rec gpu gpu_decoded_batches)" -gt 0 ] &&
    [ "$(rec zstd gpu_decoded_batches)" = 0 ] && ok || bad "where the batches were decoded: $(grep stream "$T/out")"
awk -v g="$(rec gpu file_bytes_per_nnz)" -v d="$(rec delta file_bytes_per_nnz)" \
    'BEGIN { exit !(g > 0 && g < 0.75 * d) }' && ok ||
    bad "the decimal file is not smaller than the plain one: $(grep stream "$T/out")"
expect_run 2 "stream-places" any -- "$B" --stream-places 16
expect_run 2 "fiber-chunks" any -- "$B" --fiber-chunks 0
expect_run 2 "fiber-chunks" any -- "$B" --fiber-chunks 5,x
expect_run 1 "no-such.tns" any -- "$B" --allow-emulation 1 --tensor "$D/no-such.tns" --bw-bytes 1M \
    --stream-dir none
finish
