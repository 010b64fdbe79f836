"""PyTorch memory behaviour checks, each run in a fresh process: natively and under `gpumem run`.

    python3 bench/gpu/torch_checks.py --list          # names, sources, flags
    python3 bench/gpu/torch_checks.py NAME            # one check here; prints "RESULT {json}", exit 0 = pass

scripts/torch-checks.py runs every check both ways and prints the table. Checks marked `detail` assert a
property of PyTorch's own caching allocator (its 2 MiB / 20 MiB segments) rather than of the API; they are
judged apart. `source` names the PyTorch test (test/test_cuda.py, test/test_multiprocessing.py) a check is
rewritten from. A check may return a digest (losses, tokens): the driver compares it between the two runs.
"""
import json
import os
import random
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from torch_checks_lib import CHECKS, GiB, MiB, check, digest, fill_others  # noqa: E402,F401


# ---- stats and queries (test_cuda.py: test_memory_stats, test_memory_allocation, ...) -------------------
@check("test_cuda.py:test_memory_stats")
def memory_stats_track_tensors():
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    xs = [torch.empty(4 * MiB, dtype=torch.uint8, device="cuda") for _ in range(4)]
    assert torch.cuda.memory_allocated() - base == 16 * MiB, torch.cuda.memory_allocated() - base
    assert torch.cuda.max_memory_allocated() >= base + 16 * MiB
    assert torch.cuda.memory_reserved() >= torch.cuda.memory_allocated()
    del xs
    assert torch.cuda.memory_allocated() == base
    torch.cuda.reset_peak_memory_stats()
    assert torch.cuda.max_memory_allocated() == base
    s = torch.cuda.memory_stats()
    assert s["allocation.all.current"] >= 0 and s["allocated_bytes.all.freed"] >= 16 * MiB, s


@check("issue 7: peaks over all streams")
def peaks_over_streams_are_exact():
    # 100 MiB allocated and freed on three streams in turn, then two held at once on two streams: the
    # peaks are those of all streams together, as PyTorch's one lock gives them.
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    streams = [torch.cuda.Stream() for _ in range(3)]
    for s in streams:
        with torch.cuda.stream(s):
            x = torch.empty(100 * MiB, dtype=torch.uint8, device="cuda")
            del x
        s.synchronize()
    peak = torch.cuda.max_memory_allocated() - base
    assert peak == 100 * MiB, peak
    with torch.cuda.stream(streams[0]):
        a = torch.empty(60 * MiB, dtype=torch.uint8, device="cuda")
    with torch.cuda.stream(streams[1]):
        b = torch.empty(70 * MiB, dtype=torch.uint8, device="cuda")
    del a, b
    torch.cuda.synchronize()
    s = torch.cuda.memory_stats()
    assert s["allocated_bytes.all.peak"] - base == 130 * MiB, s["allocated_bytes.all.peak"] - base
    assert s["allocation.all.peak"] >= 2 and s["allocated_bytes.all.current"] == base, s


