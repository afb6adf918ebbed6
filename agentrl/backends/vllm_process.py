"""What an in-process vLLM engine changes in this process, and the guards that undo or avoid it.

- vLLM's CPU worker lowers torch's thread count and replaces ``torch.set_num_threads``
  process-wide; the engine reseeds the global RNGs (python, numpy, torch) with its own seed.
  :func:`kept_process_state` restores all of it after start, so the learner keeps its threads and
  the run's random streams.
- On CPU, engine calls run with torch.compile (dynamo) off (:func:`engine_call_context`):
  compiling its sampler ops costs ~15 s per shape on a laptop CPU.
- ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` is set only while the engine starts (:func:`scoped_env`).
- A loaded llvmlite (numba) would break vLLM's start-up module scan
  (:func:`guard_llvmlite_for_kernel_scan`).
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

__all__ = [
    "RNGState",
    "engine_call_context",
    "guard_llvmlite_for_kernel_scan",
    "kept_process_state",
    "on_cpu",
    "quiet_kernel_scan",
    "scoped_env",
]


def on_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


@contextlib.contextmanager
def engine_call_context(cpu: bool) -> Iterator[None]:
    """On CPU, run engine calls with dynamo off (vLLM compiles sampler helpers otherwise)."""
    if not cpu:
        yield
        return
    import torch._dynamo

    before = torch._dynamo.config.disable
    torch._dynamo.config.disable = True
    try:
        yield
    finally:
        torch._dynamo.config.disable = before


@contextlib.contextmanager
def scoped_env(name: str, value: str) -> Iterator[None]:
    """Set an environment variable for the block only (it must not leak into subprocesses the
    user starts later, e.g. a ``vllm serve``)."""
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before


def guard_llvmlite_for_kernel_scan() -> None:
    """Let vLLM's start-up scan of ``sys.modules`` survive a loaded llvmlite (numba).

    vLLM 0.32's worker start (``register_triton_kernel_overrides``) calls ``vars(value).get(...)``
    on every attribute of every loaded module that has a ``__dict__``. llvmlite's ``ffi.lib``
    answers *any* attribute, ``__dict__`` included, with a C-function wrapper, so the scan raises
    ``AttributeError: '_lib_fn_wrapper' object has no attribute 'get'`` whenever numba was imported
    before the engine starts in-process (any user package that imports numba hits it; WebShop's
    search used to, through bm25s).
    Giving ``ffi.lib`` a real (empty) ``__dict__`` entry in its function table makes it answer the
    scan with a dict; llvmlite never looks up a C function of that name.
    """
    ffi = sys.modules.get("llvmlite.binding.ffi")
    fntab = getattr(getattr(ffi, "lib", None), "_fntab", None)
    if isinstance(fntab, dict):
        fntab.setdefault("__dict__", {})


@contextlib.contextmanager
def quiet_kernel_scan() -> Iterator[None]:
    """Keep vLLM's start-up scan of ``sys.modules`` from printing torch's deprecation warning.

    The scan (vLLM 0.32 ``_rebind_kernels``, see :func:`guard_llvmlite_for_kernel_scan`) calls
    ``hasattr(value, "__dict__")`` and ``vars(value)`` on every attribute of every loaded module,
    ``torch.distributed.reduce_op`` included: that object warns on any attribute access, so every
    in-process engine start printed two ``FutureWarning: torch.distributed.reduce_op is
    deprecated`` lines that no code of the run had caused. Only that message, only during the
    start, is ignored."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore",
            message=r"`torch\.distributed\.reduce_op` is deprecated",
            category=FutureWarning,
        )
        yield


@dataclass
class RNGState:
    """The process's global random states (python, numpy, torch CPU and CUDA)."""

    python: Any
    numpy: Any
    torch_cpu: torch.Tensor
    torch_cuda: list[torch.Tensor] | None

    @classmethod
    def save(cls) -> RNGState:
        cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_initialized() else None
        return cls(random.getstate(), np.random.get_state(), torch.get_rng_state(), cuda)

    def restore(self) -> None:
        random.setstate(self.python)
        np.random.set_state(self.numpy)
        torch.set_rng_state(self.torch_cpu)
        if self.torch_cuda is not None:
            torch.cuda.set_rng_state_all(self.torch_cuda)


@contextlib.contextmanager
def kept_process_state(cpu: bool) -> Iterator[None]:
    """Run an engine start-up, then restore the global RNGs, ``torch.set_num_threads`` and (on
    CPU) torch's thread count as they were before it."""
    threads = torch.get_num_threads()
    set_num_threads = torch.set_num_threads
    rng = RNGState.save()
    try:
        yield
    finally:
        torch.set_num_threads = set_num_threads
        if cpu and torch.get_num_threads() != threads:
            torch.set_num_threads(threads)
        rng.restore()
