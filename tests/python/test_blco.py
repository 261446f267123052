# The Python package against numpy oracles, the C tools' results (blco-pack's bytes,
# blco-mttkrp's and blco-cpd's .npy files) and the C library's documented behaviour:
# pack + open + mttkrp, from_coo, cp_als, counters and backends, every error class,
# interruption, and a leak check.
import errno
import gzip
import json
import os
import signal
import subprocess
import sys
import threading
import time
import tracemalloc

import numpy as np
import pytest

import blco

SHARED = os.environ.get("BLCO_SHARED_DATA",
                        os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data"))


def tool(name):
    """The path of a C tool of the build (meson passes them), or skip."""
    path = os.environ.get(name.upper().replace("-", "_"), "")  # BLCO_PACK...
    if not path or not os.access(path, os.X_OK):
        pytest.skip(f"{name}: not given (run by meson test)")
    return path


def run_tool(name, *args):
    r = subprocess.run([tool(name), *map(str, args)], capture_output=True, text=True)
    assert r.returncode == 0, f"{name} {args}: exit {r.returncode}\n{r.stderr}"
    return r


def tiny(seed=1, dims=(7, 5, 4), nnz=60):
    """A seeded 3-mode tensor: unique 0-based coordinates, values and its dense form."""
    rng = np.random.default_rng(seed)
    flat = rng.choice(int(np.prod(dims)), size=nnz, replace=False)
    ind = np.stack(np.unravel_index(flat, dims), axis=1).astype(np.int64)
    val = rng.uniform(-1, 1, size=nnz)
    dense = np.zeros(dims)
    dense[tuple(ind.T)] = val
    return ind, val, dense


def write_tns(path, ind, val):
    with open(path, "w") as f:
        for i, v in zip(ind, val):
            f.write(" ".join(str(x + 1) for x in i) + f" {v!r}\n")


def oracle(dense, mode, factors):
    letters = "abc"
    others = [m for m in range(3) if m != mode]
    spec = f"abc,{letters[others[0]]}r,{letters[others[1]]}r->{letters[mode]}r"
    return np.einsum(spec, dense, factors[others[0]], factors[others[1]])


@pytest.fixture
def packed(tmp_path):
    ind, val, dense = tiny()
    src = tmp_path / "t.tns"
    write_tns(src, ind, val)
    dst = tmp_path / "t.blco"
    st = blco.pack(str(src), str(dst), mem_limit="64M")
    assert st["nnz"] == len(val) and tuple(st["dims"]) == dense.shape
    return dst, dense


def test_pack_open_mttkrp(packed):
    path, dense = packed
    rng = np.random.default_rng(7)
    with blco.open(path, mem_limit=64 << 20) as t:
        assert t.dims == dense.shape
        assert t.nnz == np.count_nonzero(dense)
        assert t.norm == pytest.approx(np.linalg.norm(dense), rel=1e-12)
        info = t.info()
        assert info["nnz"] == t.nnz and info["order"] == 3 and "describe" in info
        factors = [rng.standard_normal((d, 3)) for d in dense.shape]
        for mode in range(3):
            got = t.mttkrp(mode, factors)
            assert got.shape == (dense.shape[mode], 3) and got.dtype == np.float64
            np.testing.assert_allclose(got, oracle(dense, mode, factors), rtol=1e-10, atol=1e-12)
        assert t.info()["counters"]["passes"] == 3
    assert t.closed
    with pytest.raises(ValueError):
        t.mttkrp(0, factors)


def test_reorder_results_in_source_indices(tmp_path):
    """A relabeled file gives the numpy oracle's MTTKRP and the plain file's CP-ALS."""
    ind, val, dense = tiny(seed=3, dims=(30, 20, 9), nnz=400)
    src = tmp_path / "r.tns"
    write_tns(src, ind, val)
    plain, relab = tmp_path / "p.blco", tmp_path / "f.blco"
    assert blco.pack(str(src), str(plain), progress=False)["reorder"] == "none"
    assert blco.pack(str(src), str(relab), progress=False, reorder="freq")["reorder"] == "freq"
    with pytest.raises(ValueError, match="reorder"):
        blco.pack(str(src), str(tmp_path / "x.blco"), reorder="bogus")
    rng = np.random.default_rng(5)
    factors = [rng.standard_normal((d, 4)) for d in dense.shape]
    with blco.open(relab) as t:
        for mode in range(3):
            np.testing.assert_allclose(t.mttkrp(mode, factors), oracle(dense, mode, factors),
                                       rtol=1e-10, atol=1e-12)
    a = blco.cp_als(str(plain), 3, n_iter_max=4, tol=0, progress=False)
    b = blco.cp_als(str(relab), 3, n_iter_max=4, tol=0, progress=False)
    for x, y in zip(a.factors, b.factors):
        np.testing.assert_allclose(y, x, rtol=1e-10, atol=1e-12)


def test_pack_progress_and_codec(tmp_path):
    ind, val, _ = tiny(2)
    write_tns(tmp_path / "a.tns", ind, val)
    seen = []
    blco.pack(tmp_path / "a.tns", tmp_path / "a.blco", codec="zstd", progress=seen.append)
    assert seen and {"phase", "nnz_read", "seconds"} <= set(seen[0])
    with blco.open(tmp_path / "a.blco") as t:
        assert t.info()["codec"] == "zstd"
    with pytest.raises(FileExistsError):
        blco.pack(tmp_path / "a.tns", tmp_path / "a.blco")
    blco.pack(tmp_path / "a.tns", tmp_path / "a.blco", force=True)
    with blco.open(tmp_path / "a.blco") as t:
        assert t.info()["codec"] == "auto"
    # the default until 2026-11-26 under its own name, in from_coo too
    blco.pack(tmp_path / "a.tns", tmp_path / "c.blco", codec="compact")
    blco.from_coo(ind, val, (7, 5, 4), tmp_path / "d.blco", codec="compact")
    for name in ("c.blco", "d.blco"):
        with blco.open(tmp_path / name) as t:
            assert t.info()["codec"] == "compact"


def test_from_coo_round_trip(tmp_path):
    ind, val, dense = tiny(3)
    n = blco.from_coo(ind, val, dense.shape, str(tmp_path / "c.blco"))
    assert n == len(val)
    rng = np.random.default_rng(3)
    factors = [rng.standard_normal((d, 2)) for d in dense.shape]
    with blco.open(tmp_path / "c.blco") as t:
        assert t.dims == dense.shape and t.nnz == len(val)
        assert t.norm == pytest.approx(np.linalg.norm(val))
        for mode in range(3):
            np.testing.assert_allclose(t.mttkrp(mode, factors), oracle(dense, mode, factors),
                                       rtol=1e-10, atol=1e-12)
    # the same tensor through pack gives the same MTTKRP
    write_tns(tmp_path / "c.tns", ind, val)
    blco.pack(tmp_path / "c.tns", tmp_path / "p.blco")
    with blco.open(tmp_path / "c.blco") as a, blco.open(tmp_path / "p.blco") as b:
        np.testing.assert_allclose(a.mttkrp(1, factors), b.mttkrp(1, factors), rtol=1e-12)


def test_cp_als_small(packed):
    path, dense = packed
    fits = []
    res = blco.cp_als(path, 2, n_iter_max=20, tol=0, callback=lambda it: fits.append(it["fit"]))
    w, f = res
    assert w.shape == (2,) and [a.shape for a in f] == [(d, 2) for d in dense.shape]
    assert res.iterations == 20 and len(res.fit_history) == 20 and len(res.iter_seconds) == 20
    np.testing.assert_allclose(res.fit_history, fits)
    approx = np.einsum("r,ar,br,cr->abc", w, *f)
    fit = 1 - np.linalg.norm(dense - approx) / np.linalg.norm(dense)
    assert fit == pytest.approx(res.fit, abs=1e-8)
    # the same seed gives the same result; a callback's exception stops the run
    again = blco.cp_als(path, 2, n_iter_max=20, tol=0)
    np.testing.assert_array_equal(again.weights, w)

    def stop(it):
        raise RuntimeError("stop here")
    with pytest.raises(RuntimeError, match="stop here"):
        blco.cp_als(path, 2, callback=stop)


def test_cp_als_progress(packed, capsys):
    path, _ = packed
    seen = []
    res = blco.cp_als(path, 2, n_iter_max=5, tol=0, progress=True,
                      callback=lambda it: seen.append(it["iteration"]))
    assert seen == [1, 2, 3, 4, 5] and res.iterations == 5  # the user's callback still runs
    err = capsys.readouterr().err
    assert "5/5" in err or "CP-ALS" in err, err  # the plain line, or tqdm's bar


def test_pack_same_bytes_as_blco_pack(tmp_path):
    """blco.pack and blco.from_coo write the very file blco-pack writes (plain and gzip)."""
    ind, val, _ = tiny(4)
    write_tns(tmp_path / "t.tns", ind, val)
    with open(tmp_path / "t.tns", "rb") as f, gzip.open(tmp_path / "t.tns.gz", "wb") as g:
        g.write(f.read())
    run_tool("blco-pack", tmp_path / "t.tns", "-o", tmp_path / "c.blco", "-q")
    want = (tmp_path / "c.blco").read_bytes()
    blco.pack(tmp_path / "t.tns", tmp_path / "p.blco")
    blco.pack(tmp_path / "t.tns.gz", tmp_path / "g.blco")
    blco.from_coo(ind, val, ind.max(axis=0) + 1, tmp_path / "f.blco")
    for name in ("p.blco", "g.blco", "f.blco"):
        assert (tmp_path / name).read_bytes() == want, name


def test_mttkrp_matches_blco_mttkrp(packed, tmp_path):
    path, dense = packed
    rng = np.random.default_rng(11)
    factors = [rng.standard_normal((d, 5)) for d in dense.shape]
    (tmp_path / "f").mkdir()
    for m, a in enumerate(factors):
        np.save(tmp_path / "f" / f"A{m + 1}.npy", a)
    run_tool("blco-mttkrp", path, "--rank", 5, "--factors", tmp_path / "f", "--mode", "all",
             "--out", tmp_path / "m", "-q")
    with blco.open(path) as t:
        for m in range(3):
            want = np.load(tmp_path / "m" / f"M{m + 1}.npy")
            np.testing.assert_allclose(t.mttkrp(m, factors), want, rtol=1e-12, atol=1e-14)


def test_cp_als_matches_blco_cpd(packed, tmp_path):
    path, dense = packed
    run_tool("blco-cpd", path, "--rank", 3, "--iters", 15, "--tol", 0, "--seed", 7,
             "--out", tmp_path / "cp", "-q")
    summary = json.loads((tmp_path / "cp" / "summary.json").read_text())
    res = blco.cp_als(path, 3, n_iter_max=15, tol=0, random_state=7)
    assert res.iterations == summary["iterations"] == 15
    assert res.fit == pytest.approx(summary["fit"], rel=1e-10)
    np.testing.assert_allclose(res.fit_history, summary["fit_history"], rtol=1e-10)
    lam = np.load(tmp_path / "cp" / "lambda.npy")
    assert lam.shape == res.weights.shape == (res.weights.size,)  # TensorLy's weights
    np.testing.assert_allclose(res.weights, lam,
                               rtol=1e-9)
    for m, a in enumerate(res.factors):
        np.testing.assert_allclose(a, np.load(tmp_path / "cp" / f"A{m + 1}.npy"), rtol=1e-8,
                                   atol=1e-12)
    # initial factors from a folder, and a Tensor instead of a path
    rng = np.random.default_rng(3)
    (tmp_path / "init").mkdir()
    for m, d in enumerate(dense.shape):
        np.save(tmp_path / "init" / f"A{m + 1}.npy", rng.uniform(size=(d, 3)))
    run_tool("blco-cpd", path, "--rank", 3, "--iters", 10, "--tol", 0, "--init",
             tmp_path / "init", "--out", tmp_path / "cp2", "-q")
    with blco.open(path) as t:
        res = blco.cp_als(t, 3, n_iter_max=10, tol=0, init=tmp_path / "init")
    np.testing.assert_allclose(res.fit_history,
                               json.loads((tmp_path / "cp2" / "summary.json").read_text())
                               ["fit_history"], rtol=1e-10)
    np.testing.assert_allclose(res.factors[1], np.load(tmp_path / "cp2" / "A2.npy"), rtol=1e-8,
                               atol=1e-12)


def test_fibers(packed, tmp_path):
    """fibers= as blco-cpd's --fibers: "on" runs every mode on its fiber copy, "off" none,
    with the same fits to rounding, blco-cpd's fit, and the numpy oracle's MTTKRP; the
    counters name the kernels; a value other than auto, on, off is refused."""
    path, dense = packed
    runs = {fb: blco.cp_als(path, 3, n_iter_max=8, tol=0, random_state=5, fibers=fb,
                            backend="cpu", progress=False)
            for fb in ("on", "off", "auto")}
    assert runs["on"].counters["kernels"] == ["fibers"] * 3
    assert "fibers" not in runs["off"].counters["kernels"]
    for fb in ("on", "auto"):
        np.testing.assert_allclose(runs[fb].fit_history, runs["off"].fit_history, rtol=1e-10)
    run_tool("blco-cpd", path, "--rank", 3, "--iters", 8, "--tol", 0, "--seed", 5,
             "--fibers", "on", "--backend", "cpu", "--out", tmp_path / "cp", "-q")
    summary = json.loads((tmp_path / "cp" / "summary.json").read_text())
    assert runs["on"].fit == pytest.approx(summary["fit"], rel=1e-10)
    rng = np.random.default_rng(7)
    factors = [rng.standard_normal((d, 3)) for d in dense.shape]
    with blco.open(path, fibers="on") as t:
        for _ in range(2):  # the copies serve the passes after the one that makes it resident
            for mode in range(3):
                np.testing.assert_allclose(t.mttkrp(mode, factors), oracle(dense, mode, factors),
                                           rtol=1e-10, atol=1e-12)
        assert t.stats()["kernels"] == ["fibers"] * 3
    with blco.open(path) as t:
        t.mttkrp(0, factors)
        t.mttkrp(0, factors)
        assert t.stats()["kernels"][0] != "fibers"  # open's default: off
    with pytest.raises(ValueError, match="fibers 'yes': one of auto, on, off"):
        blco.cp_als(path, 3, fibers="yes")
    with pytest.raises(ValueError, match="fibers 'yes'"):
        blco.open(path, fibers="yes")
    with pytest.raises(TypeError):
        blco.open(path, fibers=1)


def test_counters_and_backend(packed):
    path, dense = packed
    with blco.open(path) as t:
        st = t.stats()
        assert st["passes"] == 0 and st["backend"] in ("cpu", "cuda", "hybrid")
        t.mttkrp(0, [np.ones((d, 2)) for d in dense.shape])
        st = t.stats()
        assert st["passes"] == 1 and st["nnz_computed"] == t.nnz
        assert st["segments_decoded"] >= 1 and set(st["busy_s"]) == {"read", "verify",
                                                                     "decode", "compute"}
        assert t.info()["counters"]["passes"] == 1 and t.info()["backend"] == st["backend"]
        auto = st
    res = blco.cp_als(path, 2, n_iter_max=4, tol=0)
    assert res.counters["passes"] == 4 * 3 and res.backend == auto["backend"]
    assert res.counters["nnz_computed"] == 4 * 3 * len(dense.nonzero()[0])
    if auto["backend"] == "cpu":
        # auto says why it took the CPU; a GPU backend asked for by name is refused, with
        # the library's reason
        assert auto["backend_reason"].startswith("cpu (auto: "), auto["backend_reason"]
        for b in ("cuda", "hybrid"):
            with pytest.raises(RuntimeError, match=f"backend '{b}': "):
                blco.open(path, backend=b)
            with pytest.raises(RuntimeError, match=f"backend '{b}': "):
                blco.cp_als(path, 2, backend=b)
    else:  # a GPU answers: it gives the CPU's MTTKRP
        rng = np.random.default_rng(2)
        factors = [rng.standard_normal((d, 4)) for d in dense.shape]
        with blco.open(path, backend="cpu") as c, blco.open(path, backend="hybrid") as h:
            for m in range(3):
                np.testing.assert_allclose(h.mttkrp(m, factors), c.mttkrp(m, factors),
                                           rtol=1e-12, atol=1e-12)
            assert h.stats()["gpu_batches"] + h.stats()["cpu_batches"] > 0


def test_gpu_keywords_checked_and_said_unused_on_the_cpu(packed):
    path, dense = packed
    for bad in ("0,1", [-1], [1.0], [0, 0], list(range(65))):
        with pytest.raises(ValueError, match="gpus"):
            blco.open(path, backend="cpu", gpus=bad)
    for bad in ("lots", 0, -5):
        with pytest.raises(ValueError, match="gpu_mem_limit"):
            blco.open(path, gpu_mem_limit=bad)
    with pytest.warns(RuntimeWarning, match="gpus and gpu_mem_limit not used, the CPU runs"):
        with blco.open(path, backend="cpu", gpus=[0], gpu_mem_limit="1G") as t:
            assert t.stats()["backend"] == "cpu"
    with pytest.warns(RuntimeWarning, match="gpu_mem_limit not used"):
        res = blco.cp_als(path, 2, n_iter_max=2, tol=0, backend="cpu", gpu_mem_limit="1G")
    assert res.backend == "cpu"
    with pytest.warns(RuntimeWarning, match="gpu_sorted not used, the CPU runs this job"):
        res = blco.cp_als(path, 2, n_iter_max=2, tol=0, backend="cpu", gpu_sorted=True)
    assert res.backend == "cpu" and "gpu-sorted" not in res.counters["kernels"]
    with pytest.warns(RuntimeWarning, match="gpu_sorted='auto': 2 iterations end before it "
                      "has timed every mode") as got:
        blco.cp_als(path, 2, n_iter_max=2, tol=0, backend="cpu", gpu_sorted="auto")
    assert len(got) == 1, [str(w.message) for w in got]  # not also "not used": no copies
    for bad in ("fast", "Interleaved", ""):
        with pytest.raises(ValueError, match="gpu_schedule '.*': one of auto, contiguous"):
            blco.open(path, backend="cpu", gpu_schedule=bad)
        with pytest.raises(ValueError, match="gpu_schedule"):
            blco.cp_als(path, 2, n_iter_max=1, backend="cpu", gpu_schedule=bad)
    with pytest.warns(RuntimeWarning, match="gpus and gpu_schedule not used, the CPU runs"):
        with blco.open(path, backend="cpu", gpus=[0], gpu_schedule="interleaved") as t:
            assert t.stats()["gpu_schedules"] == [{"contiguous_passes": 0,
                                                   "interleaved_passes": 0,
                                                   "contiguous_ns_per_nnz": 0.0,
                                                   "interleaved_ns_per_nnz": 0.0}] * 3


def test_progress_auto(packed, capsys, monkeypatch):
    """progress=None: silent off a terminal; on one, a bar once the work has run a while."""
    path, _ = packed
    blco.cp_als(path, 2, n_iter_max=3, tol=0)
    src = str(path).replace(".blco", ".tns")
    blco.pack(src, str(path) + ".2")
    assert capsys.readouterr().err == ""
    monkeypatch.setattr(blco._sys.stderr, "isatty", lambda: True)
    monkeypatch.setattr(blco, "_AUTO_DELAY", 0.0)
    blco.cp_als(path, 2, n_iter_max=3, tol=0)
    blco.pack(src, str(path) + ".3")
    err = capsys.readouterr().err
    assert ("3/3" in err or "CP-ALS" in err) and ("blco.pack" in err or "nnz" in err), err


def test_cp_als_aminoacid():
    src = os.path.join(SHARED, "aminoacid.tns")
    if not os.path.exists(src):
        pytest.skip(f"{src} is missing")
    res = blco.cp_als(src, 3, tol=1e-9, n_iter_max=500)
    assert round(res.fit, 5) == 0.97495
    assert res.fit_history[-1] == res.fit and res.converged


def test_pack_refuses_its_input(tmp_path):
    """An output that is the input (the same name, a link, a hard link) is refused, force
    or not, and the input stays as it was (issue 33)."""
    ind, val, _ = tiny()
    src = tmp_path / "t.tns"
    write_tns(src, ind, val)
    before = src.read_bytes()
    (tmp_path / "link.blco").symlink_to("t.tns")
    os.link(src, tmp_path / "hard.blco")
    for out in (src, tmp_path / "link.blco", tmp_path / "hard.blco"):
        with pytest.raises(ValueError, match="is the input file"):
            blco.pack(src, out, force=True)
        assert src.read_bytes() == before


def test_errors(tmp_path, packed):
    path, dense = packed
    with pytest.raises(OSError) as e:
        blco.open(tmp_path / "missing.blco")
    assert e.value.errno == errno.ENOENT and isinstance(e.value, FileNotFoundError)
    with pytest.raises(OSError) as e:
        blco.pack(tmp_path / "missing.tns", tmp_path / "x.blco")
    assert e.value.errno == errno.ENOENT
    # bad arguments and bad input
    with pytest.raises(ValueError):
        blco.pack(tmp_path / "missing.tns", tmp_path / "x.blco", codec="lzma")
    with pytest.raises(ValueError):
        blco.open(path, backend="tpu")
    with pytest.raises(ValueError):
        blco.open(path, mem_limit="lots")
    (tmp_path / "bad.tns").write_text("1 2 3 1.0\n1 2 x 2.0\n")
    with pytest.raises(ValueError, match="line 2|2:"):
        blco.pack(tmp_path / "bad.tns", tmp_path / "bad.blco")
    assert not (tmp_path / "bad.blco").exists()
    (tmp_path / "text.blco").write_text("not a blco file\n" * 100)
    with pytest.raises(ValueError):
        blco.open(tmp_path / "text.blco")
    with blco.open(path) as t:
        good = [np.ones((d, 2)) for d in dense.shape]
        with pytest.raises(ValueError):
            t.mttkrp(3, good)
        with pytest.raises(ValueError):
            t.mttkrp(0, good[:2])
        with pytest.raises(ValueError):
            t.mttkrp(0, [good[0], np.ones((dense.shape[1] + 1, 2)), good[2]])
        with pytest.raises(ValueError):
            t.mttkrp(0, [good[0], good[1], np.ones((dense.shape[2], 3))])
    ind, val, _ = tiny()
    with pytest.raises(ValueError):
        blco.from_coo(ind, val, (7, 5, 3), tmp_path / "r.blco")  # an index out of range
    with pytest.raises(ValueError):
        blco.from_coo(ind, val[:-1], (7, 5, 4), tmp_path / "r.blco")
    with pytest.raises(ValueError):
        blco.from_coo(-ind, val, (7, 5, 4), tmp_path / "r.blco")
    with pytest.raises(ValueError):
        blco.cp_als(path, 0)
    # OSError's filename is the path the message names
    with pytest.raises(FileExistsError, match=r"force=True") as e:
        blco.from_coo(ind, val, (7, 5, 4), path)
    assert e.value.filename == str(path)
    with pytest.raises(FileNotFoundError) as e:
        blco.from_coo(ind, val, (7, 5, 4), tmp_path / "no" / "r.blco")
    assert e.value.filename == str(tmp_path / "no" / "r.blco")
    with pytest.raises(FileNotFoundError) as e:
        blco.cp_als(path, 2, init=tmp_path / "no")
    assert e.value.filename == str(tmp_path / "no")
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError) as e:
        blco.cp_als(path, 2, checkpoint=tmp_path / "file" / "ck")
    assert e.value.errno == errno.ENOTDIR and e.value.filename == str(tmp_path / "file" / "ck")
    # a corrupt segment: ValueError naming it, when the stream reaches it
    data = path.read_bytes()
    corrupt = tmp_path / "corrupt.blco"
    found = []
    for off in range(4096, len(data), 256):
        b = bytearray(data)
        b[off] ^= 0xFF
        corrupt.write_bytes(bytes(b))
        try:
            with blco.open(corrupt) as t:
                t.mttkrp(0, [np.ones((d, 2)) for d in dense.shape])
        except ValueError as err:
            found.append(str(err))
            break
    assert any("segment 0" in m and "corrupt" in m for m in found), found
    # a memory budget too small
    with pytest.raises(MemoryError):
        blco.open(path, mem_limit=4096)
    with pytest.raises(MemoryError):
        blco.pack(tmp_path / "bad.tns", tmp_path / "m.blco", mem_limit=4096)
    with pytest.raises(MemoryError):
        blco.cp_als(path, 2, mem_limit=4096)


