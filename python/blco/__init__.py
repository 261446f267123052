"""blco: out-of-core streaming of sparse tensors in the BLCO format, from Python.

numpy in and out; the GIL is released while the C library works; its errors are raised as
Python exceptions carrying its message:

- ``ValueError``: bad arguments, malformed input text, a corrupt or foreign file;
- ``MemoryError``: the memory budget (``mem_limit``) or a GPU's memory is too small, or
  memory ran out;
- ``OSError`` (with ``errno``, so ``FileNotFoundError`` and the like): the system's errors;
- ``RuntimeError``: a GPU backend asked for where no GPU answers (the library's reason);
- ``KeyboardInterrupt``: Ctrl-C (SIGINT) stopped the work; nothing is left half-written.

Functions: :func:`pack`, :func:`from_coo`, :func:`open` (a :class:`Tensor`), :func:`cp_als`,
:func:`tucker`, :func:`ttv`.

Modes are numbered from 0 here, as numpy axes and TensorLy modes are (``t.mttkrp(0, ...)``
is the first mode); the command-line tools number them from 1 (``--mode 1``).
"""

import operator as _operator
import os as _os
import shutil as _shutil
import sys as _sys
import tempfile as _tempfile
import time as _time
import warnings as _warnings

from . import _blco

__all__ = ["pack", "from_coo", "open", "cp_als", "tucker", "ttv", "Tensor", "CPResult",
           "TuckerResult", "__version__"]
__version__ = _blco.version()

Tensor = _blco.Tensor

_TEXT_SUFFIXES = (".tns", ".tns.gz", ".tns.zst", ".txt")


# Without an explicit progress=, a bar appears on a terminal once the work has run this long.
_AUTO_DELAY = 1.0


def _progress_arg(progress):
    """progress=None (auto): on a terminal, after _AUTO_DELAY seconds; True: at once."""
    if progress is None:
        return (_AUTO_DELAY if _sys.stderr.isatty() else None)
    return 0.0 if progress else None


def _progress_printer(delay=0.0):
    """A progress callback: tqdm when installed, else one line on standard error; nothing
    before ``delay`` seconds of work."""
    try:
        import tqdm  # noqa: F401
    except ImportError:
        tqdm = None
    state = {"bar": None, "phase": None, "shown": False}

    def show(p):
        if p["seconds"] < delay:
            return
        state["shown"] = True
        if tqdm is not None:
            if state["phase"] != p["phase"]:
                if state["bar"] is not None:
                    state["bar"].close()
                state["bar"] = tqdm.tqdm(desc=p["phase"], unit="nnz", unit_scale=True)
                state["phase"] = p["phase"]
            bar = state["bar"]
            done = p["nnz_done"] if p["phase"] != "parse" else p["nnz_read"]
            if p["nnz_phase"]:
                bar.total = p["nnz_phase"]
            bar.update(max(0, done - bar.n))
            return
        if p["phase"] == "parse" and p["file_size"]:
            pct = 100.0 * p["file_bytes"] / p["file_size"]
            line = f"blco.pack: parse {pct:5.1f}%  {p['nnz_read']} nonzeros"
        else:
            line = f"blco.pack: {p['phase']} {p['nnz_done']}/{p['nnz_phase']} nonzeros"
        _sys.stderr.write(f"\r{line}  {p['seconds']:.1f}s")
        _sys.stderr.flush()

    def close():
        if state["bar"] is not None:
            state["bar"].close()
        elif tqdm is None and state["shown"]:
            _sys.stderr.write("\n")

    return show, close


