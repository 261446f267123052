#!/bin/sh
# blco-top on hand-written JSON Lines: --once on a finished file (malformed lines skipped
# and counted, fit history, rates, waits), on a partial one, on a failed run, following a
# file that grows, and the errors: a missing file, usage mistakes.
# usage: test_blco_top.sh BLCO-TOP
set -u
top=$1
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"

# gone_within TENTHS PID: whether PID exits within TENTHS tenths of a second.
gone_within() {
    n=0
    while kill -0 "$2" 2>/dev/null && [ $n -lt "$1" ]; do
        sleep 0.1
        n=$((n + 1))
    done
    ! kill -0 "$2" 2>/dev/null
}

# has PATTERN: PATTERN (grep -E) is in the last command's standard output.
has() {
    grep -Eq -e "$1" "$T/out" && ok || bad "no '$1' in: $(cat "$T/out")"
}

S='"iteration":0,"mode":0,"read_requests":0,"bytes_resident":0,"segments_verified":0,"segments_decoded":0,"passes":0,"fallbacks":0,"slots_busy":0,"resident_bytes":0'
W0='"busy_s":{"read":0,"verify":0,"decode":0,"compute":0},"wait_s":{"read":0,"verify":0,"decode":0,"compute":0}'
cat >"$T/run.jsonl" <<JSON
{"type":"start","t":0,"job":"cpd","path":"/data/a \"b\".blco","io":"io_uring O_DIRECT","residency":"streamed","file_bytes":1048576,"data_bytes":1000000,"nnz":2000000,"nsegments":64,"slots_total":8,"slot_bytes":65536,"mem_limit":1073741824,"interval_s":1,"version":"0.1.0",$S,"bytes_read":0,"nnz_computed":0,$W0,"rates":{"read_Bps":null,"nnz_per_s":null,"segments_per_s":null},"work_done":0,"work_total":4000000,"eta_s":null,"fit":null}
{"type":"sample","t":1,"iteration":1,"mode":1,"bytes_read":500000000,"read_requests":10,"bytes_resident":0,"segments_verified":30,"segments_decoded":30,"nnz_computed":1000000,"passes":0,"fallbacks":1,"slots_busy":6,"resident_bytes":0,"busy_s":{"read":0.5,"verify":0.1,"decode":0.2,"compute":0.6},"wait_s":{"read":0.1,"verify":0,"decode":0.05,"compute":0.3},"rates":{"read_Bps":500000000,"nnz_per_s":1000000,"segments_per_s":30},"work_done":1000000,"work_total":4000000,"eta_s":3,"fit":null,"unknown_key":{"nested":[1,2,{"x":null}]}}
this line is not JSON
{"type":"sample","t":2,"iteration":1,"mode":2 "bytes_read":1}
{"type":"iteration","t":2,"iteration":1,"mode":3,"bytes_read":1000000000,"nnz_computed":2000000,"work_total":4000000,"fit":0.71234567,"delta":0.71234567}
{"t":3,"no":"type"}

{"type":"sample","t":3,"iteration":2,"mode":1,"bytes_read":1500000000,"read_requests":30,"bytes_resident":0,"segments_verified":90,"segments_decoded":90,"nnz_computed":3000000,"passes":3,"fallbacks":1,"slots_busy":8,"resident_bytes":0,"busy_s":{"read":1.5,"verify":0.3,"decode":0.6,"compute":1.8},"wait_s":{"read":0.2,"verify":0,"decode":0.1,"compute":1.3},"rates":{"read_Bps":500000000,"nnz_per_s":1000000,"segments_per_s":30},"work_done":3000000,"work_total":4000000,"eta_s":1,"fit":0.71234567}
{"type":"iteration","t":4,"iteration":2,"mode":3,"bytes_read":2000000000,"nnz_computed":4000000,"work_total":4000000,"fit":0.83456789,"delta":1.2222222e-1}
JSON
cp "$T/run.jsonl" "$T/partial.jsonl"
printf '{"type":"sample","t":3.5,"bytes_read":17' >>"$T/partial.jsonl"
cp "$T/run.jsonl" "$T/failed.jsonl"
cat >>"$T/run.jsonl" <<JSON
{"type":"final","t":4,"job":"cpd","path":"/data/a \"b\".blco","io":"io_uring O_DIRECT","residency":"streamed","file_bytes":1048576,"data_bytes":1000000,"nnz":2000000,"nsegments":64,"slots_total":8,"slot_bytes":65536,"mem_limit":1073741824,"iteration":2,"mode":3,"bytes_read":2000000000,"read_requests":40,"bytes_resident":0,"segments_verified":120,"segments_decoded":120,"nnz_computed":4000000,"passes":6,"fallbacks":1,"slots_busy":0,"resident_bytes":0,"busy_s":{"read":2,"verify":0.4,"decode":0.8,"compute":2.4},"wait_s":{"read":0.4,"verify":0,"decode":0.2,"compute":2},"rates":{"read_Bps":500000000,"nnz_per_s":1000000,"segments_per_s":30},"work_done":4000000,"work_total":4000000,"eta_s":0,"fit":0.83456789,"status":0,"elapsed_s":4}
JSON
echo '{"type":"final","t":4.5,"nnz_computed":3000000,"work_total":4000000,"status":-1013,"error":"canceled","elapsed_s":4.5}' >>"$T/failed.jsonl"

