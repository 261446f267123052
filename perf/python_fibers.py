#!/usr/bin/env python3
"""CP-ALS from the Python package with fibers="auto" against fibers="off", alternating, in
one run: per run the median iteration after the first, the wall time, the fit and each
mode's kernel, as JSON Lines on stdout.

usage: PYTHONPATH=build/python perf/python_fibers.py [--rank 16] [--iters 10] [--reps 3]
                                                     [--backend cpu] FILE.blco...
"""
import argparse
import json
import sys
import time

import blco


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--backend", default="cpu")
    a = ap.parse_args()
    if a.iters < 2:
        ap.error("--iters must be >= 2 (the first iteration is left out)")
    for path in a.files:
        for rep in range(a.reps):
            for fb in ("auto", "off"):
                t0 = time.perf_counter()
                res = blco.cp_als(path, a.rank, n_iter_max=a.iters, tol=0, progress=False,
                                  fibers=fb, backend=a.backend)
                wall = time.perf_counter() - t0
                later = sorted(res.iter_seconds[1:])
                print(json.dumps(dict(bench="python_fibers", tensor=path, rank=a.rank,
                                      iters=a.iters, backend=res.backend, fibers=fb, rep=rep,
                                      wall=wall, median_iter=later[len(later) // 2],
                                      fit=res.fit, kernels=res.counters["kernels"])),
                      flush=True)


if __name__ == "__main__":
    sys.exit(main())
