#!/bin/sh
# What a user reads on a terminal: blco-cpd with its default progress line and blco-top
# following a live job run inside a tmux pane (a real pseudo-terminal, 150 x 50); the
# screens are captured while they run and after, and the numbers on them checked:
# iteration and mode (1-based, never one too many), percentage and ETA (100% and done
# after early convergence), table rows on lines of their own (the progress line cleared
# before them and drawn again after), slots (none busy once finished), residency (as the
# engine decided it, not "decided on the first pass"), and the final summary.
# Usage: test_terminal.sh BLCO-CPD BLCO-GEN BLCO-TOP BLCO-PACK
cpd=$1 gen=$2 top=$3 pack=$4
. "$BLCO_TESTS_DIR/harness.sh"
command -v tmux >/dev/null 2>&1 || { echo "tmux is missing (Debian: tmux)"; exit 77; }
command -v python3 >/dev/null 2>&1 || { echo "python3 is missing"; exit 77; }

sock="$T/tmux.sock"
[ -n "${KEEP:-}" ] && echo "keeping $T"
tm() { tmux -S "$sock" "$@"; }
trap 'tm kill-server 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$T"' EXIT INT TERM

# run_pane NAME COMMAND: runs COMMAND in a new window whose pane stays after it exits.
run_pane() {
    if tm has-session 2>/dev/null; then
        tm new-window -d -n "$1" "$2"
    else
        tm -f /dev/null new-session -d -s blco -n "$1" -x 150 -y 50 "$2" &&
            tm set-option -g remain-on-exit on >/dev/null
    fi
}
# capture NAME FILE [-S -]: the pane's screen as the user sees it (long lines wrapped);
# with -S -, the lines scrolled off the top too.
capture() {
    w=$1 f=$2
    shift 2
    tm capture-pane -p -t "blco:$w" "$@" >"$f" 2>/dev/null
}
# wait_dead NAME SECONDS: waits for the pane's command to exit.
wait_dead() {
    n=0
    while [ "$(tm display-message -p -t "blco:$1" '#{pane_dead}' 2>/dev/null)" != 1 ]; do
        n=$((n + 1))
        [ $n -gt $(($2 * 10)) ] && return 1
        sleep 0.1
    done
}

$gen --kind lowrank --rank 2 --dims 300x200x100 --nnz 50K --seed 1 -o "$T/lr.blco" 2>/dev/null &&
    $gen --kind uniform --dims 3000x2000x1000 --nnz 400K --seed 3 -o "$T/u.tns" 2>/dev/null &&
    $pack "$T/u.tns" --segment-nnz 16384 -o "$T/u.blco" 2>/dev/null ||
    { echo "cannot make the tensors"; exit 1; }

# check_cpd SCREENS FINAL ITERS CONVERGED: the screen checks of a blco-cpd run.
check_cpd() {
    python3 - "$@" <<'PY'
import re, sys, glob
screens, final, iters, converged = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4] == "yes"
bad = []
prog = re.compile(r"cpd +([0-9.]+)%.*?(?:ETA ([0-9.]+)(ms|s|m|h)|done in ([^ ]+))?(?:  it ([0-9]+))?(?: mode ([0-9]+))?(?:  fit [0-9.]+)?\s*$")
row = re.compile(r"^ {0,4}([0-9]+)  [01]\.[0-9]{10}  [+-][0-9.]+e[+-][0-9]+ ")
# while running: every progress line in range
for path in sorted(glob.glob(screens + "*")) + [final]:
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if line.startswith("cpd "):
            m = prog.match(line)
            if not m:
                bad.append(f"{path}: progress line not understood: {line!r}")
                continue
            pct = float(m.group(1))
            if not 0 <= pct <= 100:
                bad.append(f"{path}: {pct}%")
            if m.group(5) and not 1 <= int(m.group(5)) <= iters:
                bad.append(f"{path}: iteration {m.group(5)} outside 1..{iters}: {line!r}")
            if m.group(6) and not 1 <= int(m.group(6)) <= 3:
                bad.append(f"{path}: mode {m.group(6)}: {line!r}")
        elif "cpd " in line and "%" in line and "nnz/s" in line:
            bad.append(f"{path}: a progress line run into other text: {line!r}")