expect 0 "Usage: blco-top" -- "$top" --help
expect 0 "blco-top [0-9]" -- "$top" --version
expect 2 "no file given" -- "$top"
expect 2 "one file at a time" -- "$top" a b
expect 2 "--interval must be" -- "$top" --interval 0 "$T/run.jsonl"
expect 2 "not a number" -- "$top" --interval x "$T/run.jsonl"
expect 2 "unknown option" -- "$top" --bogus "$T/run.jsonl"
expect 1 "blco-top: .*none.jsonl: No such file" -- "$top" --once "$T/none.jsonl"
expect 1 "No such file" -- "$top" --wait 0.3 "$T/none2.jsonl"
expect 1 "Is a directory" -- "$top" --once "$T"

# A finished run: summary, whatever the option.
expect 0 "" -- "$top" --once "$T/run.jsonl"
has 'blco-top .*run.jsonl  cpd  finished ok after 4.0s'
has 'file       /data/a "b".blco  \(1.00 MiB, 2.00M nnz, 64 segments\)'
has 'io         io_uring O_DIRECT'
has 'residency  streamed   memory limit 1.00 GiB'
has 'progress   \[#+\] 100.0%  done in 4.0s'
has 'iteration  2   mode 3   passes 6   fallbacks 1'
has 'rates \(average\) read 500M B/s   verify 30 seg/s   decode 30 seg/s   compute 1.00M nnz/s'
has '^compute +2.40 +2.00 +50.0%'
has 'bottleneck disk-bound: compute waited for reads \(over the run\)'
has 'slots +\[\.+\]  0/8 busy'
has 'fit        0.834568'
has '^ +1  0.71234567 +7.123e-01'
has '^ +2  0.83456789 +1.222e-01'
has 'records    6 \(3 malformed lines skipped\)'
expect 0 "finished ok" -- "$top" --wait 0 "$T/run.jsonl"   # not a tty: exits at the final record
# a file whose run had ended before blco-top started: blco-top waits --wait seconds for a
# new run, then shows the old one saying so (issue 34)
touch -d '2 minutes ago' "$T/run.jsonl"
expect 0 "finished ok" -- "$top" --wait 0.3 "$T/run.jsonl"
grep -q "run.jsonl: this run (pid [0-9]*.*) had ended before blco-top started, and no new one came within --wait 0.3s" \
    "$T/err" && ok || bad "no word of an old run: $(cat "$T/err")"

# A run still going (the last line half written), and a failed run.
expect 0 "" -- "$top" --once "$T/partial.jsonl"
has 'not finished'
has 'progress   \[#+\.*\] 100.0%  ETA \?'
has 'an incomplete last line left out'
expect 1 "" -- "$top" --once "$T/failed.jsonl"
has 'FAILED \(canceled\) after 4.5s'
has 'progress   \[#+\.+\]  75.0%'
"$top" --once - <"$T/run.jsonl" >"$T/out" 2>&1 && ok || bad "standard input"
has 'finished ok'
printf 'garbage\n{"type":"start","t":0}' | "$top" --once - >"$T/out" 2>&1 && ok || bad "no newline"
has 'records    1 \(1 malformed line skipped\)'

# Following a file that appears late, grows in pieces and ends with a final record.
head -n 2 "$T/run.jsonl" >"$T/grow.part1"
rm -f "$T/grow.jsonl"
"$top" --interval 0.1 "$T/grow.jsonl" >"$T/follow.out" 2>&1 &
pid=$!
sleep 0.5
cp "$T/grow.part1" "$T/grow.jsonl"
sleep 0.4
line=$(tail -n 1 "$T/run.jsonl")
printf '%s' "$(printf '%s' "$line" | cut -c1-100)" >>"$T/grow.jsonl"
sleep 0.4
printf '%s\n' "$(printf '%s' "$line" | cut -c101-)" >>"$T/grow.jsonl"
if ! gone_within 50 $pid; then
    kill $pid
    bad "blco-top did not exit at the final record"
else
    wait $pid && ok || bad "follow exited $?: $(cat "$T/follow.out")"
    grep -q '^t=1.0s 25.0%' "$T/follow.out" && ok || bad "no sample line: $(cat "$T/follow.out")"
    grep -q 'finished ok' "$T/follow.out" && ok || bad "no summary: $(cat "$T/follow.out")"
    grep -q 'records    3' "$T/follow.out" && ok || bad "records: $(cat "$T/follow.out")"
fi

# The residency the engine decided on the first pass, in a "residency" record, replaces
# the start record's.
head -n 1 "$T/run.jsonl" | sed 's/"residency":"streamed"/"residency":"decided on the first pass"/' \
    >"$T/res.jsonl"
