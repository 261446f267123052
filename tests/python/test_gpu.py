# The Python package on the GPU backends (a real GPU, or the SIMT emulation of a
# -Dcuda-emulation=true build): cp_als and tucker with backend "cuda" and "hybrid" give the
# CPU's fit, keep the factors and the dense steps on the device (what crosses the bus per
# iteration is small: R x R-sized for CP-ALS, HOOI's Grams and core), copy nothing large from
# pageable memory, and "auto" takes the GPU only when a real one answers. Skipped where no
# GPU answers.
import os

import numpy as np
import pytest

import blco

SHARED = os.environ.get("BLCO_SHARED_DATA",
                        os.path.join(os.path.dirname(__file__), "..", "..", "..", "shared", "data"))


def pack_random(d, name, dims, nnz, seed):
    """A random tensor of `nnz` distinct coordinates in `dims`, packed to d/name.blco."""
    rng = np.random.default_rng(seed)
    flat = rng.choice(int(np.prod(dims)), size=nnz, replace=False)
    ind = np.stack(np.unravel_index(flat, dims), axis=1)
    val = rng.uniform(0.1, 1, size=len(flat))
    src = d / f"{name}.tns"
    with open(src, "w") as f:
        for i, v in zip(ind, val):
            f.write(" ".join(str(x + 1) for x in i) + f" {v!r}\n")
    dst = d / f"{name}.blco"
    blco.pack(str(src), str(dst), mem_limit="64M")
    return dst


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    dst = pack_random(tmp_path_factory.mktemp("gpu"), "g", (40, 30, 20), 3000, 5)
    try:
        with blco.open(dst, backend="cuda") as t:
            emulated = "emulation" in t.stats()["backend_reason"]
    except RuntimeError as e:
        pytest.skip(f"no GPU answers: {e}")
    return dst, emulated


def bus_bytes(counters):
    return sum(counters["gpu_h2d"].values()) + sum(counters["gpu_d2h"].values())


def test_cp_als_cuda_and_hybrid_match_cpu(packed):
    path, _ = packed
    ref = blco.cp_als(path, 4, n_iter_max=8, tol=0, backend="cpu")
    for b in ("cuda", "hybrid"):
        res = blco.cp_als(path, 4, n_iter_max=8, tol=0, backend=b)
        assert res.backend == b
        np.testing.assert_allclose(res.fit_history, ref.fit_history, rtol=0, atol=1e-10)
        for m in range(3):
            np.testing.assert_allclose(np.abs(res.factors[m]), np.abs(ref.factors[m]),
                                       rtol=1e-6, atol=1e-9)
        assert res.counters["pageable_copies"] == 0, res.counters
        assert res.counters["gpu_staged_bytes"] == 0, res.counters
        # the host's seconds around the passes' batches (factors on the devices: short)
        assert 0 < res.counters["gpu_host_begin_seconds"] < 60, res.counters
        assert 0 < res.counters["gpu_host_end_seconds"] < 60, res.counters


def test_cp_als_cuda_fibers(packed):
    """fibers="on" with backend="cuda": every mode on its fiber copy on the GPU(s), the
    CPU's fit, and after the copies' upload only small algebra over the bus."""
    path, _ = packed
    ref = blco.cp_als(path, 4, n_iter_max=8, tol=0, backend="cpu")
    short = blco.cp_als(path, 4, n_iter_max=2, tol=0, backend="cuda", fibers="on")
    res = blco.cp_als(path, 4, n_iter_max=8, tol=0, backend="cuda", fibers="on")
    assert res.counters["kernels"] == ["gpu-fibers"] * 3, res.counters
    np.testing.assert_allclose(res.fit_history, ref.fit_history, rtol=0, atol=1e-10)
    assert res.counters["pageable_copies"] == 0, res.counters
    assert res.counters["gpu_h2d"]["tensor"] == short.counters["gpu_h2d"]["tensor"] > 0


