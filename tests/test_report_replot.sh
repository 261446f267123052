#!/bin/sh
# perf/report --replot of a committed report folder, copied elsewhere: report.md is made
# from results.json alone (twice the same), names no absolute path of the checkout it was
# run in or of this one, and lists a failed sweep point among its problems; without --out
# it leaves the folder it reads as it was (issue 34: it rewrote committed files).
# usage: test_report_replot.sh SOURCE_ROOT
src=$1
. "${BLCO_TESTS_DIR:-$(dirname "$0")}/harness.sh"
py=/usr/bin/python3
"$py" -c 'import numpy, matplotlib' 2>/dev/null ||
    { echo "no /usr/bin/python3 with numpy and matplotlib (Debian python3-numpy python3-matplotlib)"; exit 77; }
folder=$(ls -d "$src"/perf/results/*-epyc-2c-23g 2>/dev/null | head -n 1)
[ -f "$folder/results.json" ] || { echo "no committed report folder in $src/perf/results"; exit 1; }
cp -r "$folder" "$T/rep"
root=$("$py" - "$T/rep/results.json" <<'PY'
import json, sys
p = sys.argv[1]
d = json.load(open(p))
cmd = next(x["command"] for x in d["runs"] if "/tools/" in x["command"])
first = cmd.split()[0]
root = first[:first.index("/" + d["meta"].get("build", "build") + "/")] if first.startswith("/") else ""
d["runs"].append({"step": "sweep-77M", "command": f"{root or '/elsewhere'}/build/tools/blco-mttkrp "
                  "/tmp/s/t.blco --mem-limit 77M", "rc": 1, "seconds": 0.1,
                  "loadavg_before": 1.0, "loadavg_after": 1.0, "stdout_file": "sweep_mttkrp.jsonl",
                  "stderr_tail": "blco-mttkrp: a failure made up by the test"})
json.dump(d, open(p, "w"))
print(root or "/elsewhere")
PY
)
# without --out: a new folder under --tmp, the report folder untouched
(cd "$T/rep" && find . -type f -exec md5sum {} + | sort) >"$T/before"
mkdir "$T/tmp"
expect_run 0 "redrawn into $T/tmp/blco-replot-rep-" any -- "$py" "$src/perf/report" --replot "$T/rep" \
    --tmp "$T/tmp"
(cd "$T/rep" && find . -type f -exec md5sum {} + | sort) >"$T/after"
cmp -s "$T/before" "$T/after" && ok || bad "--replot without --out changed the folder it read"
new=$(ls -d "$T"/tmp/blco-replot-rep-* | head -n 1)
[ -s "$new/report.md" ] && [ -s "$new/results.json" ] && ls "$new"/*.png >/dev/null 2>&1 && ok ||
    bad "--replot wrote no report.md, results.json and plots into $new: $(ls "$new")"
# --out the folder itself: in place
expect_run 0 "" any -- "$py" "$src/perf/report" --replot "$T/rep" --out "$T/rep"
cmp -s "$new/report.md" "$T/rep/report.md" && ok || bad "in place and elsewhere differ"
cp "$T/rep/report.md" "$T/first.md"
grep -n "$root/\|$src/\|$T" "$T/rep/report.md" && bad "absolute paths in report.md (above)" || ok
grep -q '^- \*\*sweep-77M\*\*: `build/tools/blco-mttkrp .*a failure made up by the test' \
    "$T/rep/report.md" && ok || bad "the failed sweep point is not among the problems"
expect_run 0 "" any -- "$py" "$src/perf/report" --replot "$T/rep" --out "$T/rep"
cmp -s "$T/first.md" "$T/rep/report.md" && ok || bad "a second replot differs: $(diff "$T/first.md" "$T/rep/report.md")"
finish