text = open(final, errors="replace").read().splitlines()
rows = [int(row.match(l).group(1)) for l in text if row.match(l)]
for l in text:
    if re.match(r"^ {0,4}[0-9]+  [01]\.", l) and not row.match(l):
        bad.append(f"table row not on a line of its own: {l!r}")
if rows != list(range(1, len(rows) + 1)) or not rows:
    bad.append(f"table rows {rows}, expected 1..N")
n = len(rows)
last = [l for l in text if l.startswith("cpd ")]
if not last:
    bad.append("no progress line on the final screen")
else:
    m = prog.match(last[-1])
    if not m or m.group(1) != "100.0" or not m.group(4):
        bad.append(f"final progress line not '100.0% ... done in': {last[-1]!r}")
    elif int(m.group(5) or 0) != n:
        bad.append(f"final progress line says it {m.group(5)}, the table has {n} rows: {last[-1]!r}")
    if m and m.group(6):
        bad.append(f"final progress line names a mode: {last[-1]!r}")
    if not re.search(r"  slots 0/[0-9]+  ", last[-1]):
        bad.append(f"final progress line shows busy slots: {last[-1]!r}")
if converged:
    if not any(re.match(rf"converged after {n} iterations", l) for l in text):
        bad.append(f"no 'converged after {n} iterations'")
elif n != iters or not any(l.startswith(f"stopped at --iters {iters}") for l in text):
    bad.append(f"{n} rows, no 'stopped at --iters {iters}'")