@check("issue 7: part-pages shared between two addresses keep every tensor's bytes")
def part_page_sharing_keeps_data():
    # On a fresh stream (its own pool under gpumem): 3, 5 and 3 MiB, the 5 freed, 7 MiB stitched from its
    # pages, then 6.5 MiB, which gpumem starts in the free half of the first tensor's last 2 MiB page mapped
    # a second time (19 MiB after it). Then random sizes of 1.1-12 MiB held and freed: every live tensor is
    # filled with its own value and checked, at the end and every 50 steps.
    rng = random.Random(7)
    stream = torch.cuda.Stream()
    live = {}

    def new(key, nbytes):
        t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        t.fill_(hash(key) % 251)
        live[key] = t
        return t

    def verify():
        for key, t in live.items():
            assert bool((t == hash(key) % 251).all()), f"tensor {key} of {t.numel()} bytes was overwritten"

    with torch.cuda.stream(stream):
        a = new("a", 3 * MiB)
        new("b", 5 * MiB)
        new("c", 3 * MiB)
        del live["b"]
        new("d", 7 * MiB)
        e = new("e", 13 * MiB // 2)
        shared = e.data_ptr() - a.data_ptr() == 19 * MiB
        verify()
        for step in range(400):
            if live and rng.random() < 0.45:
                del live[rng.choice(sorted(live))]
            else:
                new(f"t{step}", int(rng.uniform(1.1, 12) * MiB) // 512 * 512)
            if step % 50 == 49:
                verify()
        verify()
    stream.synchronize()
    print("the 6.5 MiB tensor " + ("starts in a shared page" if shared else "shares no page"), file=sys.stderr)


@check("test_cuda.py:test_memory_stats (keys)")
def memory_stats_has_every_key():
    torch.empty(1, device="cuda")
    s = torch.cuda.memory_stats()
    for key in ("inactive_split.all.current", "inactive_split_bytes.large_pool.peak", "oversize_allocations.current",
                "oversize_segments.peak", "num_sync_all_streams", "num_device_alloc", "num_device_free",
                "requested_bytes.all.current", "max_split_size", "num_alloc_retries", "num_ooms",
                "active_bytes.small_pool.allocated", "segment.large_pool.freed", "reserved_bytes.all.peak"):
        assert key in s, key
    assert all(isinstance(v, int) for v in s.values())


@check("test_cuda.py:test_memory_stats (accumulated)")
def reset_accumulated_memory_stats():
    for _ in range(3):
        torch.empty(MiB, device="cuda")             # allocated and freed at once
    assert torch.cuda.memory_stats()["allocation.all.allocated"] >= 3
    torch.cuda.reset_accumulated_memory_stats()
    s = torch.cuda.memory_stats()
    assert s["allocation.all.allocated"] == 0 and s["allocation.all.freed"] == 0 and s["num_ooms"] == 0, s


@check("test_cuda.py:test_caching_allocator_alloc")
def caching_allocator_alloc_delete():
    base = torch.cuda.memory_allocated()
    p = torch.cuda.caching_allocator_alloc(MiB)
    assert p != 0 and torch.cuda.memory_allocated() == base + MiB
    torch.cuda.caching_allocator_delete(p)
    assert torch.cuda.memory_allocated() == base


@check("test_cuda.py:test_empty_cache")
def empty_cache_returns_memory():
    x = torch.empty(64 * MiB, dtype=torch.uint8, device="cuda")
    del x
    assert torch.cuda.memory_reserved() >= 64 * MiB
    free_before, _ = torch.cuda.mem_get_info()
    torch.cuda.empty_cache()
    assert torch.cuda.memory_reserved() == 0, torch.cuda.memory_reserved()
    assert torch.cuda.mem_get_info()[0] >= free_before + 60 * MiB


@check("test_cuda.py:test_memory_summary / list_gpu_processes / mem_get_info")
def summaries_and_info():
    x = torch.empty(8 * MiB, dtype=torch.uint8, device="cuda")
    assert "allocated" in torch.cuda.memory_summary().lower()
    assert isinstance(torch.cuda.list_gpu_processes(), str)
    free, total = torch.cuda.mem_get_info()
    assert 0 < free <= total
    assert torch.cuda.memory_snapshot() is not None
    del x


@check("torch.accelerator memory API")
def accelerator_memory_api():
    if not hasattr(torch, "accelerator") or not hasattr(torch.accelerator, "memory_stats"):
        return "no torch.accelerator memory API"
    x = torch.empty(2 * MiB, dtype=torch.uint8, device="cuda")
    assert torch.accelerator.memory_allocated() == torch.cuda.memory_allocated()
    assert torch.accelerator.memory_stats()["allocated_bytes.all.current"] >= 2 * MiB
    torch.accelerator.reset_peak_memory_stats()
    del x


@check("test_cuda.py:test_cuda_memory_usage (2 MiB small segments)", detail=True)
def small_segment_is_2mib():
    torch.empty(1, device="cuda")
    assert torch.cuda.memory_reserved() == 2 * MiB, torch.cuda.memory_reserved()


@check("test_cuda.py:test_large_allocation_segments (20 MiB for 1-10 MiB)", detail=True)
def medium_segment_is_20mib():
    torch.empty(5 * MiB, dtype=torch.uint8, device="cuda")
    assert torch.cuda.memory_reserved() == 20 * MiB, torch.cuda.memory_reserved()


# ---- limits and out of memory ----------------------------------------------------------------------------
@check("test_cuda.py:test_set_per_process_memory_fraction")
def memory_fraction_caps_allocations():
    total = torch.cuda.get_device_properties(0).total_memory
    torch.cuda.set_per_process_memory_fraction(0.5)
    assert abs(torch.cuda.get_per_process_memory_fraction() - 0.5) < 1e-9
    x = torch.empty(int(total * 0.45), dtype=torch.uint8, device="cuda")
    del x
    torch.cuda.empty_cache()
    try:
        torch.empty(int(total * 0.55), dtype=torch.uint8, device="cuda")
        raise AssertionError("no OOM above the fraction")
    except torch.cuda.OutOfMemoryError as e:
        assert "out of memory" in str(e).lower()
    torch.cuda.set_per_process_memory_fraction(1.0)
    torch.empty(int(total * 0.55), dtype=torch.uint8, device="cuda")


@check("test_cuda.py:test_out_of_memory")
def out_of_memory_type_and_recovery():
    a = torch.ones(1024, device="cuda")
    for size in (1 << 50, torch.cuda.get_device_properties(0).total_memory + GiB):
        try:
            torch.empty(size, dtype=torch.uint8, device="cuda")
            raise AssertionError("no OOM")
        except torch.cuda.OutOfMemoryError as e:
            assert isinstance(e, torch.OutOfMemoryError) and "out of memory" in str(e).lower(), repr(e)
    b = a * 2 + 1                                   # kernels still run, allocations still succeed
    assert b.sum().item() == 3 * 1024


@check("test_cuda.py:test_notifies_oom")
def out_of_memory_observer():
    seen = []
    torch._C._cuda_attach_out_of_memory_observer(lambda *args: seen.append(args))
    try:
        torch.empty(1 << 50, dtype=torch.uint8, device="cuda")
    except torch.cuda.OutOfMemoryError:
        pass
    assert len(seen) == 1 and seen[0][1] >= 1 << 50, seen
    assert seen[0][2] == torch.cuda.mem_get_info()[1], ("device total third, as PyTorch passes", seen)


@check("HF accelerate find_executable_batch_size pattern")
def oom_batch_size_search():
    torch.cuda.set_per_process_memory_fraction(0.2)
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 4096)).cuda()
    batch, best = 1024, None
    while batch <= 1 << 22:
        try:
            model(torch.randn(batch, 4096, device="cuda")).sum().backward()
            best, batch = batch, batch * 2
        except torch.cuda.OutOfMemoryError:
            break
        finally:
            model.zero_grad(set_to_none=True)
    assert best is not None and batch > best, (best, batch)
    torch.cuda.empty_cache()
    model(torch.randn(best, 4096, device="cuda")).sum().backward()  # the size found still runs
    return f"max batch {best}"