def pack(src, dst, mem_limit=None, codec="auto", progress=None, force=False, reorder="none"):
    """Convert the ``.tns`` text ``src`` (plain, gzip or zstd; ``"-"`` for standard input)
    into the ``.blco`` file ``dst``, out of core within ``mem_limit``.

    mem_limit: bytes (int) or a size string such as ``"512M"``; None for the default (three
        quarters of the available memory).
    codec: ``"auto"`` (only codecs a GPU decodes, unless zstd on the values makes a
        segment at least 20% smaller), ``"gpu"`` (only codecs a GPU decodes), ``"compact"``
        (zstd on the values wherever it saves 12%), ``"zstd"``, ``"raw"``, ``"narrow"`` or
        ``"delta"``; see ``blco-pack --help``.
    progress: True for a progress bar (tqdm when installed, else a plain line on standard
        error), False for none, None (default) for a bar on a terminal once the work has run
        a second, or a callable receiving a dict (phase, file_bytes, file_size, nnz_read,
        nnz_done, nnz_phase, seconds) about every quarter second.
    force: replace an existing ``dst`` (else FileExistsError); a ``dst`` that is ``src``
        itself (the same file under any name) is refused all the same (ValueError).
    reorder: ``"none"`` or ``"freq"``: relabel each mode's indices by decreasing nonzero count
        (see ``blco-pack --help``). Results (``mttkrp``, ``cp_als``) stay in the source's
        indices.

    Returns a dict of what was done (nnz, duplicates, dims, bytes_out, norm2, seconds...).
    ``dst`` appears only when complete.
    """
    close = None
    if progress is None or isinstance(progress, bool):
        delay = _progress_arg(progress)
        progress = None
        if delay is not None:
            progress, close = _progress_printer(delay)
    try:
        return _blco.pack(src, dst, mem_limit=mem_limit, codec=codec, progress=progress,
                          force=force, reorder=reorder)
    finally:
        if close is not None:
            close()


def from_coo(indices, values, dims, dst, codec="auto", force=False):
    """Write the coordinate tensor (``indices``, ``values``) of shape ``dims`` as the
    ``.blco`` file ``dst``.

    indices: integer array, nnz x order, 0-based (e.g. ``np.stack(sparse_array.coords, 1)``
        or ``np.stack([coo.row, coo.col], 1)`` of a scipy matrix).
    values: float array of nnz values. Repeated coordinates are summed.
    dims: the shape, one positive int per mode.

    Returns the number of nonzeros written.
    """
    return _blco.from_coo(indices, values, tuple(int(d) for d in dims), dst, codec=codec,
                          force=force)


def open(path, mem_limit=None, backend="auto", fibers="off", gpus=None,  # noqa: A001
         gpu_mem_limit=None, gpu_schedule="auto"):
    """Open the ``.blco`` file ``path`` for streaming within ``mem_limit``.

    backend: ``"cpu"`` (the CPU threads), ``"cuda"`` (every GPU), ``"hybrid"`` (every GPU and
        the CPU threads from one queue), or ``"auto"``: the GPUs when a real one answers,
        else the CPU (``stats()["backend_reason"]`` says which and why). ``"cuda"`` or
        ``"hybrid"`` with no GPU raise RuntimeError with the library's reason.
    gpus: the devices a GPU backend takes: an int or a list of them (as ``--gpus 0,2``);
        None (default): every one. A device that does not answer raises ValueError.
    gpu_mem_limit: device bytes each GPU may use (an int or a size string, as
        ``mem_limit``); None (default): what it has free. Too little raises MemoryError
        naming the GPU and what it needs. Both give a RuntimeWarning when the CPU runs
        the job (``backend="cpu"``, or ``"auto"`` with no real GPU).
    gpu_schedule: the order in which the GPUs' MTTKRP kernel takes the tensor's chunks, as
        ``--gpu-schedule``: ``"auto"`` (default) times ``"contiguous"`` and
        ``"interleaved"`` on each mode's first two passes after the first and keeps the
        faster; either of those forces it (a RuntimeWarning when the CPU runs the job).
        ``stats()["gpu_schedules"]`` says what each mode ran.
    fibers: ``"off"`` (default: the BLCO kernel), ``"auto"`` or ``"on"``: for a tensor held
        in memory, MTTKRPs on fiber copies (SPLATT's CSF, one per mode, built at a mode's
        first MTTKRP from ``mem_limit``), as ``blco-cpd --fibers``: worth it for repeated
        MTTKRPs; ``stats()["kernels"]`` names what each mode ran.

    Returns a :class:`Tensor` with ``dims`` (tuple), ``nnz``, ``norm`` (Frobenius),
    ``info()`` (a dict: the header, the path the engine took, its counters), ``stats()``
    (the engine's counters as a dict: backend, bytes_read, passes, busy_s...),
    ``mttkrp(mode, factors)`` (mode 0-based, as numpy axes; factors: one float64 array
    I_n x R per mode; returns a new I_mode x R array) and ``close()``; it is a context
    manager. :func:`ttv` takes it too.
    """
    return _blco.open(path, mem_limit=mem_limit, backend=backend, fibers=fibers, gpus=gpus,
                      gpu_mem_limit=gpu_mem_limit, gpu_schedule=gpu_schedule)


