#!/bin/sh
# blco-cpd end to end: options, errors and exit codes; an exact low-rank tensor fitted;
# a run killed right after a checkpoint (test hook BLCO_CPD_KILL_AFTER_ITER) and resumed
# gives the same factors as an uninterrupted run; --out, --json and --json-out outputs.
# usage: test_blco_cpd.sh BLCO-CPD BLCO-GEN BLCO-PACK
set -u
tool=$1
gen=$2
pack=$3
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

# ---- help, version, usage errors (exit 2) ----
expect 0 "Usage: blco-cpd" -- "$tool" --help
for word in --rank --iters --tol --seed --init --out --threads --mem-limit --checkpoint \
            --resume --json --json-out --fibers blco-pack; do
    grep -q -- "$word" "$T/out" && ok || bad "--help does not mention $word"
done
expect 0 "blco-cpd [0-9]" -- "$tool" --version
expect 2 "no input tensor" -- "$tool" --rank 3
expect 2 "--rank is required" -- "$tool" x.blco
expect 2 "--rank must be between" -- "$tool" --rank 0 x.blco
expect 2 "unknown option" -- "$tool" --bogus --rank 2 x.blco
expect 2 "--resume needs --checkpoint" -- "$tool" --rank 2 --resume x.blco
expect 2 "exclude each other" -- "$tool" --rank 2 --resume --checkpoint c --init d x.blco
expect 2 "--tol must be" -- "$tool" --rank 2 --tol -1 x.blco
expect 2 "--iters must be between" -- "$tool" --rank 2 --iters 0 x.blco
expect 2 "--mem-limit" -- "$tool" --rank 2 --mem-limit 12Q x.blco
expect 2 "--fibers must be auto, on or off" -- "$tool" --rank 2 --fibers yes x.blco

expect 2 "--stats - and --json both write standard output" -- "$tool" --rank 2 --stats - \
    --json x.blco
expect 2 "--json and --json-out exclude each other" -- "$tool" --rank 2 --json --json-out j x.blco
# --json is a flag, as in blco-pack, blco-mttkrp and blco-info (issue 33: it took the next
# argument, --no-progress, for a file name); a file name after it is a usage error.
expect 2 "--json takes no file name: it prints on standard output; --json-out FILE" -- \
    "$tool" --rank 2 --json out.jsonl x.blco

# ---- input errors (exit 1) ----
expect 1 "nope.blco: cannot open: No such file" -- "$tool" --rank 2 "$T/nope.blco"
grep -q "nope.blco: .*nope.blco" "$T/err" && bad "the path twice: $(cat "$T/err")" || ok
printf '1 1 1 1.0\n2 2 2 x\n' >"$T/bad.tns"
mkdir "$T/tmp"
TMPDIR="$T/tmp" expect 1 "bad.tns:2: .*not a number" -- "$tool" --rank 2 "$T/bad.tns"
[ -z "$(ls -A "$T/tmp")" ] && ok || bad "a failed pack left $(ls -A "$T/tmp")"

"$gen" --kind lowrank --rank 3 --dims 40x30x20 --nnz 2000 --seed 5 -q -o "$T/x.blco" ||
    bad "blco-gen failed"
# an output that is the input: refused before it is opened (and truncated)
cp "$T/x.blco" "$T/self.blco"
for o in --stats --json-out --prom; do
    expect 1 "$o .*self.blco is the input file .*self.blco itself" -- "$tool" --rank 2 $o "$T/self.blco" \
        "$T/self.blco"
    cmp -s "$T/x.blco" "$T/self.blco" && ok || bad "$o INPUT wrote over the input"
done
"$gen" --kind uniform --dims 50x40x30 --nnz 3000 --seed 2 -q -o "$T/u.blco" ||
    bad "blco-gen failed"
# ---- OpenMP waits (the test setup sets OMP_WAIT_POLICY=passive for every test) ----
# Unset, a run from memory spins a while before it sleeps; a streamed one sleeps at once;
# the user's own setting stays.
expect 0 "OpenMP waits: OMP_WAIT_POLICY=.unset. GOMP_SPINCOUNT=100000" -- \
    env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$tool" --rank 2 --iters 2 -v "$T/x.blco"
expect 0 "OpenMP waits: OMP_WAIT_POLICY=passive GOMP_SPINCOUNT=.unset." -- \
    env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$tool" --rank 2 --iters 2 -v --residency none \
    "$T/x.blco"