for b in bad:
    print("FAIL:", b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

# ---- blco-cpd on a terminal: its default progress line and the iteration table ----
# Early convergence (a tensor of exact rank 2): the work is done, 100%.
run_pane conv "$cpd $T/lr.blco --rank 2 --iters 50 --tol 1e-9 --stats-interval 0.05"
wait_dead conv 120 || bad "blco-cpd (convergence) did not end"
capture conv "$T/conv.final" -S -
check_cpd "$T/conv.live" "$T/conv.final" 50 yes && ok ||
    bad "blco-cpd converging early: screen: $(cat "$T/conv.final")"

# A streamed run to --iters, captured while it runs.
run_pane iters "$cpd $T/u.blco --rank 4 --iters 30 --tol 0 --residency none --stats-interval 0.05"
k=0
while [ "$(tm display-message -p -t blco:iters '#{pane_dead}' 2>/dev/null)" != 1 ] && [ $k -lt 600 ]; do
    capture iters "$T/iters.live.$k"
    k=$((k + 1))
    sleep 0.1
done
wait_dead iters 120 || bad "blco-cpd (--iters) did not end"
capture iters "$T/iters.final" -S -
check_cpd "$T/iters.live." "$T/iters.final" 30 no && ok ||
    bad "blco-cpd to --iters: screen: $(cat "$T/iters.final")"

# ---- blco-top following a live job ----
# field NAME FILE: NAME's value in the last record of FILE that has it.
field() {
    grep "\"$1\":" "$2" | tail -n 1 | sed -n "s/.*\"$1\":\(\"[^\"]*\"\|[^,}]*\).*/\1/p" | tr -d '"'
}
# partial residency: decided on the first pass, part of the tensor streamed to the end
"$cpd" "$T/u.blco" --rank 4 --iters 200 --tol 0 --mem-limit 6M --stats "$T/live.jsonl" \
    --stats-interval 0.1 --quiet >/dev/null 2>"$T/cpd.err" &
job=$!
run_pane top "$top --interval 0.2 $T/live.jsonl"
# once the engine has decided the residency, the live view shows it
n=0
while ! grep -q '"type":"residency"' "$T/live.jsonl" 2>/dev/null && [ $n -lt 300 ]; do
    sleep 0.1
    n=$((n + 1))
done
sleep 0.5
capture top "$T/top.live"
if grep -q '"type":"final"' "$T/live.jsonl"; then
    echo "note: the job ended before the live capture; live checks skipped"
else
    grep -Eq "^residency +partial: [0-9]+% resident, rest streamed" "$T/top.live" && ok ||
        bad "blco-top live: residency not the engine's: $(cat "$T/top.live")"
    grep -q "decided on the first pass" "$T/top.live" && bad "blco-top live: stale residency" || ok
    grep -Eq "running after" "$T/top.live" && ok || bad "blco-top live: not running: $(cat "$T/top.live")"
    it=$(sed -n 's/^iteration  \([0-9]*\) .*/\1/p' "$T/top.live")
    [ -n "$it" ] && [ "$it" -ge 1 ] && [ "$it" -le 200 ] && ok ||
        bad "blco-top live: iteration '$it' outside 1..200"
    pct=$(sed -n 's/^progress .* \([0-9.]*\)%.*/\1/p' "$T/top.live")
    awk -v p="$pct" 'BEGIN { exit !(p != "" && p >= 0 && p < 100) }' && ok ||
        bad "blco-top live: percentage '$pct'"
    grep -Eq "^progress .*ETA [0-9]" "$T/top.live" && ok || bad "blco-top live: no ETA"
fi
wait $job
st=$?
[ $st -eq 0 ] && ok || bad "the job blco-top followed exited $st: $(cat "$T/cpd.err")"
wait_dead top 60 || bad "blco-top did not exit after the final record"
capture top "$T/top.final" -S -
grep -q "finished ok" "$T/top.final" && ok || bad "blco-top final: $(cat "$T/top.final")"
grep -Eq "^progress .* 100\.0%  done in" "$T/top.final" && ok ||
    bad "blco-top final: not 100% done: $(cat "$T/top.final")"
grep -Eq "^iteration  200 " "$T/top.final" && ok ||
    bad "blco-top final: iteration not 200: $(grep ^iteration "$T/top.final")"
grep -Eq "^slots .* 0/[0-9]+ busy" "$T/top.final" && ok ||
    bad "blco-top final: busy slots: $(grep ^slots "$T/top.final")"
grep -Eq "^residency +partial: [0-9]+% resident, rest streamed" "$T/top.final" && ok ||
    bad "blco-top final: residency: $(grep ^residency "$T/top.final")"
[ "$(field iteration "$T/live.jsonl")" = 200 ] && ok ||
    bad "final record: iteration $(field iteration "$T/live.jsonl"), expected 200"
[ "$(field slots_busy "$T/live.jsonl")" = 0 ] && ok || bad "final record: slots busy"

# ---- README's blco-top example on the file of an earlier run (issue 34: blco-top read the
# old run's final record before the new job truncated the file, and showed that): started
# beside the new job, it shows the new run, named by its pid ----
"$cpd" "$T/u.blco" --rank 2 --iters 2 --tol 0 -q --stats "$T/again.jsonl" >/dev/null 2>&1 ||
    bad "the earlier run failed"
"$cpd" "$T/u.blco" --rank 4 --iters 40 --tol 0 -q --residency none --stats "$T/again.jsonl" \
    --stats-interval 0.05 >/dev/null 2>&1 &
job=$!
timeout 60 "$top" --interval 0.1 "$T/again.jsonl" >"$T/again.out" 2>&1
wait $job
grep -q "^run        pid $job " "$T/again.out" && grep -q "^iteration  40 " "$T/again.out" && ok ||
    bad "blco-top beside a new job (pid $job) showed: $(grep '^run\|^iteration\|ended' "$T/again.out")"

finish