def test_cp_als_cuda_sorted(packed):
    """gpu_sorted=True with backend="cuda": every mode on its copy sorted by the mode, the
    CPU's fit; fiber copies take precedence."""
    path, _ = packed
    ref = blco.cp_als(path, 4, n_iter_max=8, tol=0, backend="cpu")
    res = blco.cp_als(path, 4, n_iter_max=8, tol=0, backend="cuda", gpu_sorted=True)
    assert res.counters["kernels"] == ["gpu-sorted"] * 3, res.counters
    np.testing.assert_allclose(res.fit_history, ref.fit_history, rtol=0, atol=1e-10)
    assert res.counters["pageable_copies"] == 0, res.counters
    fib = blco.cp_als(path, 4, n_iter_max=2, tol=0, backend="cuda", gpu_sorted=True,
                      fibers="on")
    assert fib.counters["kernels"] == ["gpu-fibers"] * 3, fib.counters
    off = blco.cp_als(path, 4, n_iter_max=2, tol=0, backend="cuda")
    assert "gpu-sorted" not in off.counters["kernels"], off.counters
    # "auto": each mode timed on its BLCO batches and its copy, the faster kept (either
    # kernel, the same fit)
    auto = blco.cp_als(path, 4, n_iter_max=8, tol=0, backend="cuda", gpu_sorted="auto")
    np.testing.assert_allclose(auto.fit_history, ref.fit_history, rtol=0, atol=1e-10)
    assert all(k in ("gpu-sorted", "gpu-register", "gpu-hierarchical")
               for k in auto.counters["kernels"]), auto.counters
    with pytest.warns(RuntimeWarning, match="gpu_sorted='auto': 3 iterations end before"):
        short = blco.cp_als(path, 4, n_iter_max=3, tol=0, backend="cuda", gpu_sorted="auto")
    assert "gpu-sorted" not in short.counters["kernels"], short.counters
    with pytest.raises(ValueError, match="gpu_sorted 'fast': True, False or 'auto'"):
        blco.cp_als(path, 4, n_iter_max=1, backend="cuda", gpu_sorted="fast")


def test_cp_als_cuda_moves_only_small_algebra(packed):
    path, _ = packed
    R, N = 4, 3
    short = blco.cp_als(path, R, n_iter_max=2, tol=0, backend="cuda")
    long = blco.cp_als(path, R, n_iter_max=6, tol=0, backend="cuda")
    per_iter = (bus_bytes(long.counters) - bus_bytes(short.counters)) / 4
    assert 0 < per_iter <= 65536 + N * R * R * 8, (short.counters, long.counters)
    # nothing of the tensor, the factors or the outputs after the first iteration
    for kind in ("tensor", "factors", "outputs"):
        assert long.counters["gpu_h2d"][kind] == short.counters["gpu_h2d"][kind], kind
        assert long.counters["gpu_d2h"][kind] == short.counters["gpu_d2h"][kind], kind


def test_tucker_cuda_and_hybrid_match_cpu_and_keep_y_on_the_device(packed):
    """HOOI's device backend (blco_stream_tucker_ops): the CPU's fits; after the first
    iterations no factor, Y(n) or tensor crosses the bus, only the small algebra."""
    path, _ = packed
    ref = blco.tucker(path, 3, n_iter_max=4, tol=0, backend="cpu")
    for b in ("cuda", "hybrid"):
        res = blco.tucker(path, 3, n_iter_max=4, tol=0, backend=b)
        assert res.backend == b
        np.testing.assert_allclose(res.fit_history, ref.fit_history, rtol=0, atol=1e-10)
        assert res.counters["pageable_copies"] == 0, res.counters
    short = blco.tucker(path, 3, n_iter_max=2, tol=0, backend="cuda")
    long = blco.tucker(path, 3, n_iter_max=4, tol=0, backend="cuda")
    for kind in ("tensor", "factors", "outputs"):
        assert long.counters["gpu_h2d"][kind] == short.counters["gpu_h2d"][kind], kind
        assert long.counters["gpu_d2h"][kind] == short.counters["gpu_d2h"][kind], kind
    per_iter = (bus_bytes(long.counters) - bus_bytes(short.counters)) / 2
    # per mode: a 9 x 9 Gram, V and 1 / sigma (30), four 3 x 3 matrices; the core (27)
    assert 0 < per_iter <= 3 * (81 + 30 + 36) * 8 + 27 * 8 + 64, (short.counters, long.counters)