def test_sigint_interrupts_cp_als(tmp_path):
    """Ctrl-C during a run whose GIL is released: KeyboardInterrupt, and the package still
    works after."""
    rng = np.random.default_rng(5)
    dims = (300, 200, 100)
    nnz = 200000
    flat = np.unique(rng.integers(0, int(np.prod(dims)), size=nnz))
    ind = np.stack(np.unravel_index(flat, dims), axis=1)
    blco.from_coo(ind, rng.uniform(size=len(flat)), dims, tmp_path / "big.blco")
    started = threading.Event()
    fits = []

    def on_iter(it):
        fits.append(it["fit"])
        started.set()
    timer = threading.Timer(0, lambda: (started.wait(60), os.kill(os.getpid(), signal.SIGINT)))
    timer.start()
    ck = tmp_path / "ck"
    try:
        with pytest.raises(KeyboardInterrupt):
            blco.cp_als(tmp_path / "big.blco", 4, n_iter_max=100000, tol=0, callback=on_iter,
                        checkpoint=ck)
    finally:
        timer.join()
    # the checkpoint is whole: a resumed run continues the interrupted one's fit history
    done = len(fits)
    res = blco.cp_als(tmp_path / "big.blco", 4, n_iter_max=done + 2, tol=0, checkpoint=ck,
                      resume=True)
    assert res.iterations == done + 2
    np.testing.assert_array_equal(res.fit_history[:done - 1], fits[:done - 1])
    assert not [p for p in os.listdir(ck) if "tmp" in p]


