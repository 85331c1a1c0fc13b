"""CUDA in a rank process: refused with a clear error. The kernel confinement stops the driver
(docs/limits.md, GPUs: measured on an H100, cudaGetDeviceCount fails with error 304 "OS call
failed" because the seccomp filter refuses its abstract Unix socket and Landlock its writes under
/proc/self/task), and simfs simulates collectives on CPU tensors only. So in a rank of a CUDA
build of torch, ``torch.cuda.is_available()`` is False without asking the driver (code that falls
back to the CPU does), and whatever would start CUDA (``.cuda()``, ``device="cuda"``,
``init_device_mesh("cuda", ...)``, ``torch.cuda.set_device``) raises an error that says why.
torch's C++ starts CUDA through ``torch.cuda._lazy_init``, so replacing it covers those paths."""

from __future__ import annotations

import sys

WHY = ("simfs: CUDA cannot start in a simulated rank: the rank process's kernel confinement refuses what "
       "the CUDA driver needs (an abstract Unix socket, writes under /proc/self/task), and simfs simulates "
       "torch.distributed on CPU tensors ('nccl' included). Run the job's tensors on the CPU inside simfs "
       "(docs/limits.md, GPUs)")


def _refused() -> None:
    raise RuntimeError(WHY)


def _unavailable() -> bool:
    return False


def refuse_cuda() -> None:
    """In a rank process whose torch was built with CUDA: no device, and a clear error for any
    attempt to start one (a CPU build keeps torch's own "not compiled with CUDA" error)."""
    torch = sys.modules.get("torch")
    if torch is None or not torch.cuda._is_compiled():
        return
    torch.cuda.is_available = _unavailable
    torch.cuda._lazy_init = _refused