expect 0 "OpenMP waits: OMP_WAIT_POLICY=active GOMP_SPINCOUNT=.unset." -- \
    env -u GOMP_SPINCOUNT OMP_WAIT_POLICY=active "$tool" --rank 2 --iters 2 -v "$T/x.blco"
expect 1 "--init $T/nope: not a folder" -- "$tool" --rank 2 --init "$T/nope" "$T/x.blco"
expect 1 "too small to stream this file.*raise --mem-limit" -- "$tool" --rank 2 --mem-limit 16K "$T/x.blco"
"$gen" --dims 200000x100x10 --nnz 1000 -q -o "$T/long.blco" || bad "blco-gen failed"
expect 1 "CP-ALS itself takes .* of the budget for the factors and workspace; raise --mem-limit" -- \
    "$tool" --rank 16 --mem-limit 2M "$T/long.blco"
mkdir "$T/empty"
expect 1 "holds no checkpoint" -- "$tool" --rank 2 --checkpoint "$T/empty" --resume "$T/x.blco"

# ---- .tns text (plain, zstd, or named .blco), packed first into a temporary .blco that is
# gone however the tool ends (issue 34): the same run as on the packed file ----
"$gen" --kind lowrank --rank 3 --dims 40x30x20 --nnz 2000 --seed 5 -q -o "$T/x.tns" ||
    bad "blco-gen .tns failed"
cp "$T/x.tns" "$T/text.blco"
files="$T/x.tns $T/text.blco"
command -v zstd >/dev/null 2>&1 && zstd -q "$T/x.tns" -o "$T/x.tns.zst" && files="$files $T/x.tns.zst"
pack=$(dirname "$tool")/blco-pack
"$pack" "$T/x.tns" -o "$T/xt.blco" -q && "$tool" --rank 3 --iters 5 --tol 0 -q --out "$T/o-blco" \
    "$T/xt.blco" >/dev/null 2>&1 || bad "blco-pack and blco-cpd of x.tns failed"
fit() { sed -n 's/.*"fit":\([-0-9.e+]*\).*/\1/p' "$1/summary.json"; }
n=0
for f in $files; do
    n=$((n + 1))
    TMPDIR="$T/tmp" expect 0 "" -- "$tool" --rank 3 --iters 5 --tol 0 --out "$T/o$n" "$f"
    grep -q "${f##*/} is text: packing it into a temporary .blco in $T/tmp, deleted when done" \
        "$T/err" && ok || bad "$f: $(cat "$T/err")"
    [ -z "$(ls -A "$T/tmp")" ] && ok || bad "$f: left $(ls -A "$T/tmp")"
    [ -n "$(fit "$T/o$n")" ] && [ "$(fit "$T/o$n")" = "$(fit "$T/o-blco")" ] && ok ||
        bad "$f: fit $(fit "$T/o$n"), the packed file's $(fit "$T/o-blco")"
done
# killed outright (after a checkpoint): nothing left in TMPDIR; resumed from the text
TMPDIR="$T/tmp" BLCO_CPD_KILL_AFTER_ITER=2 "$tool" --rank 3 --iters 5 --tol 0 -q \
    --checkpoint "$T/ck-tns" "$T/x.tns" >/dev/null 2>&1
[ -z "$(ls -A "$T/tmp")" ] && ok || bad "kill -9: left $(ls -A "$T/tmp")"
TMPDIR="$T/tmp" expect 0 "" -- "$tool" --rank 3 --iters 5 --tol 0 --checkpoint "$T/ck-tns" \
    --resume --out "$T/o-resumed" -q "$T/x.tns"
[ "$(fit "$T/o-resumed")" = "$(fit "$T/o-blco")" ] && ok ||
    bad "resumed from .tns: fit $(fit "$T/o-resumed"), not $(fit "$T/o-blco")"

# ---- an exact rank-3 tensor ----
expect 0 "converged after [0-9]+ iterations .*fit 0\.99" -- \
    "$tool" --rank 3 --iters 300 --tol 1e-9 --out "$T/fit" "$T/x.blco"
for f in A1.npy A2.npy A3.npy lambda.npy summary.json; do
    [ -s "$T/fit/$f" ] && ok || bad "--out wrote no $f"