def test_argument_types(tmp_path, packed):
    """Issue 33: a rank that is no integer is refused as numpy refuses it (not truncated or
    parsed); uint64 indices are taken; NaN and infinities are named as such; cp_als on a
    closed Tensor is refused as its mttkrp is."""
    path, dense = packed
    for bad in (2.5, "3", 2.0, None):
        with pytest.raises(TypeError, match="rank: an integer"):
            blco.cp_als(path, bad, n_iter_max=1)
    with pytest.raises(TypeError, match="n_iter_max: an integer"):
        blco.cp_als(path, 2, n_iter_max=1.5)
    assert len(blco.cp_als(path, np.int64(2), n_iter_max=np.int32(1)).weights) == 2
    ind, val, _ = tiny()
    n = blco.from_coo(ind.astype(np.uint64), val, dense.shape, tmp_path / "u.blco")
    assert n == len(val)
    n = blco.from_coo(ind.astype(np.uint32), val, dense.shape, tmp_path / "u32.blco")
    assert n == len(val)
    assert (tmp_path / "u.blco").read_bytes() == (tmp_path / "u32.blco").read_bytes()
    big = ind.astype(np.uint64)
    big[3, 1] = 2**64 - 1
    with pytest.raises(ValueError, match=r"indices\[3, 1\] = 18446744073709551615 is outside"):
        blco.from_coo(big, val, dense.shape, tmp_path / "b.blco")
    for v, word in ((np.nan, "NaN"), (np.inf, "infinite"), (-np.inf, "infinite")):
        bad = val.copy()
        bad[7] = v
        with pytest.raises(ValueError, match=rf"values\[7\] is {word}"):
            blco.from_coo(ind, bad, dense.shape, tmp_path / "n.blco")
    t = blco.open(path)
    t.close()
    with pytest.raises(ValueError, match="closed"):
        blco.cp_als(t, 2, n_iter_max=1)