class CPResult(tuple):
    """``(weights, factors)`` in TensorLy's CP layout: ``weights`` shape (rank,),
    ``factors`` a list of I_n x rank arrays with unit-norm columns. Unpacks as a pair, so
    ``tensorly.cp_to_tensor(res)`` and ``w, f = res`` work; besides:

    fit: the final fit, 1 - ||X - Xhat|| / ||X||;
    fit_history: numpy array, the fit after each iteration;
    iter_seconds: numpy array, wall time of each iteration;
    iterations, converged (stopped by tol rather than n_iter_max), seconds (total);
    backend: "cpu", "cuda" or "hybrid", the backend that ran (``counters["backend_reason"]``
    says why); counters: the engine's counters at the end of the run, a dict as
    :meth:`Tensor.stats` returns (bytes_read, passes, nnz_computed, busy_s, wait_s...);
    describe: one line on the path the engine took.
    """

    def __new__(cls, r):
        self = super().__new__(cls, (r["weights"], r["factors"]))
        self.weights = r["weights"]
        self.factors = r["factors"]
        self.fit = r["fit"]
        self.fit_history = r["fit_history"]
        self.iter_seconds = r["iter_seconds"]
        self.iterations = r["iterations"]
        self.converged = r["converged"]
        self.seconds = r["seconds"]
        self.describe = r["describe"]
        self.backend = r["backend"]
        self.counters = r["counters"]
        return self

    def __repr__(self):
        return (f"CPResult(rank={len(self.weights)}, fit={self.fit:.6f}, "
                f"iterations={self.iterations}, converged={self.converged})")


class TuckerResult(tuple):
    """``(core, factors)`` in TensorLy's Tucker layout: ``core`` an R_0 x .. x R_{N-1} array,
    ``factors`` a list of I_n x R_n arrays with orthonormal columns, so that the tensor is
    about ``core`` multiplied by ``factors[n]`` along each mode n
    (``tensorly.tucker_to_tensor(res)``). Unpacks as a pair; besides: fit (1 - ||X - Xhat||
    / ||X||), fit_history, iterations, converged, backend and counters, as
    :class:`CPResult`.
    """

    def __new__(cls, r):
        self = super().__new__(cls, (r["core"], r["factors"]))
        self.core = r["core"]
        self.factors = r["factors"]
        self.fit = r["fit"]
        self.fit_history = r["fit_history"]
        self.iterations = r["iterations"]
        self.converged = r["converged"]
        self.backend = r["backend"]
        self.counters = r["counters"]
        return self

    def __repr__(self):
        return (f"TuckerResult(rank={self.core.shape}, fit={self.fit:.6f}, "
                f"iterations={self.iterations}, converged={self.converged})")


