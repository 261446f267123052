#!/bin/bash
# The GPU paths' error handling, by fault injection in the SIMT emulation (BLCO_EMU_FAIL,
# docs/gpu-emulation.md): each run makes one CUDA call fail as a GPU's may (an allocation,
# a stream, an event or page-locking refused; a launch refused; a kernel that faults
# while it runs, a sticky error the later calls return), for every such call of a job in
# turn: MTTKRP streamed and resident, hybrid, fibers in memory, CP-ALS and Tucker, on one
# and two devices. Each run must end within a minute (no hang) by exit() (no signal,
# no sanitizer report) and either
#   - succeed with the right answer (--check, or the fit of the run without a fault) and no
#     "error:" line (the optional buffers, residency and page-locking of the read ring fall
#     back), or
#   - exit 1 with a last line that names the GPU-side cause (not "raise --mem-limit": the
#     host's budget is ample), whole (not ending in the "..." of a message cut at the
#     diag's size), and at most one "error:" line from the CUDA layer (a sticky error
#     is logged once, not by every cleanup call after it).
# Skips (77) where BLCO_EMU_FAIL does nothing: a build with a real GPU or without CUDA.
# usage: test_gpu_faults.sh BLCO-MTTKRP BLCO-CPD BLCO-TUCKER BLCO-GEN [--all]
# --all tries every call, with the race finder on in every run. By default events (a
# hundred or so per job) and launches (up to 80 per job, the same kernels again in each
# iteration) are sampled: the first 8 of each and every 9th, the last, and for launches
# also each kernel's first and last launch (BLCO_EMU_FAIL=count says which); and one run
# in 4 keeps the emulation's race finder on (the run without a fault has it on too): this
# test is for the error paths, the race finder costs the Tucker runs 4x (1000 runs took
# about 16 minutes alone on 2 cores, over the test's 900 s, 2026-11-29; 825 runs now 5.5).
set -u
mttkrp=$1
cpd=$2
tucker=$3
gen=$4
all=${5:-}
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

"$gen" -d 300x200x100 -n 20000 -o "$T/t.blco" >/dev/null 2>&1 || bad "blco-gen .blco"
"$gen" -d 30x40x20 -n 2000 -o "$T/s.tns" >/dev/null 2>&1 || bad "blco-gen .tns"

counts=$(BLCO_EMU_FAIL=count "$mttkrp" --backend cuda --rank 2 --mode 1 "$T/t.blco" 2>&1 >/dev/null |
    sed -n 's/^blco-emu: BLCO_EMU_FAIL=count: //p')
if [ -z "$counts" ]; then
    echo "no SIMT emulation with fault injection answers (a real GPU, or none): skipped"
    exit 77
fi

