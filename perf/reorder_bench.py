#!/usr/bin/env python3
"""blco-pack --reorder freq against --reorder none, side by side in one run: what the
relabeling costs when packing and what it gains in MTTKRP and CP-ALS.

For each tensor (.tns or .tns.zst; a generated one with --gen), packs it both ways
(alternating, --repeat times, best time kept), then runs blco-cpd on both files, round by
round alternating (so drift in the load falls on both alike), rank --rank, --iters
iterations, tol 0, resident in memory unless --mem-limit says otherwise. Prints JSON Lines:
the machine, then one record per tensor:
  pack_s_{none,freq}     best blco-pack seconds, pack_cost = freq / none (target <= 1.3)
  pack_rss_{none,freq}   peak RSS of blco-pack (bytes) and its --mem-limit
  mttkrp_s_{none,freq}   median seconds of the all-mode MTTKRP per iteration (2..N)
  cpd_s_{none,freq}      median seconds per CP-ALS iteration (2..N)
  mttkrp_speedup, cpd_speedup = none / freq (above 1: relabeling is faster; target 1.5)
  fit_{none,freq}        the final fits (the same up to rounding: same start, same tensor)
Usage: perf/reorder_bench.py --build BUILD [--gen DIMS:NNZ:SKEW ...] [TENSOR ...]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time


def run(cmd, env=None):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if r.returncode != 0:
        sys.exit("failed: %s\n%s" % (" ".join(cmd), r.stderr))
    return r.stdout


def machine():
    cpu = "?"
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"record": "machine", "host": platform.node(), "cpu": cpu,
            "cores": os.cpu_count(), "load": os.getloadavg(),
            "date": time.strftime("%Y-%m-%d %H:%M:%S")}


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tensors", nargs="*")
    ap.add_argument("--build", required=True, help="the meson build folder (tools/ inside)")
    ap.add_argument("--gen", action="append", default=[],
                    help="DIMS:NNZ:SKEW, a blco-gen power-law tensor, e.g. 4821207x1774269x1805187:20M:1.5")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iters", type=int, default=6)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--pack-repeat", type=int, default=2)
    ap.add_argument("--pack-mem-limit", default="2G")
    ap.add_argument("--mem-limit", default=None, help="blco-cpd --mem-limit (default: its own)")
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    tools = os.path.join(a.build, "tools")
    env = dict(os.environ)
    env.setdefault("OMP_WAIT_POLICY", "passive")
    print(json.dumps(machine()), flush=True)
    work = a.workdir or tempfile.mkdtemp(prefix="blco-reorder-")
    inputs = list(a.tensors)
    for g in a.gen:
        dims, nnz, skew = g.split(":")
        path = os.path.join(work, "pl-%s-%s-%s.tns" % (dims, nnz, skew))
        if not os.path.exists(path):
            run([os.path.join(tools, "blco-gen"), "--dims", dims, "--nnz", nnz, "--kind",
                 "powerlaw", "--skew", skew, "--seed", "1", "-o", path], env)
        inputs.append(path)
    for src in inputs:
        name = os.path.basename(src)
        rec = {"record": "tensor", "tensor": name, "rank": a.rank, "threads": a.threads}
        files = {}
        for order in ("none", "freq"):
            files[order] = os.path.join(work, "%s.%s.blco" % (name, order))
        best = {"none": None, "freq": None}
        for _ in range(a.pack_repeat):
            for order in ("none", "freq"):
                out = run([os.path.join(tools, "blco-pack"), src, "-o", files[order], "-f",
                           "-q", "--json", "-t", str(a.threads), "-m", a.pack_mem_limit,
                           "--reorder", order], env)
                j = json.loads(out.strip().splitlines()[-1])
                if best[order] is None or j["seconds"]["total"] < best[order]["seconds"]["total"]:
                    best[order] = j
        for order in ("none", "freq"):
            rec["pack_s_" + order] = best[order]["seconds"]["total"]
            rec["pack_rss_" + order] = best[order]["peak_rss"]
        rec["nnz"] = best["none"]["nnz"]
        rec["dims"] = best["none"]["dims"]
        rec["pack_mem_limit"] = best["none"]["mem_limit"]
        rec["relabeled_modes"] = best["freq"]["relabeled_modes"]
        rec["reorder_s"] = best["freq"]["reorder_seconds"]
        rec["pack_cost"] = rec["pack_s_freq"] / rec["pack_s_none"]
        mt = {"none": [], "freq": []}
        it = {"none": [], "freq": []}
        fit = {}
        for _ in range(a.repeat):
            for order in ("none", "freq"):
                cmd = [os.path.join(tools, "blco-cpd"), files[order], "-r", str(a.rank), "-t",
                       str(a.threads), "--iters", str(a.iters), "--tol", "0", "--json", "-"]
                if a.mem_limit:
                    cmd += ["--mem-limit", a.mem_limit]
                out = run(cmd, env)
                lines = [json.loads(x) for x in out.strip().splitlines()]
                iters = [x for x in lines if "iteration" in x][1:]
                mt[order] += [x["mttkrp_seconds"] for x in iters]
                it[order] += [x["seconds"] for x in iters]
                fit[order] = lines[-1]["fit"]
        for order in ("none", "freq"):
            rec["mttkrp_s_" + order] = statistics.median(mt[order])
            rec["cpd_s_" + order] = statistics.median(it[order])
            rec["fit_" + order] = fit[order]
        rec["mttkrp_speedup"] = rec["mttkrp_s_none"] / rec["mttkrp_s_freq"]
        rec["cpd_speedup"] = rec["cpd_s_none"] / rec["cpd_s_freq"]
        rec["load"] = os.getloadavg()
        print(json.dumps(rec), flush=True)
        for f in files.values():
            os.unlink(f)


if __name__ == "__main__":
    main()
