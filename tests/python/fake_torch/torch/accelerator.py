"""torch.accelerator's memory functions, reduced to how they reach torch._C (looked up at call time)."""
import torch


def memory_stats(device_index=None):
    flat = []

    def flatten(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                flatten(f"{prefix}.{k}" if prefix else k, v)
        else:
            flat.append((prefix, value))

    flatten("", torch._C._accelerator_getDeviceStats(device_index))
    return dict(sorted(flat))


def memory_allocated(device_index=None):
    return memory_stats(device_index).get("allocated_bytes.all.current", 0)


def reset_accumulated_memory_stats(device_index=None):
    torch._C._accelerator_resetAccumulatedStats(device_index)