echo '{"type":"residency","t":0.5,"iteration":1,"mode":1,"nnz_computed":10,"work_total":4000000,"residency":"partial: 10% resident, rest streamed"}' >>"$T/res.jsonl"
expect 0 "" -- "$top" --once "$T/res.jsonl"
has "^residency +partial: 10% resident, rest streamed"
grep -q "decided on the first pass" "$T/out" && bad "stale residency: $(cat "$T/out")" || ok

# A writer that died without its final record: no record for several intervals and its
# pid gone from this host: blco-top says so and exits 1. A live writer is followed on.
host=$(uname -n)
sh -c 'exit 0' &
dead=$!
wait $dead
sleep 30 &
alive=$!
for who in dead alive; do
    eval pid=\$$who
    head -n 1 "$T/run.jsonl" |
        sed "s/\"interval_s\":1,/\"interval_s\":0.1,\"pid\":$pid,\"host\":\"$host\",/" >"$T/$who.jsonl"
done
grep -q "\"pid\":$dead" "$T/dead.jsonl" && ok || bad "no pid in: $(cat "$T/dead.jsonl")"
expect 1 "died without a final record" -- timeout 20 "$top" --interval 0.1 "$T/dead.jsonl"
has "DIED \(pid $dead is gone"
expect 124 "" -- timeout 3 "$top" --interval 0.1 "$T/alive.jsonl"
grep -q DIED "$T/out" && bad "a live writer taken for dead: $(cat "$T/out")" || ok
kill $alive

# Truncated in place while the job runs (copytruncate rotation), then the job dies: the
# start record is gone from the file but blco-top keeps the writer's pid, says it died and
# exits, under a timeout (it used to wait forever).
head -n 1 "$T/run.jsonl" |
    sed "s/\"interval_s\":1,/\"interval_s\":0.1,\"pid\":PID,\"host\":\"$host\",/" >"$T/rot.start"
sh -c 'sed "s/PID/$$/" "$1" >"$2"; while :; do sleep 0.1; echo "{\"type\":\"sample\",\"t\":1}" >>"$2"; done' \
    sh "$T/rot.start" "$T/rot.jsonl" &
writer=$!
sleep 0.3
timeout 20 "$top" --interval 0.1 "$T/rot.jsonl" >"$T/out" 2>"$T/err" &
watcher=$!
sleep 0.6
: >"$T/rot.jsonl"
sleep 0.5
kill -9 $writer
wait $writer 2>/dev/null
wait $watcher
st=$?
[ $st -eq 1 ] && grep -q "died without a final record" "$T/err" && ok ||
    bad "a job dead after its file was truncated: exit $st: $(cat "$T/err")"
grep -q "DIED (pid $writer is gone" "$T/out" && ok || bad "the pid after truncation: $(cat "$T/out")"
# A file truncated under a writer without O_APPEND: its next records come after a hole of
# NUL bytes; they are read all the same.
head -c 300 /dev/zero >"$T/holes.jsonl"
head -n 1 "$T/run.jsonl" >>"$T/holes.jsonl"
echo '{"type":"sample","t":2,"iteration":3}' >>"$T/holes.jsonl"
expect 0 "" -- "$top" --once "$T/holes.jsonl"
has 'records    2'
has 'iteration  3 '

# Started beside a new job (`blco-mttkrp ... --stats F & blco-top F`) that truncates the
# previous run's file and writes a longer one before blco-top looks again: the size never
# shrank, so only the file's first bytes tell. blco-top must follow the new run (it read
# the old run's tail at the new file's offsets, and waited out --wait on the old one).
cp "$T/run.jsonl" "$T/again.jsonl"
touch -d '2 minutes ago' "$T/again.jsonl"
sed 's|/data/a \\"b\\".blco|/data/the new run.blco|' "$T/run.jsonl" >"$T/again.new"
grep -q "the new run" "$T/again.new" && ok || bad "no new run in: $(head -n 1 "$T/again.new")"
[ "$(wc -c <"$T/again.new")" -gt "$(wc -c <"$T/again.jsonl")" ] && ok || bad "the new run is not longer"
"$top" --interval 0.1 --wait 8 "$T/again.jsonl" >"$T/out" 2>"$T/err" &
pid=$!
sleep 0.6
cat "$T/again.new" >"$T/again.jsonl" # in place: same inode, truncated, then longer
if ! gone_within 100 $pid; then
    kill $pid
    bad "blco-top did not end on the new run: $(cat "$T/out" "$T/err")"
else
    wait $pid && ok || bad "blco-top on a rewritten file exited $?: $(cat "$T/err")"
    has 'file       /data/the new run.blco'
    grep -q "had ended before" "$T/err" && bad "the new run taken for the old: $(cat "$T/err")" || ok
    has 'records    6 \(3 malformed lines skipped\)' # the new run's, read from its start
fi

# SIGINT while following: a clean exit with status 130.
printf '%s\n' "$(head -n 1 "$T/run.jsonl")" >"$T/int.jsonl"
"$top" --interval 0.1 "$T/int.jsonl" >"$T/int.out" 2>&1 &
pid=$!
wait_caught $pid
sleep 0.3
kill -INT $pid
wait $pid
st=$?
[ $st -eq 130 ] && ok || bad "SIGINT: exit status $st"

finish
