"""The registry and helpers of bench/gpu/torch_checks.py (shared with torch_checks_processes.py)."""
import hashlib
import json

import torch

CHECKS = {}
GiB, MiB = 1 << 30, 1 << 20


def check(source="", detail=False, gpus=1):
    def register(fn):
        CHECKS[fn.__name__] = {"fn": fn, "source": source, "detail": detail, "gpus": gpus}
        return fn
    return register


def digest(values):
    return hashlib.sha256(json.dumps(values).encode()).hexdigest()[:16]


def fill_others(n=64, numel=1 << 18, value=7.0):
    """Allocates and fills tensors that a correct allocator must keep apart from any live graph's memory."""
    return [torch.full((numel,), value, device="cuda") for _ in range(n)]