done
grep -q '"converged":true' "$T/fit/summary.json" && ok || bad "summary.json: not converged"
expect 0 "0\.[0-9]+ +[-+][0-9.]+e[-+][0-9]+ .*\+" -- "$tool" --rank 2 --iters 3 "$T/u.blco"
expect 0 "stopped at --iters 3 without converging" -- "$tool" --rank 2 --iters 3 --tol 0 "$T/u.blco"

# ---- --tol is relative to the fit (issue 34): on random data, whose fit stays near 0 and
# moves by about 1e-6 an iteration, an absolute 1e-5 claimed convergence after 2
# iterations; the run goes on, and the fit near 0 gets a warning. A structured tensor
# converges with a tolerance near its fit's own accuracy and gets no warning. ----
"$gen" --kind powerlaw --dims 20000x15000x10000 --nnz 100K --skew 1.5 -q -o "$T/pl.blco" ||
    bad "blco-gen powerlaw failed"
expect 0 "stopped at --iters 6 without converging .*tol 1e-05 x fit" -- \
    "$tool" --rank 4 --iters 6 --tol 1e-5 "$T/pl.blco"
grep -q "^blco-cpd: warning: fit [0-9.e-]* is near 0: the rank-4 CP model explains almost none" \
    "$T/err" && ok || bad "no warning on a fit near 0: $(cat "$T/err")"
expect 0 "" -- "$tool" --rank 4 --iters 6 --tol 1e-5 -q "$T/pl.blco"
grep -q "warning: fit .* is near 0" "$T/err" && ok || bad "-q hid the warning on a fit near 0"
expect 0 "converged after [0-9]+ iterations \(\|delta\| < 1e-06 x fit\)" -- \
    "$tool" --rank 3 --iters 300 --tol 1e-6 "$T/x.blco"
grep -q "near 0" "$T/err" && bad "a warning on a good fit: $(cat "$T/err")" || ok

# ---- killed after iteration 4, resumed: the same as straight through ----
args="--rank 4 --iters 9 --tol 0 --threads 1 --seed 3"
expect 0 "" -- "$tool" $args --out "$T/straight" "$T/u.blco"
BLCO_CPD_KILL_AFTER_ITER=4 "$tool" $args --checkpoint "$T/ck" --out "$T/killed" "$T/u.blco" \
    >"$T/out" 2>&1 </dev/null
st=$?
[ "$st" -eq 137 ] && ok || bad "the killed run exited $st, not 137 (SIGKILL)"
[ ! -e "$T/killed" ] && ok || bad "the killed run wrote --out"
grep -q '^iteration 4$' "$T/ck/state" && ok || bad "checkpoint state: $(cat "$T/ck/state")"
ls "$T"/ck/iter-000004.*/A1.npy >/dev/null 2>&1 && ok || bad "no factors in the checkpoint"
# beside it at most the folder of iteration 5, whose write was in flight (the hook kills
# at the end of iteration 5 once iteration 4's checkpoint is complete)
[ -z "$(ls "$T/ck" | grep iter- | grep -v '^iter-00000[45]\.')" ] && ok ||
    bad "old checkpoint folders left: $(ls "$T/ck")"
expect 1 "rank 4, not 3" -- "$tool" --rank 3 --checkpoint "$T/ck" --resume "$T/u.blco"
expect 1 "another tensor" -- "$tool" --rank 4 --checkpoint "$T/ck" --resume "$T/x.blco"
expect 0 "stopped at --iters 9" -- \
    "$tool" $args --checkpoint "$T/ck" --resume --out "$T/resumed" --json-out "$T/r.jsonl" "$T/u.blco"
grep -q '^ *5  ' "$T/out" && ! grep -q '^ *4  ' "$T/out" && ok ||
    bad "the resumed run did not start at iteration 5: $(cat "$T/out")"
[ "$(ls "$T/ck" | grep -c iter-)" -eq 1 ] && ls "$T"/ck/iter-000009.*/A1.npy >/dev/null 2>&1 &&
    ok || bad "after the resumed run the checkpoint holds: $(ls "$T/ck")"
# Killed at arbitrary moments (mid-iteration, mid-checkpoint): whatever is on disk resumes
# to the same result, or holds no checkpoint yet.
"$gen" --kind powerlaw --skew 2 --dims 3000x2000x1000 --nnz 300K --seed 4 -q -o "$T/p.blco" ||
    bad "blco-gen failed"