# ---- streams -------------------------------------------------------------------------------------------
@check("test_cuda.py:test_record_stream")
def record_stream_defers_reuse():
    side = torch.cuda.Stream()
    x = torch.ones(MiB, device="cuda")
    ptr = x.data_ptr()
    with torch.cuda.stream(side):                  # the kernels loaded first: a cold `x * 3` takes
        (x * 3).sum()                              # ~45 ms on the host, longer than the sleep below
    torch.cuda.synchronize()
    with torch.cuda.stream(side):
        torch.cuda._sleep(int(100e6))              # keeps `side` busy while x is freed (~50 ms)
        y = x * 3
    x.record_stream(side)
    assert not side.query(), "the side stream finished before the free: nothing to defer"
    del x
    z = torch.empty(MiB, device="cuda")
    assert z.data_ptr() != ptr, "memory in use by another stream was handed out again"
    torch.cuda.synchronize()
    assert y.sum().item() == 3 * MiB


# ---- CUDA graphs and pools (test_cuda.py: test_graph_*) ------------------------------------------------
@check("test_cuda.py:test_graph_memory_isolation")
def graph_memory_isolation():
    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = x * 2 + 1                               # warm-up
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        tmp = x * 2
        out = tmp + 1
        del tmp
    others = fill_others()
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, x * 2 + 1) and torch.equal(out, y)
    assert all(bool((o == 7.0).all()) for o in others), "a graph replay wrote into another tensor"