def test_auto_takes_only_a_real_gpu(packed):
    path, emulated = packed
    res = blco.cp_als(path, 3, n_iter_max=2, tol=0, backend="auto")
    assert res.backend == ("cpu" if emulated else "cuda"), res.counters["backend_reason"]


def test_aminoacid_fit_on_the_gpu(tmp_path):
    src = os.path.join(SHARED, "aminoacid.tns")
    if not os.path.exists(src):
        pytest.skip("no ../shared/data/aminoacid.tns")
    dst = tmp_path / "a.blco"
    blco.pack(src, str(dst), mem_limit="64M")
    ref = blco.cp_als(dst, 3, n_iter_max=60, tol=0, backend="cpu")
    res = blco.cp_als(dst, 3, n_iter_max=60, tol=0, backend="cuda")
    assert abs(res.fit - ref.fit) <= 1e-10, (res.fit, ref.fit)


def test_gpu_mem_limit_too_small_is_a_memory_error_in_python_words(packed):
    path, _ = packed
    with pytest.raises(MemoryError) as e:
        blco.open(path, backend="cuda", gpu_mem_limit="4K")
    msg = str(e.value)
    # the GPU's memory, not the host's budget, in this package's keyword
    assert "device memory" in msg and "gpu_mem_limit" in msg, msg
    assert "--" not in msg and "mem_limit" not in msg.replace("gpu_mem_limit", ""), msg
    with pytest.raises(MemoryError, match="device memory"):
        blco.cp_als(path, 3, n_iter_max=2, backend="cuda", gpu_mem_limit=4096)
    # a limit that fits runs, and gives the CPU's answer
    ref = blco.cp_als(path, 3, n_iter_max=4, tol=0, backend="cpu")
    res = blco.cp_als(path, 3, n_iter_max=4, tol=0, backend="cuda", gpu_mem_limit="256M")
    np.testing.assert_allclose(res.fit_history, ref.fit_history, rtol=0, atol=1e-10)


def test_gpus_picks_devices_and_refuses_absent_ones(packed):
    path, _ = packed
    with blco.open(path, backend="cuda", gpus=0) as t:
        assert t.stats()["gpus"] == 1
    with pytest.raises(ValueError, match="device 63 does not answer"):
        blco.open(path, backend="cuda", gpus=[63])
    with pytest.raises(ValueError, match="twice"):
        blco.open(path, backend="cuda", gpus=[0, 0])
    for bad in ("0", [-1], [0.5], []):
        with pytest.raises(ValueError, match="gpus"):
            blco.open(path, backend="cuda", gpus=bad)