pargs="--rank 8 --iters 12 --tol 0 --threads 1"
expect 0 "" -- "$tool" $pargs --out "$T/pstraight" "$T/p.blco"
for delay in 0.05 0.1 0.2 0.4; do
    rm -rf "$T/pk"
    # killed by this shell and waited for: `timeout -s KILL` kills itself too and can return
    # while the run still exits and holds the folder's lock
    "$tool" $pargs --checkpoint "$T/pk" "$T/p.blco" >/dev/null 2>&1 </dev/null &
    pid=$!
    sleep "$delay"
    kill -KILL $pid 2>/dev/null
    wait $pid
    if [ -e "$T/pk/state" ]; then
        expect 0 "" -- "$tool" $pargs --checkpoint "$T/pk" --resume --out "$T/presumed" "$T/p.blco"
        for f in A1.npy A2.npy A3.npy lambda.npy; do
            cmp -s "$T/pstraight/$f" "$T/presumed/$f" && ok ||
                bad "killed after ${delay}s and resumed: $f differs"
        done
    else
        expect 1 "holds no checkpoint" -- "$tool" $pargs --checkpoint "$T/pk" --resume "$T/p.blco"
    fi
done
expect 0 "nothing to do" -- "$tool" $args --checkpoint "$T/ck" --resume "$T/u.blco"
# On 2 threads, the tensor held in memory after the first pass (issue 33: the pass that
# read it split the work between the threads otherwise than the passes from memory, and a
# resumed run, whose first pass is another iteration's, differed in the last bit): a run of
# 2 iterations resumed to 4 gives the bytes of a run of 4, with the BLCO kernel and the
# fiber copies alike. Segments of 4096 nonzeros: the first pass takes many batches.
"$gen" --kind powerlaw --dims 2000x1500x1000 --nnz 200K --seed 5 -q -o "$T/t2.tns" &&
    "$pack" "$T/t2.tns" --segment-nnz 4096 -q -o "$T/t2.blco" || bad "blco-gen | blco-pack"
for fb in off auto; do
    t2="--rank 8 --tol 0 --threads 2 --fibers $fb"
    rm -rf "$T/t2k"
    expect 0 "" -- "$tool" $t2 --iters 4 -q --out "$T/t2s" "$T/t2.blco"
    expect 0 "" -- "$tool" $t2 --iters 2 -q --checkpoint "$T/t2k" "$T/t2.blco"
    expect 0 "" -- "$tool" $t2 --iters 4 -q --checkpoint "$T/t2k" --resume --out "$T/t2r" "$T/t2.blco"
    for f in A1.npy A2.npy A3.npy lambda.npy; do
        cmp -s "$T/t2s/$f" "$T/t2r/$f" && ok || bad "--threads 2 --fibers $fb, resumed: $f differs"
    done
done
# Fiber copies forced on and off: the kernels the summary names, and the same fit history
# to 1e-9 (the kernels sum in other orders); killed and resumed with them on, the same bits.
for fb in on off; do
    expect 0 "" -- "$tool" $pargs --fibers $fb --out "$T/fib-$fb" "$T/p.blco"
done
grep -q '"kernels":\["fibers","fibers","fibers"\]' "$T/fib-on/summary.json" && ok ||
    bad "--fibers on: $(grep -o '"kernels":[^]]*]' "$T/fib-on/summary.json")"
grep -q '"kernels":\["[a-z]*","[a-z]*","[a-z]*"\]' "$T/fib-off/summary.json" &&
    ! grep -q '"kernels":[^]]*fibers' "$T/fib-off/summary.json" && ok ||
    bad "--fibers off: $(grep -o '"kernels":[^]]*]' "$T/fib-off/summary.json")"
rm -rf "$T/fk"
BLCO_CPD_KILL_AFTER_ITER=5 "$tool" $pargs --fibers on --checkpoint "$T/fk" "$T/p.blco" \
    >/dev/null 2>&1 </dev/null
expect 0 "" -- "$tool" $pargs --fibers on --checkpoint "$T/fk" --resume --out "$T/fib-resumed" \
    "$T/p.blco"
for f in A1.npy A2.npy A3.npy lambda.npy; do
    cmp -s "$T/fib-on/$f" "$T/fib-resumed/$f" && ok || bad "--fibers on, resumed: $f differs"