@check("test_cuda.py:test_graph_two_successive (shared pool)")
def graphs_sharing_pool_in_capture_order():
    pool = torch.cuda.graph_pool_handle()
    x = torch.full((1 << 20,), 1.0, device="cuda")
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1, pool=pool):
        a = x * 2 + x
    with torch.cuda.graph(g2, pool=pool):
        b = a * 2 + a
    others = fill_others()
    for _ in range(3):
        g1.replay()
        g2.replay()
    torch.cuda.synchronize()
    assert a.sum().item() == 3 * (1 << 20) and b.sum().item() == 9 * (1 << 20), (a.sum().item(), b.sum().item())
    assert all(bool((o == 7.0).all()) for o in others)


@check("test_cuda.py:test_graph_concurrent_replay")
def graphs_private_pools_concurrent_replay():
    n = 1 << 22
    x = torch.ones(n, device="cuda")
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1):
        t = x * 2
        o1 = (t + 1).sum()
    with torch.cuda.graph(g2):
        t = x * 5
        o2 = (t - 1).sum()
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    torch.cuda.synchronize()
    for _ in range(5):
        with torch.cuda.stream(s1):
            g1.replay()
        with torch.cuda.stream(s2):
            g2.replay()
    torch.cuda.synchronize()
    assert o1.item() == 3 * n and o2.item() == 4 * n, (o1.item(), o2.item())