def test_gpus_on_two_emulated_devices(packed, tmp_path):
    path, emulated = packed
    if not emulated:
        pytest.skip("needs the SIMT emulation (BLCO_EMU_DEVICES makes two devices)")
    import subprocess
    import sys
    code = (
        "import sys, numpy as np, blco\n"
        "p = sys.argv[1]\n"
        "ref = blco.cp_als(p, 3, n_iter_max=4, tol=0, backend='cpu')\n"
        "for g, want in ((None, 2), ([1], 1), ([1, 0], 2)):\n"
        "    r = blco.cp_als(p, 3, n_iter_max=4, tol=0, backend='cuda', gpus=g)\n"
        "    assert r.counters['gpus'] == want, (g, r.counters['gpus'])\n"
        "    assert r.counters['backend_reason'].startswith(f'cuda on {want} GPU'), r.counters\n"
        "    np.testing.assert_allclose(r.fit_history, ref.fit_history, rtol=0, atol=1e-10)\n"
        "try:\n"
        "    blco.open(p, backend='cuda', gpus=[2])\n"
        "    sys.exit('device 2 was accepted')\n"
        "except ValueError as e:\n"
        "    assert 'device 2 does not answer (2 GPUs: 0 to 1)' in str(e), e\n"
        "print('ok')\n")
    env = dict(os.environ, BLCO_EMU_DEVICES="2")
    r = subprocess.run([sys.executable, "-c", code, str(path)], env=env, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0 and r.stdout.strip() == "ok", (r.stdout, r.stderr)


def test_tucker_keeps_room_for_y_on_the_gpus_as_blco_tucker_does(packed):
    """The stream is opened with room for HOOI's TTM chains kept out of residency
    (blco_tucker_device_keep): a limit too small says so, in this package's words."""
    path, _ = packed
    with pytest.raises(MemoryError) as e:
        blco.tucker(path, 3, n_iter_max=2, tol=0, backend="cuda", gpu_mem_limit="100K")
    msg = str(e.value)
    assert "for the TTM chains' Y, factors and row map" in msg, msg
    assert "raise gpu_mem_limit or lower the ranks" in msg and "--" not in msg, msg


def test_cp_als_cuda_chunk_schedules(tmp_path):
    """The GPUs' chunk schedule (blco-cpd --gpu-schedule auto): the two modes longer than
    the SM count run contiguous, then interleaved, then the faster by their measured kernel
    time, and both are reported; the mode of the hierarchical kernel runs neither. The fit
    is the CPU's."""
    dst = pack_random(tmp_path, "s", (300, 200, 20), 4000, 9)
    try:
        with blco.open(dst, backend="cuda") as t:
            pass
    except RuntimeError as e:
        pytest.skip(f"no GPU answers: {e}")
    ref = blco.cp_als(str(dst), 4, n_iter_max=6, tol=0, backend="cpu")
    res = blco.cp_als(str(dst), 4, n_iter_max=6, tol=0, backend="cuda")
    np.testing.assert_allclose(res.fit_history, ref.fit_history, rtol=0, atol=1e-10)
    sch = res.counters["gpu_schedules"]
    assert len(sch) == 3, sch
    for m in (0, 1):
        assert sch[m]["contiguous_passes"] >= 1 and sch[m]["interleaved_passes"] >= 1, sch
        assert sch[m]["contiguous_passes"] + sch[m]["interleaved_passes"] == 6, sch
        assert sch[m]["contiguous_ns_per_nnz"] > 0 and sch[m]["interleaved_ns_per_nnz"] > 0, sch
    assert sch[2] == {"contiguous_passes": 0, "interleaved_passes": 0,
                      "contiguous_ns_per_nnz": 0.0, "interleaved_ns_per_nnz": 0.0}, sch
    # forced: that schedule on every pass, nothing timed for the choice
    res = blco.cp_als(str(dst), 4, n_iter_max=3, tol=0, backend="cuda",
                      gpu_schedule="interleaved")
    np.testing.assert_allclose(res.fit_history, ref.fit_history[:3], rtol=0, atol=1e-10)
    sch = res.counters["gpu_schedules"]
    assert [(x["contiguous_passes"], x["interleaved_passes"]) for x in sch] == \
        [(0, 3), (0, 3), (0, 0)], sch
    with blco.open(dst, backend="cuda", gpu_schedule="contiguous") as t:
        f = [np.ones((d, 2)) for d in t.dims]
        for _ in range(3):
            t.mttkrp(0, f)
        assert t.stats()["gpu_schedules"][0]["contiguous_passes"] == 3, t.stats()