def _warn_low_fit(fit, model):
    if fit < _blco.FIT_LOW:
        _warnings.warn(f"fit {fit:.3g} is near 0: the {model} model explains almost none of "
                       "the tensor (a tensor without low-rank structure, such as random data, "
                       "or too small a rank)", RuntimeWarning, stacklevel=3)


def _is_text(path):
    p = _os.fspath(path)
    if isinstance(p, bytes):
        p = _os.fsdecode(p)
    if p.endswith(_TEXT_SUFFIXES):
        return True
    try:
        with _os.fdopen(_os.open(p, _os.O_RDONLY), "rb") as f:
            head = f.read(4)
    except OSError:
        return False
    return head[:2] == b"\x1f\x8b" or head == b"\x28\xb5\x2f\xfd" or head[:1] in b"#0123456789"


# cp_als on .tns text packs it into a folder named blco-cp-<pid>-* in the temporary directory;
# the file goes as soon as the run has it open, so only a kill during the pack leaves one.
_TMP_PREFIX = "blco-cp-"


def _clean_stale_temps():
    """Removes what a killed cp_als left: folders blco-cp-<pid>-* of this user in the
    temporary directory whose <pid> is no running process (as the tools clean theirs)."""
    root = _tempfile.gettempdir()
    try:
        names = _os.listdir(root)
    except OSError:
        return
    for name in names:
        if not name.startswith(_TMP_PREFIX):
            continue
        pid = name[len(_TMP_PREFIX):].split("-", 1)[0]
        path = _os.path.join(root, name)
        try:
            if not pid.isdigit() or _os.lstat(path).st_uid != _os.getuid():
                continue
            _os.kill(int(pid), 0)
            continue  # alive (or not ours to signal): kept
        except ProcessLookupError:
            _shutil.rmtree(path, ignore_errors=True)
        except OSError:
            continue


def _rank_arg(rank, name="rank"):
    """An integer as numpy takes one (operator.index): 2.5 and "3" are refused, not
    truncated or parsed."""
    try:
        return _operator.index(rank)
    except TypeError:
        raise TypeError(f"{name}: an integer, not {type(rank).__name__} {rank!r}") from None


def _iteration_bar(n_iter_max, delay=0.0):
    """A per-iteration progress callback for cp_als: tqdm when installed, else one line on
    standard error; nothing before ``delay`` seconds of work. Returns (update, close)."""
    try:
        import tqdm
    except ImportError:
        tqdm = None
    t0 = _time.monotonic()
    state = {"bar": None, "shown": False}

    def update(it):
        if _time.monotonic() - t0 < delay:
            return
        state["shown"] = True
        if tqdm is not None:
            if state["bar"] is None:
                state["bar"] = tqdm.tqdm(total=n_iter_max, initial=it["iteration"] - 1,
                                         desc="CP-ALS", unit="it")
            state["bar"].update(1)
            state["bar"].set_postfix(fit=f"{it['fit']:.6f}")
            return
        _sys.stderr.write(f"\rblco.cp_als: iteration {it['iteration']}/{n_iter_max}  "
                          f"fit {it['fit']:.6f}  {it['seconds']:.2f}s")
        _sys.stderr.flush()

    def close():
        if state["bar"] is not None:
            state["bar"].close()
        elif state["shown"]:
            _sys.stderr.write("\n")

    return update, close