def test_cp_als_text_leaves_no_temporary(tmp_path):
    """cp_als on .tns text: killed (SIGKILL) while it runs, it leaves no packed copy in the
    temporary directory (issue 33: /tmp/blco-*/tensor.blco stayed forever); a folder that a
    process killed while packing left is removed by the next call."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    rng = np.random.default_rng(9)
    dims = (300, 200, 100)
    flat = np.unique(rng.integers(0, int(np.prod(dims)), size=100000))
    ind = np.stack(np.unravel_index(flat, dims), axis=1)
    write_tns(tmp_path / "x.tns", ind, rng.uniform(size=len(flat)))
    marker = tmp_path / "running"
    code = ("import blco, sys\n"
            "def cb(it):\n"
            "    open(sys.argv[2], 'w').close()\n"
            "blco.cp_als(sys.argv[1], 4, n_iter_max=100000, tol=0, callback=cb)\n")
    env = dict(os.environ, TMPDIR=str(tmp))
    p = subprocess.Popen([sys.executable, "-c", code, str(tmp_path / "x.tns"), str(marker)],
                         env=env)
    try:
        for _ in range(600):
            if marker.exists() or p.poll() is not None:
                break
            time.sleep(0.1)
        assert marker.exists(), "cp_als never ran an iteration"
        left_while_running = list(tmp.rglob("*"))
    finally:
        p.kill()
        p.wait()
    assert left_while_running == [], left_while_running
    assert list(tmp.rglob("*")) == []
    # a folder of a dead process (a kill during the pack), one of a live one
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp / f"blco-cp-{dead.pid}-abc").mkdir()
    (tmp / f"blco-cp-{dead.pid}-abc" / "tensor.blco").write_bytes(b"x" * 100)
    (tmp / f"blco-cp-{os.getpid()}-def").mkdir()
    r = subprocess.run([sys.executable, "-c", "import blco, sys; "
                        "blco.cp_als(sys.argv[1], 2, n_iter_max=1)", str(tmp_path / "x.tns")],
                       env=env, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp.iterdir()) == [f"blco-cp-{os.getpid()}-def"]


def test_sigint_interrupts_pack(tmp_path):
    """Ctrl-C during blco.pack: KeyboardInterrupt, and neither the output nor a temporary or
    spill file is left behind."""
    rng = np.random.default_rng(6)
    n = 300000
    ind = rng.integers(1, 1000, size=(n, 3))
    with open(tmp_path / "big.tns", "w") as f:
        np.savetxt(f, np.column_stack([ind, rng.uniform(size=n)]), fmt="%d %d %d %.6f")
    calls = []

    def on_progress(p):
        calls.append(p["phase"])
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        blco.pack(tmp_path / "big.tns", tmp_path / "big.blco", progress=on_progress)
    assert sorted(os.listdir(tmp_path)) == ["big.tns"]
    blco.pack(tmp_path / "big.tns", tmp_path / "big.blco", mem_limit="256M")
    with blco.open(tmp_path / "big.blco") as t:
        assert t.nnz > 0 and t.dims == tuple(int(x) for x in ind.max(axis=0))


def rss_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    pytest.skip("no /proc/self/status")


def test_no_leak(packed, tmp_path):
    """Every entry point in a loop, the failing paths too: the RSS stays flat."""
    path, dense = packed
    factors = [np.ones((d, 4)) for d in dense.shape]
    ind, val, _ = tiny()
    write_tns(tmp_path / "l.tns", ind, val)

    def cycle(n):
        for _ in range(n):
            with blco.open(path, mem_limit="64M") as t:
                t.mttkrp(1, factors)
                t.info()
                t.stats()
            blco.pack(tmp_path / "l.tns", tmp_path / "l.blco", force=True)
            blco.from_coo(ind, val, dense.shape, tmp_path / "c.blco", force=True)
            blco.cp_als(path, 2, n_iter_max=3, tol=0)
            for bad in (lambda: blco.open(tmp_path / "missing.blco"),
                        lambda: blco.cp_als(path, 2, mem_limit=4096),
                        lambda: t.mttkrp(0, factors)):
                with pytest.raises((OSError, MemoryError, ValueError)):
                    bad()

    cycle(10)  # warm up allocator pools and thread stacks
    tracemalloc.start()
    before, py_before = rss_kib(), tracemalloc.get_traced_memory()[0]
    cycle(60)
    grown, py_grown = rss_kib() - before, tracemalloc.get_traced_memory()[0] - py_before
    tracemalloc.stop()
    # C memory (RSS: a stream's ring alone is 8 KiB) and Python objects (arrays, dicts)
    assert grown < 2048, f"RSS grew by {grown} KiB over 60 rounds of every call"
    assert py_grown < 64 << 10, f"Python objects grew by {py_grown} B over 60 rounds"


def test_tol_is_relative_and_low_fit_warns(tmp_path):
    """Issue 34: tol is relative to the fit, so random data (fit near 0, moving by about
    1e-6 an iteration) does not 'converge' after 2 iterations; a fit near 0 warns."""
    rng = np.random.default_rng(3)
    dims = (2000, 1500, 1000)
    ind = np.stack([rng.integers(0, d, 20000) for d in dims], 1)
    blco.from_coo(ind, rng.uniform(0.5, 1, 20000), dims, tmp_path / "r.blco")
    with pytest.warns(RuntimeWarning, match="near 0: the rank-2 CP model"):
        res = blco.cp_als(tmp_path / "r.blco", 2, n_iter_max=6, tol=1e-5)
    assert res.fit < 0.01 and res.iterations == 6 and not res.converged
    # an exact rank-2 tensor converges with no warning
    a, b, c = (rng.uniform(0.1, 1, (d, 2)) for d in (12, 10, 8))
    dense = np.einsum("ar,br,cr->abc", a, b, c)
    blco.from_coo(np.argwhere(dense != 0), dense[dense != 0], dense.shape, tmp_path / "l.blco")
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = blco.cp_als(tmp_path / "l.blco", 2, n_iter_max=500, tol=1e-7)
    assert res.converged and res.fit > 0.999


def low_multilinear_rank(tmp_path, dims=(14, 12, 10), ranks=(3, 2, 4), seed=5):
    """A dense tensor of multilinear rank `ranks` written as .blco, and its dense form."""
    rng = np.random.default_rng(seed)
    core = rng.uniform(-1, 1, ranks)
    us = [np.linalg.qr(rng.normal(size=(d, r)))[0] for d, r in zip(dims, ranks)]
    dense = np.einsum("abc,ia,jb,kc->ijk", core, *us)
    path = tmp_path / "tk.blco"
    blco.from_coo(np.argwhere(np.ones(dims)), dense.ravel(), dims, path)
    return path, dense


def test_tucker_tensorly_layout(tmp_path):
    """Issue 34: blco.tucker returns TensorLy's (core, factors): core R_0 x .. x R_{N-1},
    factors I_n x R_n with orthonormal columns, mode 0 first; the tensor is rebuilt from them."""
    path, dense = low_multilinear_rank(tmp_path)
    res = blco.tucker(path, [3, 2, 4], n_iter_max=10, tol=0)
    core, factors = res
    assert core.shape == (3, 2, 4) and [f.shape for f in factors] == [(14, 3), (12, 2), (10, 4)]
    for f in factors:
        np.testing.assert_allclose(f.T @ f, np.eye(f.shape[1]), atol=1e-10)
    rebuilt = np.einsum("abc,ia,jb,kc->ijk", core, *factors)
    np.testing.assert_allclose(rebuilt, dense, atol=1e-9 * np.abs(dense).max())
    assert res.fit > 0.9999999 and res.iterations == 10 and len(res.fit_history) == 10
    # an int rank means every mode; .tns text is packed first
    write_tns(tmp_path / "tk.tns", np.argwhere(np.ones(dense.shape)), dense.ravel())
    assert blco.tucker(tmp_path / "tk.tns", 2, n_iter_max=3).core.shape == (2, 2, 2)
    with pytest.raises(ValueError, match="2 ranks for a tensor of 3 modes"):
        blco.tucker(path, [2, 2])
    with pytest.raises(ValueError, match=r"rank\[0\] = 15: each rank is from 1 to its mode's"):
        blco.tucker(path, [15, 2, 2])
    try:
        import tensorly as tl
    except ImportError:
        return
    np.testing.assert_allclose(tl.tucker_to_tensor(res), dense, atol=1e-9 * np.abs(dense).max())


def test_tucker_matches_blco_tucker(tmp_path):
    """The same start (--init random, seed) gives blco-tucker's fit and factors."""
    path, _ = low_multilinear_rank(tmp_path, ranks=(4, 3, 3))
    res = blco.tucker(path, [2, 2, 2], n_iter_max=4, tol=0, init="random", random_state=3)
    run_tool("blco-tucker", path, "--ranks", "2x2x2", "--iters", 4, "--tol", 0, "--init", "random",
             "--seed", 3, "-q", "--out", tmp_path / "tk")
    summary = json.load(open(tmp_path / "tk" / "summary.json"))
    assert res.fit == pytest.approx(summary["fit"], rel=1e-12)
    for n in range(3):
        np.testing.assert_allclose(np.abs(res.factors[n]),
                                   np.abs(np.load(tmp_path / "tk" / f"U{n + 1}.npy")), atol=1e-10)