done
abs_tool=$(cd "$(dirname "$tool")" && pwd)/$(basename "$tool")
(cd "$T" && "$abs_tool" $args --json --no-progress u.blco >"$T/out" 2>"$T/err" </dev/null) && ok ||
    bad "--json --no-progress: $(cat "$T/err")"
grep -q '^ *1  ' "$T/out" && bad "--json also printed the table" || ok
[ -e "$T/--no-progress" ] && bad "--json wrote a file named --no-progress" || ok

# Results compared with numpy: bit for bit (same thread count), and the JSON is valid.
py=
for p in python3 /usr/bin/python3; do
    if "$p" -c 'import numpy' 2>/dev/null; then py=$p; break; fi
done
if [ -n "$py" ]; then
    if "$py" - "$T/straight" "$T/resumed" "$T/r.jsonl" "$T/out" <<'PY'
import sys, json, numpy as np
a, b, jl, js = sys.argv[1:]
for f in ("A1.npy", "A2.npy", "A3.npy", "lambda.npy"):
    x, y = np.load(f"{a}/{f}"), np.load(f"{b}/{f}")
    if x.shape != y.shape or not np.array_equal(x, y):
        sys.exit(f"{f}: resumed differs from straight, max diff {np.abs(x - y).max()}")
sa, sb = json.load(open(f"{a}/summary.json")), json.load(open(f"{b}/summary.json"))
if sa["fit_history"] != sb["fit_history"] or sa["iterations"] != 9 or sb["resumed_from"] != 4:
    sys.exit(f"summaries differ: {sa} {sb}")
lines = [json.loads(l) for l in open(jl)]
if [l.get("iteration") for l in lines[:-1]] != [5, 6, 7, 8, 9] or lines[-1]["iterations"] != 9:
    sys.exit(f"--json lines: {lines}")
lines = [json.loads(l) for l in open(js)]
if len(lines) != 10 or lines[-1]["fit"] != sa["fit"]:
    sys.exit("--json differs from the straight run")
A = [np.load(f"{a}/A{n}.npy") for n in (1, 2, 3)]
if not all(np.allclose((M * M).sum(0), 1) for M in A):
    sys.exit("columns are not of unit norm")
PY
    then ok; else bad "results differ (see above)"; fi
    # --init DIR: factors of the wrong shape, then good ones.
    mkdir "$T/init"
    "$py" -c "import numpy as np, sys
d = sys.argv[1]
np.save(d + '/A1.npy', np.ones((50, 2))); np.save(d + '/A2.npy', np.ones((40, 3)))
np.save(d + '/A3.npy', np.ones((30, 2)))" "$T/init"
    expect 1 "A2.npy: shape 40 x 3, expected 40 x 2" -- "$tool" --rank 2 --init "$T/init" "$T/u.blco"
    "$py" -c "import numpy as np, sys; np.save(sys.argv[1] + '/A2.npy', np.ones((40, 2)))" "$T/init"
    expect 0 "init from" -- "$tool" --rank 2 --iters 2 --init "$T/init" "$T/u.blco"
else
    echo "note: no python3 with numpy; the numpy comparisons were skipped"
    cmp -s "$T/straight/A1.npy" "$T/resumed/A1.npy" && ok || bad "resumed A1.npy differs"
fi
if [ -n "$py" ]; then
    "$py" - "$T/fib-on/summary.json" "$T/fib-off/summary.json" <<'PY' && ok || bad "--fibers on/off fits differ"
import json, sys
a, b = (json.load(open(f))["fit_history"] for f in sys.argv[1:])
if len(a) != len(b) or max(abs(x - y) for x, y in zip(a, b)) > 1e-9:
    sys.exit(f"fit histories: {a} {b}")
PY
fi
# ---- --stats -: standard output holds JSON Lines only, the table goes to stderr ----
expect 0 "" -- "$tool" --rank 2 --iters 3 --tol 0 --no-progress --stats - "$T/x.blco"
grep -qv '^{"type":' "$T/out" && bad "--stats -: not only records on stdout: $(cat "$T/out")" || ok
grep -q '^{"type":"final"' "$T/out" && ok || bad "--stats -: no final record: $(cat "$T/out")"
grep -Eq "^ +3  [01]\." "$T/err" && ok || bad "--stats -: no table on stderr: $(cat "$T/err")"
finish
