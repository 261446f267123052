# Type hints of the blco package (python/blco/__init__.py and the extension blco._blco).
import os
from typing import Any, Callable, Dict, List, Literal, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

_Path = Union[str, bytes, os.PathLike]
_Size = Union[int, str, None]
_Codec = Literal["auto", "raw", "narrow", "delta", "zstd", "gpu"]
_Backend = Literal["auto", "cpu", "cuda", "hybrid"]
_Fibers = Literal["auto", "on", "off"]
_Schedule = Literal["auto", "contiguous", "interleaved"]
_Gpus = Union[int, Sequence[int], None]

__version__: str

class Tensor:
    @property
    def dims(self) -> Tuple[int, ...]: ...
    @property
    def nnz(self) -> int: ...
    @property
    def norm(self) -> float: ...
    @property
    def closed(self) -> bool: ...
    @property
    def path(self) -> str: ...
    def info(self) -> Dict[str, Any]: ...
    def stats(self) -> Dict[str, Any]: ...
    def mttkrp(self, mode: int, factors: List[npt.ArrayLike]) -> npt.NDArray[np.float64]: ...
    def close(self) -> None: ...
    def __enter__(self) -> "Tensor": ...
    def __exit__(self, *exc: object) -> bool: ...

class CPResult(Tuple[npt.NDArray[np.float64], List[npt.NDArray[np.float64]]]):
    weights: npt.NDArray[np.float64]
    factors: List[npt.NDArray[np.float64]]
    fit: float
    fit_history: npt.NDArray[np.float64]
    iter_seconds: npt.NDArray[np.float64]
    iterations: int
    converged: bool
    seconds: float
    describe: str
    backend: Literal["cpu", "cuda", "hybrid"]
    counters: Dict[str, Any]

def pack(src: _Path, dst: _Path, mem_limit: _Size = ..., codec: _Codec = ...,
         progress: Union[bool, None, Callable[[Dict[str, Any]], None]] = ...,
         force: bool = ..., reorder: Literal["none", "freq"] = ...) -> Dict[str, Any]: ...
def from_coo(indices: npt.ArrayLike, values: npt.ArrayLike, dims: Tuple[int, ...] | List[int],
             dst: _Path, codec: _Codec = ..., force: bool = ...) -> int: ...
def open(path: _Path, mem_limit: _Size = ..., backend: _Backend = ...,
         fibers: _Fibers = ..., gpus: _Gpus = ..., gpu_mem_limit: _Size = ...,
         gpu_schedule: _Schedule = ...) -> Tensor: ...
def cp_als(path_or_tensor: Union[_Path, Tensor], rank: int, n_iter_max: int = ...,
           tol: float = ..., init: Union[Literal["random"], _Path] = ...,
           random_state: Optional[int] = ..., checkpoint: Optional[_Path] = ...,
           callback: Optional[Callable[[Dict[str, Any]], object]] = ...,
           mem_limit: _Size = ..., backend: _Backend = ..., resume: bool = ...,
           progress: Optional[bool] = ..., fibers: _Fibers = ..., gpus: _Gpus = ...,
           gpu_mem_limit: _Size = ..., gpu_sorted: Union[bool, Literal["auto"]] = ...,
           gpu_schedule: _Schedule = ...) -> CPResult: ...

class TuckerResult(Tuple[npt.NDArray[np.float64], List[npt.NDArray[np.float64]]]):
    core: npt.NDArray[np.float64]
    factors: List[npt.NDArray[np.float64]]
    fit: float
    fit_history: npt.NDArray[np.float64]
    iterations: int
    converged: bool
    backend: Literal["cpu", "cuda", "hybrid"]
    counters: Dict[str, Any]

def tucker(path_or_tensor: Union[_Path, Tensor], rank: Union[int, List[int], Tuple[int, ...]],
           n_iter_max: int = ..., tol: float = ...,
           init: Union[Literal["svd", "hosvd", "random"], _Path] = ...,
           random_state: Optional[int] = ..., mem_limit: _Size = ..., backend: _Backend = ...,
           progress: Optional[bool] = ..., fibers: _Fibers = ..., gpus: _Gpus = ...,
           gpu_mem_limit: _Size = ...) -> TuckerResult: ...
def ttv(path_or_tensor: Union[_Path, Tensor], vectors: List[Optional[npt.ArrayLike]], mode: int,
        mem_limit: _Size = ..., backend: _Backend = ..., gpus: _Gpus = ...,
        gpu_mem_limit: _Size = ...) -> npt.NDArray[np.float64]: ...