def cp_als(path_or_tensor, rank, n_iter_max=50, tol=1e-5, init="random", random_state=1,
           checkpoint=None, callback=None, mem_limit=None, backend="auto", resume=False,
           progress=None, fibers="auto", gpus=None, gpu_mem_limit=None, gpu_sorted=False,
           gpu_schedule="auto"):
    """Rank-``rank`` CP decomposition by alternating least squares, the tensor streamed from
    disk within ``mem_limit``.

    path_or_tensor: a ``.blco`` file, an open :class:`Tensor` (its file is used), or
        ``.tns`` text (packed first into a temporary ``.blco`` in a folder blco-cp-<pid>-* of
        the temporary directory, unlinked as soon as the run holds it open; a folder left by
        a process killed while packing is removed by the next such call).
    rank: an integer (``operator.index``: 2.5 or "3" raise TypeError, as numpy does).
    n_iter_max, tol: stop after n_iter_max iterations, or once the fit changes by less than
        tol times the fit from one iteration to the next (a relative tolerance: near a fit
        of 0 the run does not stop early; TensorLy's ``tol`` is an absolute change of the
        relative error 1 - fit, about blco's tol times the fit). 0: run n_iter_max.
        A final fit below 0.01 gives a ``RuntimeWarning`` (the model explains almost none
        of the tensor).
    init: ``"random"`` (uniform [0, 1), seeded by ``random_state``, an int) or a folder
        holding A1.npy..AN.npy.
    checkpoint: None, or a folder where the state is written after every iteration;
        ``resume=True`` continues from it. The resumed run equals an uninterrupted one bit
        for bit on the CPU and on ``backend="cuda"`` (a checkpointed run's GPU MTTKRPs are
        deterministic, as with ``blco-cpd --checkpoint``).
    callback: None, or a callable receiving a dict (iteration, fit, delta, seconds,
        mttkrp_seconds) after each iteration; an exception it raises stops the run and
        propagates.
    progress: True for a progress bar over the iterations (tqdm when installed, else a
        plain line on standard error), False for none, None (default) for a bar on a
        terminal once the run has taken a second.
    mem_limit, backend, gpus, gpu_mem_limit, gpu_schedule: as for :func:`open`.
    fibers: ``"auto"`` (default, as ``blco-cpd``): on a tensor held in memory, fiber copies
        of the modes where they pay; ``"on"``: every mode's (with ``backend="cuda"``, the
        copies on the GPUs, a part of the rows on each: slower than BLCO there, 0.52-0.83x
        on an H200); ``"off"``: the BLCO kernel only.
        ``.counters["kernels"]`` names what each mode ran.
    gpu_sorted: with ``backend="cuda"`` (experimental, as ``blco-cpd --gpu-sorted``): keep a
        copy of the tensor sorted by each mode on the GPUs (a part of its rows on each;
        14-20 bytes a nonzero per mode for 3 modes) and run each mode's MTTKRP on it; a mode whose
        copy does not fit keeps the BLCO kernel, and fiber copies (``fibers="on"``) take
        precedence. Not with a ``checkpoint`` (its MTTKRPs add with atomics) or on the CPU
        (a ``RuntimeWarning`` says it is not used). Not yet timed on a GPU. ``"auto"`` (as
        ``--gpu-sorted=auto``): the copies made, each mode's MTTKRP timed on the BLCO
        batches and on its copy, the faster kept and a losing copy freed (and the BLCO
        batches on the GPUs, once every mode runs on its copy); with ``n_iter_max`` under 5
        (the last mode is decided in iteration 4) no copies are made and a
        ``RuntimeWarning`` says so.

    Returns a :class:`CPResult`: the pair ``(weights, factors)`` with ``.fit``,
    ``.fit_history``, ``.iter_seconds``, ``.iterations``, ``.converged``, ``.seconds``,
    ``.backend`` and ``.counters`` (the engine's counters, a dict).
    """
    if isinstance(path_or_tensor, Tensor):
        if path_or_tensor.closed:
            raise ValueError("the tensor is closed")  # as Tensor.mttkrp says
        path_or_tensor = path_or_tensor.path
    rank = _rank_arg(rank)
    n_iter_max = _rank_arg(n_iter_max, "n_iter_max")
    if random_state is None:
        random_state = 1
    if not isinstance(random_state, int) or random_state < 0:
        raise ValueError("random_state: a non-negative int (the seed) or None")
    if isinstance(init, str) and init == "random":
        init_dir = None
    elif isinstance(init, (str, bytes, _os.PathLike)):
        init_dir = init
    else:
        raise ValueError("init: 'random' or a folder holding A1.npy..AN.npy")
    close = None
    delay = _progress_arg(progress)
    if delay is not None:
        update, close = _iteration_bar(int(n_iter_max), delay)
        user = callback

        def callback(it):
            update(it)
            if user is not None:
                user(it)
    kw = dict(n_iter_max=int(n_iter_max), tol=float(tol), random_state=random_state,
              init_dir=init_dir, checkpoint=checkpoint, resume=bool(resume), callback=callback,
              mem_limit=mem_limit, backend=backend, fibers=fibers, gpus=gpus,
              gpu_mem_limit=gpu_mem_limit,
              gpu_sorted=gpu_sorted if isinstance(gpu_sorted, str) else bool(gpu_sorted),
              gpu_schedule=gpu_schedule)
    try:
        if not _is_text(path_or_tensor):
            res = CPResult(_blco.cp_als(path_or_tensor, rank, **kw))
        else:
            _clean_stale_temps()
            tmp = _tempfile.mkdtemp(prefix=f"{_TMP_PREFIX}{_os.getpid()}-")
            fd = -1
            try:
                packed = _os.path.join(tmp, "tensor.blco")
                pack(path_or_tensor, packed, mem_limit=mem_limit, progress=progress)
                # Held open by this descriptor only: a kill -9 from here on leaves nothing.
                fd = _os.open(packed, _os.O_RDONLY)
                _os.unlink(packed)
                _os.rmdir(tmp)
                res = CPResult(_blco.cp_als(f"/proc/self/fd/{fd}", rank, **kw))
            finally:
                if fd >= 0:
                    _os.close(fd)
                _shutil.rmtree(tmp, ignore_errors=True)
    finally:
        if close is not None:
            close()
    _warn_low_fit(res.fit, f"rank-{int(rank)} CP")
    return res