@check("test_cuda.py:test_graph_output_after_graph_deleted")
def graph_output_outlives_graph():
    x = torch.ones(1 << 20, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = x * 4
    g.replay()
    del g
    others = fill_others()
    torch.cuda.synchronize()
    assert out.sum().item() == 4 * (1 << 20)
    out.add_(1)
    assert out.sum().item() == 5 * (1 << 20) and all(bool((o == 7.0).all()) for o in others)


@check("test_cuda.py:test_graph_make_graphed_callables")
def make_graphed_callables_matches_eager():
    torch.manual_seed(0)
    import copy
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.GELU(), torch.nn.Linear(512, 256)).cuda()
    eager_model = copy.deepcopy(model)             # a Module is graphed in place
    x = torch.randn(64, 256, device="cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(model, (x,))
    others = fill_others()
    losses = []
    for step in range(4):
        inp = torch.randn(64, 256, device="cuda", generator=torch.Generator("cuda").manual_seed(step))
        inp.requires_grad_(True)
        eager = eager_model(inp)
        eager.sum().backward()
        ref_grad = inp.grad.clone()
        inp.grad = None
        out = graphed(inp)
        out.sum().backward()
        assert torch.allclose(out, eager, atol=1e-5), (out - eager).abs().max()
        assert torch.allclose(inp.grad, ref_grad, atol=1e-5)
        losses.append(round(out.sum().item(), 3))
    assert all(bool((o == 7.0).all()) for o in others)
    return digest(losses)


@check("test_cuda.py:test_mempool_*")
def mem_pool_and_use_mem_pool():
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        x = torch.ones(4 * MiB, dtype=torch.uint8, device="cuda")
    y = torch.ones(4 * MiB, dtype=torch.uint8, device="cuda")
    assert x.sum().item() == 4 * MiB and y.sum().item() == 4 * MiB
    segments = pool.snapshot()
    assert sum(s["total_size"] for s in segments) >= 4 * MiB, segments
    del x
    del pool


@check("torch.compile(mode='reduce-overhead') training (CUDA graph trees)")
def compile_reduce_overhead_training():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.ReLU(), torch.nn.Linear(256, 1)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    step_fn = torch.compile(model, mode="reduce-overhead")
    data = torch.randn(512, 128, device="cuda", generator=torch.Generator("cuda").manual_seed(1))
    target = data[:, :1] * 0.5
    losses = []
    for _ in range(12):
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.mse_loss(step_fn(data), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0], losses
    return digest([round(v, 4) for v in losses])


@check("torch.compile default mode")
def compile_default_mode():
    f = torch.compile(lambda a, b: torch.nn.functional.gelu(a @ b) + 1)
    a, b = torch.randn(256, 256, device="cuda"), torch.randn(256, 256, device="cuda")
    assert torch.allclose(f(a, b), torch.nn.functional.gelu(a @ b) + 1, atol=1e-4)


@check("cudnn.benchmark = True (allocator cacheInfo)")
def cudnn_benchmark_conv():
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(64, 128, 3, padding=1).cuda()
    x = torch.randn(16, 64, 56, 56, device="cuda", requires_grad=True)
    y = conv(x)
    y.sum().backward()
    torch.backends.cudnn.benchmark = False
    assert torch.allclose(y, conv(x), atol=1e-3)


# ---- snapshots -----------------------------------------------------------------------------------------
@check("test_cuda.py:test_memory_snapshot / _memory_viz")
def snapshot_to_memory_viz():
    from torch.cuda import _memory_viz
    torch.cuda.memory._record_memory_history(max_entries=10000)
    x = torch.empty(3 * MiB, dtype=torch.uint8, device="cuda")
    del x
    y = torch.empty(5 * MiB, dtype=torch.uint8, device="cuda")
    snap = torch.cuda.memory._snapshot()
    torch.cuda.memory._record_memory_history(enabled=None)
    actions = [e["action"] for trace in snap["device_traces"] for e in trace]
    assert "alloc" in actions and "free_requested" in actions, actions[:20]
    assert any(b["state"] == "active_allocated" for s in snap["segments"] for b in s["blocks"])
    assert "<html" in _memory_viz.trace_plot(snap).lower() and _memory_viz.segment_plot(snap)
    # trace() writes each free as "del NAME" (its "alloc" lines come from cudaMalloc segments, which an
    # expandable-segments allocator records as segment_map instead).
    assert "del " in _memory_viz.trace(snap) and _memory_viz.segsum(snap)
    as_lines = lambda lines: lines                 # noqa: E731 (flamegraph.pl would need a download)
    assert _memory_viz.segments(snap, format_flamegraph=as_lines) and _memory_viz.memory(snap, as_lines)
    del y


import torch_checks_processes  # noqa: E402,F401 (registers the multi-process checks)


def main(argv):
    if argv[:1] == ["--list"]:
        for name, c in CHECKS.items():
            print(json.dumps({"name": name, "source": c["source"], "detail": c["detail"], "gpus": c["gpus"]}))
        return 0
    if len(argv) != 1 or argv[0] not in CHECKS:
        sys.stderr.write(f"torch_checks: give one check name ({', '.join(CHECKS)}) or --list\n")
        return 2
    c = CHECKS[argv[0]]
    if torch.cuda.device_count() < c["gpus"]:
        print("RESULT " + json.dumps({"status": "skip", "note": f"needs {c['gpus']} GPUs"}))
        return 0
    note = c["fn"]()
    torch.cuda.synchronize()
    print("RESULT " + json.dumps({"status": "pass", "note": note or "",
                                  "allocator": torch.cuda.memory.get_allocator_backend()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
