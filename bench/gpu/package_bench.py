"""Cost per sample of gpumem.gpus() against the anchors reading the same fields, on the GPU machine: pynvml
(name, uuid, bus id, memory, utilization, temperature, power, clocks, processes per GPU) and GPUtil (which runs
nvidia-smi), each when importable. Prints one line per reader: median ms per sample over N samples."""
import os
import statistics
import time

import gpumem

N = int(os.environ.get("N", "30"))


def timed(name, fn):
    fn()  # warm: imports, library loads
    samples = []
    for _ in range(N):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    print(f"COST {name:40s} median {statistics.median(samples):8.2f} ms  min {min(samples):8.2f} ms")


timed("gpumem.gpus()", gpumem.gpus)
timed("gpumem.gpus(with_processes=False)", lambda: gpumem.gpus(with_processes=False))
timed("gpumem.processes()", gpumem.processes)
try:
    import pynvml
    pynvml.nvmlInit()

    def pynvml_sample():
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            out.append((pynvml.nvmlDeviceGetName(h), pynvml.nvmlDeviceGetUUID(h),
                        pynvml.nvmlDeviceGetPciInfo(h).busId, pynvml.nvmlDeviceGetMemoryInfo(h),
                        pynvml.nvmlDeviceGetUtilizationRates(h), pynvml.nvmlDeviceGetTemperature(h, 0),
                        pynvml.nvmlDeviceGetPowerUsage(h), pynvml.nvmlDeviceGetClockInfo(h, 1),
                        pynvml.nvmlDeviceGetClockInfo(h, 2), pynvml.nvmlDeviceGetComputeRunningProcesses(h)))
        return out
    timed("pynvml (same fields, init once)", pynvml_sample)
except ImportError:
    print("SKIP pynvml not installed")
try:
    import GPUtil
    timed("GPUtil.getGPUs() (runs nvidia-smi)", GPUtil.getGPUs)
except ImportError:
    print("SKIP GPUtil not installed")