runs=0 fired=0
# The final fit a run printed ("... fit 0.0015596240" ending a line).
fit_of() { grep -Eo "fit [0-9][0-9.e+-]*\$" "$1" | tail -1; }
# sweep NAME CHECK -- COMMAND...: every injection point of COMMAND (see the header). CHECK
# is `check` (the tool's --check decides) or `fit` (the final fit must be the one of the run
# without a fault).
sweep() {
    name=$1 how=$2
    shift 3
    "$@" >"$T/base.out" 2>"$T/base.err"
    if [ $? -ne 0 ]; then
        bad "$name: the run without a fault failed: $(tail -3 "$T/base.err")"
        return
    fi
    want_fit=$(fit_of "$T/base.out")
    if [ "$how" = fit ] && [ -z "$want_fit" ]; then
        bad "$name: no final fit in: $(tail -3 "$T/base.out")"
        return
    fi
    local c ends
    BLCO_EMU_FAIL=count "$@" 2>"$T/count" >/dev/null
    read -ra c <<<"$(sed -n 's/^blco-emu: BLCO_EMU_FAIL=count: //p' "$T/count")"
    [ ${#c[@]} -gt 0 ] || bad "$name: no call counts"
    ends=" $(sed -n "s/^blco-emu: BLCO_EMU_FAIL=count, each kernel's first and last launch: //p" \
        "$T/count") "
    [ "$ends" != "  " ] || bad "$name: no kernel's first and last launch"
    local i k n fn t0=$SECONDS r0=$runs
    for ((i = 0; i < ${#c[@]}; i += 2)); do
        fn=${c[i]} n=${c[i + 1]}
        for ((k = 1; k <= n; k++)); do
            if [ -z "$all" ] && [ $k -gt 8 ] && [ $k -ne $n ] && [ $((k % 9)) -ne 0 ]; then
                case $fn in
                cudaEventCreate) continue ;;
                cudaLaunchKernel | kernel) [[ $ends == *" $k "* ]] || continue ;;
                esac
            fi
            one "$name" "$how" "$fn:$k" "$want_fit" "$@"
        done
    done
    echo "$name: $((runs - r0)) runs, $((SECONDS - t0)) s"
}

one() {
    name=$1 how=$2 spec=$3 want_fit=$4
    shift 4
    runs=$((runs + 1)) fired=$((fired + 1))
    local rc_on=0
    [ -n "$all" ] || [ $((runs % 4)) -eq 0 ] && rc_on=1
    BLCO_EMU_RACECHECK=$rc_on BLCO_EMU_FAIL=$spec timeout 60 "$@" >"$T/out" 2>"$T/err" </dev/null
    rc=$?
    what="$name, BLCO_EMU_FAIL=$spec: exit $rc"
    last=$(tail -1 "$T/err")
    nerr=$(grep -c "error: CUDA" "$T/err")
    if [ $rc -eq 124 ]; then
        bad "$what: still running after 60 s (a hang?)"
    elif [ $rc -ge 128 ]; then
        bad "$what: killed by signal $((rc - 128)): $(tail -5 "$T/err")"
    elif grep -Eq "ERROR: [A-Za-z]*Sanitizer|: runtime error: |blco-emu: kernel .*block \(" "$T/err"; then
        bad "$what: $(grep -E -m3 -A3 "ERROR: [A-Za-z]*Sanitizer|: runtime error: |blco-emu: kernel .*block \(" "$T/err")"
    elif ! grep -q "BLCO_EMU_FAIL=$spec: this" "$T/err"; then
        ok # fewer such calls this time (event pools grow with timing): nothing was injected
        fired=$((fired - 1))
    elif [ $rc -eq 0 ]; then
        if grep -q "error:" "$T/err"; then
            bad "$what, but an error was logged: $(grep "error:" "$T/err")"
        elif [ "$how" = fit ] && [ "$(fit_of "$T/out")" != "$want_fit" ]; then
            bad "$what, but '$(fit_of "$T/out")' instead of '$want_fit'"
        else
            ok
        fi
    elif [ $rc -ne 1 ]; then
        bad "$what: $last"
    elif echo "$last" | grep -q "raise --mem-limit\|memory budget too small"; then
        bad "$what: the host's budget blamed: $last"
    elif ! echo "$last" | grep -Eq "^blco-[a-z]+: .*(GPU|CUDA|device memory|launch|illegal memory)"; then
        bad "$what: the last line does not name the GPU's failure: $last"
    elif echo "$last" | grep -q '\.\.\.$'; then
        bad "$what: the message was cut at the diag's size: $last"
    elif [ "$nerr" -gt 1 ]; then
        bad "$what: $nerr CUDA errors logged (a sticky error once): $(grep "error: CUDA" "$T/err")"
    else
        ok
    fi
}

sweep "streamed MTTKRP" check -- "$mttkrp" --backend cuda --residency none --check --rank 8 "$T/t.blco"
sweep "resident MTTKRP" check -- "$mttkrp" --backend cuda --check --rank 8 "$T/t.blco"
sweep "hybrid MTTKRP" check -- "$mttkrp" --backend hybrid --residency none --check --rank 8 "$T/t.blco"
sweep "fibers in memory" check -- "$mttkrp" --backend cuda --kernel fibers --check --mode all \
    --rank 9 "$T/s.tns"
sweep "CP-ALS" fit -- "$cpd" --backend cuda --rank 4 --iters 3 "$T/t.blco"
sweep "Tucker" fit -- "$tucker" --backend cuda --ranks 3x3x3 --iters 2 "$T/t.blco"
export BLCO_EMU_DEVICES=2
sweep "streamed MTTKRP, two devices" check -- "$mttkrp" --backend cuda --residency none --check \
    --rank 8 --slot-size 65536 "$T/t.blco"
sweep "CP-ALS, two devices" fit -- "$cpd" --backend cuda --rank 4 --iters 2 "$T/t.blco"
# Most runs must have had their call fail (else the injection, not the code, is broken).
[ $((fired * 10)) -ge $((runs * 9)) ] && ok ||
    bad "only $fired of $runs runs had the call BLCO_EMU_FAIL named fail"
echo "$runs runs, $fired with one CUDA call failing"
finish