def _with_blco(path_or_tensor, mem_limit, progress, run):
    """run(path) on a .blco file: a Tensor's, the path, or .tns text packed first into a
    temporary file (removed after)."""
    if isinstance(path_or_tensor, Tensor):
        return run(path_or_tensor.path)
    if not _is_text(path_or_tensor):
        return run(path_or_tensor)
    with _tempfile.TemporaryDirectory(prefix="blco-") as tmp:
        packed = _os.path.join(tmp, "tensor.blco")
        pack(path_or_tensor, packed, mem_limit=mem_limit, progress=progress)
        return run(packed)


def tucker(path_or_tensor, rank, n_iter_max=50, tol=1e-5, init="svd", random_state=1,
           mem_limit=None, backend="auto", progress=None, fibers="auto", gpus=None,
           gpu_mem_limit=None):
    """Tucker decomposition by HOOI (as ``blco-tucker``), the tensor streamed from disk
    within ``mem_limit``; TensorLy's ``tucker`` layout.

    path_or_tensor: a ``.blco`` file, a :class:`Tensor`, or ``.tns`` text (packed first
        into a temporary ``.blco``, removed after).
    rank: an int (every mode) or one int per mode, mode 0 first.
    n_iter_max, tol: stop after n_iter_max iterations (at most 1024), or once the fit
        changes by less than tol times the fit (relative, as for :func:`cp_als`).
    init: ``"svd"`` (or ``"hosvd"``: a randomized HOSVD start), ``"random"`` (orthonormal
        factors from ``random_state``), or a folder holding U1.npy..UN.npy.
    mem_limit, backend, gpus, gpu_mem_limit: as for :func:`open`; progress: as for
        :func:`pack`, for the packing of text.
    fibers: ``"auto"`` (default, as ``blco-tucker --fibers``), ``"on"`` or ``"off"``: on a
        tensor held in memory, the TTM chains on fiber copies of the tensor (one per mode,
        built once) where they pay.

    Returns a :class:`TuckerResult`: the pair ``(core, factors)`` with ``.fit``,
    ``.fit_history``, ``.iterations``, ``.converged``, ``.backend`` and ``.counters``. A
    final fit below 0.01 gives a ``RuntimeWarning``.
    """
    if random_state is None:
        random_state = 1
    if not isinstance(random_state, int) or random_state < 0:
        raise ValueError("random_state: a non-negative int (the seed) or None")
    if isinstance(init, str) and init in ("svd", "hosvd", "random"):
        init_name, init_dir = ("random" if init == "random" else "hosvd"), None
    elif isinstance(init, (str, bytes, _os.PathLike)):
        init_name, init_dir = "dir", init
    else:
        raise ValueError("init: 'svd', 'random' or a folder holding U1.npy..UN.npy")
    # integers only (as numpy's shapes): 2.5 or "3" are refused, not rounded
    if isinstance(rank, bool):
        raise TypeError("rank: an int or one int per mode")
    try:
        ranks, rank = None, _operator.index(rank)
    except TypeError:
        try:
            ranks = [_operator.index(r) for r in rank]
        except TypeError:
            raise TypeError("rank: an int or one int per mode") from None

    def run(path):
        rs = ranks
        if rs is None:
            with _blco.open(path) as t:
                rs = [int(rank)] * len(t.dims)
        return TuckerResult(_blco.tucker(path, rs, n_iter_max=int(n_iter_max), tol=float(tol),
                                         init=init_name, random_state=random_state,
                                         init_dir=init_dir, mem_limit=mem_limit,
                                         backend=backend, fibers=fibers, gpus=gpus,
                                         gpu_mem_limit=gpu_mem_limit))
    res = _with_blco(path_or_tensor, mem_limit, progress, run)
    _warn_low_fit(res.fit, "Tucker")
    return res