def test_tucker_fibers(tmp_path):
    """fibers as blco-tucker --fibers: on, off and auto give the same fits and factors (to
    rounding), and a bad value is refused."""
    path, _ = low_multilinear_rank(tmp_path, ranks=(4, 3, 3))
    runs = {f: blco.tucker(path, [2, 2, 2], n_iter_max=4, tol=0, init="random", fibers=f)
            for f in ("off", "on", "auto")}
    for f in ("on", "auto"):
        np.testing.assert_allclose(runs[f].fit_history, runs["off"].fit_history, rtol=1e-12)
        for n in range(3):
            np.testing.assert_allclose(np.abs(runs[f].factors[n]),
                                       np.abs(runs["off"].factors[n]), atol=1e-10)
    with pytest.raises(ValueError, match="fibers 'yes': one of auto, on, off"):
        blco.tucker(path, 2, fibers="yes")


def test_ttv_and_modes_numbered_from_0(packed):
    """Issue 34: ttv in every mode but one (TensorLy's multi_mode_dot with skip=mode), and
    modes numbered from 0 in Python, said when out of range."""
    path, dense = packed
    rng = np.random.default_rng(2)
    vs = [rng.uniform(-1, 1, d) for d in dense.shape]
    for mode in range(3):
        want = np.einsum("abc,a,b,c->" + "abc"[mode],
                         dense, *[v if m != mode else np.ones_like(v) for m, v in enumerate(vs)])
        got = blco.ttv(path, [v if m != mode else None for m, v in enumerate(vs)], mode)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)
        with blco.open(path) as t:
            np.testing.assert_allclose(blco.ttv(t, vs, mode), want, rtol=1e-12, atol=1e-14)
    with pytest.raises(ValueError, match="numbered 0 to 2 in Python"):
        blco.ttv(path, vs, 3)
    with blco.open(path) as t, pytest.raises(ValueError, match="numbered 0 to 2 in Python"):
        t.mttkrp(3, [np.ones((d, 2)) for d in dense.shape])
    with pytest.raises(ValueError, match=r"vectors\[1\]: shape \(3,\)"):
        blco.ttv(path, [vs[0], np.ones(3), vs[2]], 0)