def ttv(path_or_tensor, vectors, mode, mem_limit=None, backend="auto", gpus=None,
        gpu_mem_limit=None):
    """Tensor times a vector in every mode but ``mode`` (0-based): the vector y of
    I_mode entries with y[i] = sum of x(i_0, .., i_{N-1}) * prod_{m != mode} vectors[m][i_m]
    over the nonzeros with i_mode = i, as TensorLy's
    ``tl.tenalg.multi_mode_dot(X, vectors, skip=mode)``. It is MTTKRP at rank 1 and runs as
    one, streamed (``blco-mttkrp --ttv``).

    path_or_tensor: a ``.blco`` file, an open :class:`Tensor` (used as it is), or ``.tns``
        text (packed first into a temporary ``.blco``).
    vectors: one 1-d array per mode, vectors[m] of I_m entries (vectors[mode] is not used
        and may be None).
    mem_limit, backend, gpus, gpu_mem_limit: as for :func:`open`, when a path is given.
    """
    import numpy as np

    def run_on(t):
        order = len(t.dims)
        if len(vectors) != order:
            raise ValueError(f"vectors: {len(vectors)} for a tensor of {order} modes")
        if not 0 <= mode < order:
            raise ValueError(f"mode {mode}: the tensor has {order} modes, numbered 0 to "
                             f"{order - 1} in Python")
        cols = []
        for m, v in enumerate(vectors):
            if m == mode:
                cols.append(np.zeros((1, 1)))
                continue
            a = np.asarray(v, dtype=np.float64)
            if a.ndim != 1 or a.shape[0] != t.dims[m]:
                raise ValueError(f"vectors[{m}]: shape {a.shape}, expected ({t.dims[m]},)")
            cols.append(a.reshape(-1, 1))
        return t.mttkrp(mode, cols)[:, 0]

    if isinstance(path_or_tensor, Tensor):
        return run_on(path_or_tensor)

    def run(path):
        with _blco.open(path, mem_limit=mem_limit, backend=backend, gpus=gpus,
                        gpu_mem_limit=gpu_mem_limit) as t:
            return run_on(t)
    return _with_blco(path_or_tensor, mem_limit, None, run)