def test_cp_als_to_tensorly(packed):
    """Issue 34: cp_als's result is TensorLy's (weights, factors): the tensor it models is
    sum_r w_r a_r o b_r o c_r, what tl.cp_to_tensor rebuilds."""
    path, dense = packed
    res = blco.cp_als(path, 3, n_iter_max=30, tol=0)
    weights, factors = res
    model = np.einsum("r,ar,br,cr->abc", weights, *factors)
    assert 1 - np.linalg.norm(dense - model) / np.linalg.norm(dense) == pytest.approx(res.fit,
                                                                                       abs=1e-8)
    try:
        import tensorly as tl
    except ImportError:
        return
    np.testing.assert_allclose(tl.cp_to_tensor(res), model, rtol=1e-12, atol=1e-14)


def test_readme_python_examples(tmp_path, capsys, monkeypatch):
    """README's Python blocks, run as they are (../shared/data read where the tests find
    it): the fit they announce, the layouts they hand to TensorLy."""
    readme = os.path.join(os.path.dirname(__file__), "..", "..", "README.md")
    import re
    blocks = re.findall(r"```python\n(.*?)```", open(readme).read(), re.S)
    assert len(blocks) == 2, len(blocks)
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[1], "README.md", "exec"), {})
    out = capsys.readouterr().out.split("\n")
    m = re.match(r"CP fit (\d\.\d+), Tucker fit (\d\.\d+), ttv \(5,\)$", out[0])
    assert m and float(m.group(1)) > 0.99999 and float(m.group(2)) > 0.99999, out
    assert all(float(x) < 1e-4 for x in out[1].split()), out
    if not os.path.exists(os.path.join(SHARED, "aminoacid.tns")):
        pytest.skip("no aminoacid.tns in ../shared/data")
    pytest.importorskip("matplotlib")
    monkeypatch.setenv("MPLBACKEND", "Agg")
    exec(compile(blocks[0].replace("../shared/data", SHARED), "README.md", "exec"), {})
    out = capsys.readouterr().out
    assert re.search(r"^fit 0\.97495 after \d+ iterations", out, re.M), out
    assert os.path.getsize("aminoacid-fit.png") > 0


def test_tucker_refuses_non_integer_ranks(packed):
    path, _ = packed
    for bad in (2.5, "3", [2, 2.0, 2], True):
        with pytest.raises(TypeError, match="rank: an int or one int per mode"):
            blco.tucker(path, bad)
