"""python/gpumem_torch.py and `gpumem run`, in CI: the ctypes layer against the host backend, install()
and the sitecustomize against a test double of torch (fake_torch/). What needs real PyTorch + CUDA is the
last class; it skips here and runs in scripts/gpu-check.sh.

Needs GPUMEM_BUILD_DIR (holding libgpumem.so, gpumem_torch.py and the gpumem binary); ctest sets it."""
import ctypes
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

BUILD = os.environ.get("GPUMEM_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
HERE = os.path.dirname(os.path.abspath(__file__))
FAKE_TORCH = os.path.join(HERE, "fake_torch")
HOST_ENV = {"GPUMEM_BACKEND": "host", "GPUMEM_HOST_CAPACITY": "256MiB",
            "GPUMEM_LIBRARY": os.path.join(BUILD, "libgpumem.so")}
os.environ.update(HOST_ENV)
sys.path.insert(0, BUILD)
import gpumem_torch as gt  # noqa: E402


def run_python(code, extra_env=None, fake_torch=True):
    env = dict(os.environ, **(extra_env or {}))
    env["PYTHONPATH"] = os.pathsep.join(([FAKE_TORCH] if fake_torch else []) + [BUILD])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120)


class CtypesLayer(unittest.TestCase):
    def test_allocate_query_free(self):
        p = gt.allocate(3 << 20, device=1)
        self.assertNotEqual(p, 0)
        self.assertEqual(gt.memory_allocated(1), 3 << 20)
        self.assertGreaterEqual(gt.memory_reserved(1), 3 << 20)
        stats = gt.memory_stats(1)
        self.assertEqual(stats["allocated_bytes.all.current"], 3 << 20)
        self.assertIn("requested_bytes.all.peak", stats)
        self.assertIn("Allocated memory", gt.memory_summary(1))
        gt.deallocate(p, device=1)
        self.assertEqual(gt.memory_allocated(1), 0)
        self.assertEqual(gt.max_memory_allocated(1), 3 << 20)
        gt.reset_peak_memory_stats(1)
        self.assertEqual(gt.max_memory_allocated(1), 0)
        gt.empty_cache()
        self.assertEqual(gt.memory_reserved(1), 0)
        self.assertEqual(gt.backend_name(1), "host")
        free, total = gt.mem_get_info(1)
        self.assertEqual(total, 256 << 20)

    def test_devices_accept_torch_spellings(self):
        p = gt.allocate(512, device="cuda:2")
        self.assertEqual(gt.memory_allocated(2), 512)
        gt.deallocate(p, device=2)

    def test_errors_are_exceptions_with_the_librarys_sentence(self):
        with self.assertRaises(gt.OutOfMemoryError) as oom:
            gt.allocate(1 << 40, device=3)
        self.assertIn("out of memory", str(oom.exception))
        gt.set_limit(8 << 20, device=3)
        p = gt.allocate(6 << 20, device=3)
        with self.assertRaises(gt.OutOfMemoryError):
            gt.allocate(6 << 20, device=3)
        gt.deallocate(p, device=3)
        with self.assertRaises(gt.GpumemError):
            gt.deallocate(p, device=3)  # double free
        with self.assertRaises(gt.GpumemError):
            gt.set_per_process_memory_fraction(1.5, device=3)
        with self.assertRaises(gt.GpumemError):
            gt.record_stream(12345, 1)

    def test_numbers_ctypes_would_wrap_are_refused(self):
        # ctypes passes 2**64 + 5 as 5 and -1 as SIZE_MAX: each must be a ValueError, with nothing changed.
        before = gt.memory_allocated(4)
        for call in (lambda: gt.allocate(2**64 + 5, device=4), lambda: gt.allocate(-1, device=4),
                     lambda: gt.set_limit(2**64 + (2 << 20), device=4), lambda: gt.set_limit(-1, device=4),
                     lambda: gt.deallocate(2**70, device=4), lambda: gt.memory_allocated(2**40),
                     lambda: gt.memory_allocated(-2), lambda: gt.allocate(512, device="cuda:4294967297"),
                     # and what int() would have taken: a fraction, a bool, a CPU device, a device past 63
                     lambda: gt.allocate(1.5, device=4), lambda: gt.allocate(512, device=True),
                     lambda: gt.allocate(512, device="cpu"), lambda: gt.memory_allocated(64),
                     lambda: gt.allocate(512, device="cuda:x")):
            with self.assertRaises(ValueError):
                call()
        self.assertEqual(gt.memory_allocated(4), before)
        self.assertEqual(gt.get_per_process_memory_fraction(4), 1.0)  # no limit was set
        p = gt.allocate(2 << 20, device=4)  # and the largest values still pass
        gt.deallocate(p, device=4)

    def test_text_that_grows_between_its_two_calls_is_asked_for_again(self):
        # memory_stats() while another thread allocates: the JSON grew after its size was asked (it came
        # back cut short: JSONDecodeError in 1 call of 10).
        texts = iter(['{"a": 1}', '{"a": 1, "b": 22}', '{"a": 1, "b": 22}'])

        def fn(device, buf, size):
            text = next(texts).encode()
            if buf is not None:
                ctypes.memmove(buf, text[:size - 1] + b"\0", min(len(text), size - 1) + 1)
            return len(text)
        self.assertEqual(json.loads(gt._text(fn, 0)), {"a": 1, "b": 22})

    def test_fraction_and_stop_handler_are_refused_when_not_what_they_must_be(self):
        for bad in (True, "0.5", None):
            with self.assertRaises(TypeError, msg=repr(bad)):
                gt.set_per_process_memory_fraction(bad, device=5)
        self.assertEqual(gt.get_per_process_memory_fraction(5), 1.0)
        with self.assertRaises(TypeError):
            gt.on_stop(5)

    def test_missing_library_is_one_clear_error(self):
        r = run_python("""
            import gpumem_torch
            try:
                gpumem_torch.memory_allocated(0)
            except gpumem_torch.GpumemError as e:
                print("ERR", e)
        """, {"GPUMEM_LIBRARY": "/nonexistent/libgpumem.so"})
        self.assertIn("ERR gpumem: GPUMEM_LIBRARY=/nonexistent/libgpumem.so does not exist", r.stdout, r.stderr)


class InstallWithTorchDouble(unittest.TestCase):
    def test_install_routes_torch_through_gpumem(self):
        r = run_python("""
            import torch, gpumem_torch
            gpumem_torch.install()
            raw = torch.cuda.memory._current.allocator()
            assert set(raw.hooks) == {"init", "reset", "memory_fraction", "base_alloc", "record_stream",
                                      "begin_allocate_to_pool", "end_allocate_to_pool", "release_pool"}, raw.hooks
            p = raw.malloc(1 << 20, 0, 0)           # what PyTorch does for a new tensor
            assert torch.cuda.memory_allocated(0) == 1 << 20, torch.cuda.memory_allocated(0)
            assert torch.cuda.max_memory_allocated() == 1 << 20
            raw.free(p, 1 << 20, 0, 0)
            assert torch.cuda.memory_allocated(0) == 0
            assert torch.cuda.memory_reserved(0) > 0
            raw.empty_cache()                       # torch.cuda.empty_cache() reaches gpumem_reset
            assert torch.cuda.memory_reserved(0) == 0
            assert torch.cuda.memory_stats(0)["num_device_alloc"] >= 1
            gpumem_torch.install()                  # a second call is harmless
            print("OK")
        """)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("OK", r.stdout)

    def test_pools_answer_what_cuda_graph_trees_ask(self):
        r = run_python("""
            import torch, gpumem_torch
            gpumem_torch.install()
            pool = torch.cuda.MemPool()                  # PyTorch's own refuses under a pluggable allocator
            assert pool.use_count() == 1, pool.use_count()
            assert torch._C._cuda_checkPoolLiveAllocations(0, pool.id, set())
            state = torch._C._cuda_getCheckpointState(0, pool.id)
            torch._C._cuda_setCheckpointPoolState(0, state, [], [])
            assert not torch._C._cuda_checkPoolLiveAllocations(0, pool.id, {12345})
            raw = torch.cuda.memory._current.allocator()
            p = raw.malloc(4096, 0, 0)
            torch._C._cuda_cudaCachingAllocator_raw_delete(p)   # not restored by gpumem: PyTorch's path
            assert torch.cuda.memory_allocated(0) == 0
            try:
                torch.cuda.MemPool(allocator=object())
            except gpumem_torch.GpumemError as e:
                print("ERR", e)
            on_oom = torch.cuda.MemPool(None, True, True)  # the installed PyTorch's parameters, by position too
            assert on_oom.use_on_oom and on_oom.no_split and not on_oom.is_symmetric and on_oom.use_count() == 1
            try:
                torch.cuda.MemPool(symmetric=True)        # a later PyTorch's parameter, not this one's
            except TypeError as e:
                print("TYPE", e)
            import gpumem_pools, inspect
            gpumem_pools._native_init_signature = inspect.signature(lambda self, allocator=None, use_on_oom=False,
                                                                     symmetric=False: None)
            try:
                torch.cuda.MemPool(symmetric=True)        # where PyTorch has it: NCCL needs PyTorch's allocator
            except gpumem_torch.GpumemError as e:
                print("SYM", e)
            del pool, state, on_oom
            print("OK")
        """)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ERR gpumem: MemPool(allocator=...)", r.stdout)
        self.assertIn("SYM gpumem: MemPool(symmetric=True)", r.stdout)
        self.assertIn("TYPE", r.stdout)
        self.assertIn("OK", r.stdout)

    def test_graph_tree_restore_gives_live_storages_to_gpumem(self):
        # PyTorch's restore gives the live storages it names the allocator's deleter (graph trees assert
        # it); gpumem adopts them: it answers _has_Standard_Deleter, frees a block with its storage (at the
        # next graph-tree call) or when graph trees free it, and raw_delete frees blocks PyTorch's
        # pluggable allocator never handed out. The pool's blocks come from one patched seam (CI cannot
        # allocate into a pool from Python).
        r = run_python("""
            import sys, types, torch, gpumem_torch, gpumem_pools
            gpumem_torch.install()
            C = torch._C
            sys.modules["torch.multiprocessing.reductions"] = types.SimpleNamespace(StorageWeakRef=C.StorageWeakRef)
            sys.modules["torch.multiprocessing"] = types.SimpleNamespace()
            pool = torch.cuda.MemPool()
            kept, freed, dies = (gpumem_torch.allocate(1 << 20, device=0) for _ in range(3))
            gpumem_pools.pool_live_blocks = lambda pool_id, device=None: [kept, freed, dies]
            s_kept, s_freed, s_dies = (C._make_storage(p) for p in (kept, freed, dies))
            s_normal = C._make_storage(0x1234, standard_deleter=True)
            state = C._cuda_getCheckpointState(0, pool.id)
            assert not C._has_Standard_Deleter(s_kept)
            C._cuda_setCheckpointPoolState(0, state, [], [s_kept, s_freed, s_dies, s_normal])
            assert all(C._has_Standard_Deleter(s) for s in (s_kept, s_freed, s_dies, s_normal))
            assert torch.cuda.memory_allocated(0) == 3 << 20
            C._free_And_Remove_DeleterFn(s_freed)          # graph trees end a generation
            assert not C._has_Standard_Deleter(s_freed)
            assert torch.cuda.memory_allocated(0) == 2 << 20
            C._kill_storage(s_dies)                        # the program drops an output
            assert not C._has_Standard_Deleter(s_dies)
            gpumem_pools.pool_live_blocks = lambda pool_id, device=None: [kept]
            assert C._cuda_checkPoolLiveAllocations(0, pool.id, {kept})   # the sweep freed its block
            assert torch.cuda.memory_allocated(0) == 1 << 20
            C._cuda_cudaCachingAllocator_raw_delete(kept)  # adopted: freed by gpumem
            assert torch.cuda.memory_allocated(0) == 0
            direct = gpumem_torch.allocate(4096, device=0)  # not from PyTorch's malloc: PyTorch refuses it
            C._cuda_cudaCachingAllocator_raw_delete(direct)
            assert torch.cuda.memory_allocated(0) == 0
            try:
                C._cuda_cudaCachingAllocator_raw_delete(direct)  # twice: PyTorch's own error stays
            except RuntimeError as e:
                print("ERR", e)
            raw = torch.cuda.memory._current.allocator()
            p = raw.malloc(4096, 0, 0)
            C._cuda_cudaCachingAllocator_raw_delete(p)     # PyTorch's path, as before
            assert torch.cuda.memory_allocated(0) == 0
            print("OK")
        """)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("ERR Trying to free a pointer not allocated here", r.stdout)
        self.assertIn("OK", r.stdout)

    def test_install_after_cuda_init_is_a_clear_error(self):
        r = run_python("""
            import torch, gpumem_torch
            torch.cuda._lazy_init()
            try:
                gpumem_torch.install()
            except gpumem_torch.GpumemError as e:
                print("ERR", e)
        """)
        self.assertIn("ERR gpumem: install() came too late", r.stdout, r.stderr)
        self.assertIn("4096 bytes allocated", r.stdout)


class AdoptedStorages(unittest.TestCase):
    """gpumem_pools._AdoptedStorages alone: which storages it takes, and that a block is freed exactly once."""

    def setUp(self):
        import gpumem_pools
        self.alive, self.ptr_of, self.freed = {}, {}, []

        class Ref:
            def __init__(ref, cdata):
                ref.cdata = cdata

            def expired(ref):
                return not self.alive[ref.cdata]
        self.adopted = gpumem_pools._AdoptedStorages(
            lambda c: (Ref(c), self.ptr_of[c]) if self.alive.get(c) else None, self.freed.append)

    def storage(self, cdata, ptr, alive=True):
        self.alive[cdata], self.ptr_of[cdata] = alive, ptr
        return cdata

    def test_takes_only_live_storages_over_the_pools_blocks(self):
        self.assertEqual(self.adopted.adopt(self.storage(1, 100), "pool", {100}), 100)
        self.assertIsNone(self.adopted.adopt(self.storage(2, 200), "pool", {100}))     # not the pool's
        self.assertIsNone(self.adopted.adopt(self.storage(3, 100, alive=False), "pool", {100}))
        self.assertTrue(self.adopted.holds(1))
        self.assertFalse(self.adopted.holds(2) or self.adopted.holds(3))
        self.assertEqual(len(self.adopted), 1)

    def test_aliases_free_their_block_once_when_the_last_dies(self):
        self.adopted.adopt(self.storage(1, 100), "pool", {100})
        self.adopted.adopt(self.storage(2, 100), "pool", {100})
        self.alive[1] = False
        self.assertEqual(self.adopted.sweep(), 0)
        self.assertEqual(self.freed, [])
        self.alive[2] = False
        self.assertEqual(self.adopted.sweep(), 1)
        self.assertEqual(self.freed, [100])
        self.assertEqual(self.adopted.sweep(), 0)
        self.assertEqual(len(self.adopted), 0)

    def test_a_block_freed_elsewhere_is_never_freed_again(self):
        self.adopted.adopt(self.storage(1, 100), "a", {100})
        self.adopted.adopt(self.storage(2, 200), "b", {200})
        self.adopted.adopt(self.storage(3, 300), "a", {300})
        self.assertEqual(self.adopted.release(1), 100)     # graph trees freed it
        self.assertTrue(self.adopted.release_ptr(300))     # raw_delete freed it
        self.adopted.keep_only("b", set())                 # pool b's restore freed 200
        for c in (1, 2, 3):
            self.alive[c] = False
        self.assertEqual(self.adopted.sweep(), 0)
        self.assertEqual(self.freed, [])


class GpumemRun(unittest.TestCase):
    GPUMEM = os.path.join(BUILD, "gpumem")
    BACKEND, ENV = "host", {}
    PROGRAM = """
        import sys, torch, gpumem_torch
        assert gpumem_torch.is_installed()          # installed by the sitecustomize on `import torch`
        raw = torch.cuda.memory._current.allocator()
        torch.cuda._lazy_init()
        blocks = [raw.malloc(8 << 20, 0, 0) for _ in range(int(sys.argv[1]))]
        gpumem_torch.allocate(int(sys.argv[2]) << 20, device=0)  # raises OutOfMemoryError past the limit
        print("done", len(blocks))
    """

    def run_gpumem(self, *args, program_args=("2", "1"), program=None, shell=None):
        """`shell`: the program runs inside `sh -c SHELL` ({python} and {prog} filled in)."""
        with tempfile.TemporaryDirectory() as d:
            prog = os.path.join(d, "train.py")
            with open(prog, "w") as f:
                f.write(textwrap.dedent(program or self.PROGRAM))
            other = os.path.join(d, "other")
            os.mkdir(other)
            with open(os.path.join(other, "sitecustomize.py"), "w") as f:
                f.write("import os\nos.environ['OTHER_SITECUSTOMIZE_RAN'] = '1'\n")
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([FAKE_TORCH, other]), **self.ENV)
            report = os.path.join(d, "report.json")
            command = [sys.executable, prog, *program_args] if shell is None else \
                ["sh", "-c", shell.format(python=sys.executable, prog=prog)]
            r = subprocess.run([self.GPUMEM, "run", "--backend", self.BACKEND, "--report", report, *args, "--",
                                *command], env=env, capture_output=True, text=True, timeout=120)
            with open(report) as f:
                return r, json.load(f)

    def test_runs_program_with_gpumem_and_reports_peaks(self):
        r, report = self.run_gpumem("--limit", "64MiB")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("done 2", r.stdout)
        self.assertIn("peak live", r.stderr)
        devices = [p["devices"]["0"] for p in report if "0" in p["devices"]]
        self.assertEqual(len(devices), 1, report)
        self.assertEqual(devices[0]["peak_requested"], 17 << 20)
        self.assertGreaterEqual(devices[0]["peak_reserved"], 17 << 20)
        # the pages behind those bytes were created and mapped: the driver calls (or their stand-ins) counted
        self.assertGreater(devices[0]["driver_calls"], 0, devices[0])
        self.assertIn("driver calls to create, map and unmap pages took", r.stderr)
        self.assertEqual(devices[0]["peak_active"], devices[0]["peak_allocated"])  # one stream: none held

    def test_limit_breach_exits_with_status_3(self):
        r, report = self.run_gpumem("--limit", "16MiB", program_args=("1", "12"))
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("CUDA out of memory. Tried to allocate", r.stderr)
        self.assertTrue(any(p["oom"] for p in report))

    def test_a_wrapper_that_handles_the_oom_keeps_its_own_status(self):
        # Python died of the OOM (status 1, passed on: 3), but a script that handled it chose its own status.
        r, report = self.run_gpumem("--limit", "16MiB", shell="{python} {prog} 0 20; exit $?")
        self.assertEqual(r.returncode, 3, r.stderr)
        r, report = self.run_gpumem("--limit", "16MiB", shell="{python} {prog} 0 20 2>/dev/null; exit 7")
        self.assertEqual(r.returncode, 7, r.stderr)
        # The first request failed: the device is in the report all the same, with its OOM.
        devices = [p["devices"]["0"] for p in report if "0" in p["devices"]]
        self.assertEqual(len(devices), 1, report)
        self.assertEqual(devices[0]["num_ooms"], 1, report)
        self.assertIn("1 OOMs", r.stderr)

    def test_a_forked_child_reports_nothing_of_its_parents(self):
        r, report = self.run_gpumem(program="""
            import os, sys, torch, gpumem_torch
            torch.cuda._lazy_init()
            p = gpumem_torch.allocate(10 << 20, device=0)
            if os.fork() == 0:
                sys.exit(0)  # runs atexit, as a child that returns does
            os.wait()
            print("parent done")
        """)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(sum(1 for p in report if p["devices"]), 1, report)
        self.assertEqual(r.stderr.count("peak live"), 1, r.stderr)

    def test_existing_sitecustomize_still_runs(self):
        with tempfile.TemporaryDirectory() as d:
            other = os.path.join(d, "other")
            os.mkdir(other)
            with open(os.path.join(other, "sitecustomize.py"), "w") as f:
                f.write("print('other sitecustomize ran')\n")
            env = dict(os.environ, PYTHONPATH=other)
            r = subprocess.run([self.GPUMEM, "run", "-q", "--", sys.executable, "-c",
                                "import gpumem_torch, sys; print('shim', gpumem_torch.__name__)"],
                               env=env, capture_output=True, text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("other sitecustomize ran", r.stdout)
        self.assertIn("shim gpumem_torch", r.stdout)


class TorchMemoryApi(unittest.TestCase):
    """The torch.cuda / torch.accelerator / torch._C memory names PyTorch's pluggable allocator refuses."""

    def test_refused_names_answer_from_gpumem(self):
        r = run_python("""
            import ctypes, torch, gpumem_torch
            gpumem_torch.install()
            raw = torch.cuda.memory._current.allocator()
            torch.cuda._lazy_init()
            assert torch.cuda.get_per_process_memory_fraction() == 1.0
            set_fraction = ctypes.CFUNCTYPE(None, ctypes.c_double, ctypes.c_int)(raw.hooks["memory_fraction"])
            set_fraction(0.3, 0)                    # torch.cuda.set_per_process_memory_fraction(0.3)
            assert torch.cuda.memory.get_per_process_memory_fraction(0) == 0.3
            gpumem_torch.set_limit(128 << 20, 0)    # a limit of 128 of 256 MiB reads back as a fraction
            assert torch.cuda.get_per_process_memory_fraction(0) == 0.5
            p = raw.malloc(3 << 20, 0, 0)
            raw.free(p, 3 << 20, 0, 0)
            nested = torch._C._cuda_memoryStats(0)
            assert nested["allocated_bytes"]["all"]["allocated"] == 3 << 20, nested["allocated_bytes"]
            assert torch.cuda.memory.memory_stats_as_nested_dict(0)["num_device_alloc"] >= 1
            assert torch.accelerator.memory_stats(0)["allocated_bytes.all.freed"] == 3 << 20
            torch.cuda.reset_accumulated_memory_stats(0)
            flat = gpumem_torch.memory_stats(0)
            assert flat["allocated_bytes.all.allocated"] == 0 and flat["allocated_bytes.all.freed"] == 0, flat
            assert flat["reserved_bytes.all.current"] > 0   # current values stay
            p = raw.malloc(1 << 20, 0, 0)
            torch._C._accelerator_resetAccumulatedStats(0)
            assert torch.accelerator.memory_stats(0)["allocated_bytes.all.allocated"] == 0
            assert torch.accelerator.memory_allocated(0) == 1 << 20
            raw.free(p, 1 << 20, 0, 0)
            print("OK")
        """)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("OK", r.stdout)

    def test_out_of_memory_observer_sees_each_oom(self):
        r = run_python("""
            import torch, gpumem_torch
            gpumem_torch.install()
            seen = []
            torch._C._cuda_attach_out_of_memory_observer(lambda *args: seen.append(args))
            torch._C._cuda_attach_out_of_memory_observer(lambda *args: 1 / 0)  # a failing one is reported
            held = gpumem_torch.allocate(2 << 20, device=0)
            try:
                gpumem_torch.allocate(1 << 50, device=0)
            except gpumem_torch.OutOfMemoryError as e:
                assert gpumem_torch.is_out_of_memory(e)
            # PyTorch's arguments: the device's total third (no limit), then its free memory
            assert seen == [(0, 1 << 50, 256 << 20, seen[0][3])], seen
            assert seen[0][2] == gpumem_torch.mem_get_info(0)[1], seen
            assert not gpumem_torch.is_out_of_memory(RuntimeError("CUDA error: an illegal memory access"))
            assert gpumem_torch.is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory. Tried to allocate"))
            print("OK", gpumem_torch.oom_marker())
        """)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("OK gpumem: out of memory", r.stdout)
        self.assertIn("ZeroDivisionError", r.stderr)

    def test_cache_info_is_what_an_allocation_could_get(self):
        held = gt.allocate(2 << 20, device=7)
        gt.deallocate(gt.allocate(6 << 20, device=7), device=7)
        free, total = gt.mem_get_info(7)
        self.assertEqual(gt.cache_info(7), max(free, 6 << 20))
        gt.set_limit(16 << 20, device=7)
        self.assertGreaterEqual(gt.cache_info(7), 6 << 20)
        self.assertLessEqual(gt.cache_info(7), 16 << 20)
        gt.deallocate(held, device=7)

    def test_uncaught_torch_out_of_memory_exits_3_and_other_errors_do_not(self):
        for raised, code in (("torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 2.00 GiB')", 3),
                             ("RuntimeError('CUDA error: device-side assert triggered')", 1)):
            with self.subTest(raised=raised):
                r = subprocess.run([GpumemRun.GPUMEM, "run", "-q", "--backend", "host", "--", sys.executable, "-c",
                                    f"import torch; raise {raised}"],
                                   env=dict(os.environ, PYTHONPATH=FAKE_TORCH), capture_output=True, text=True,
                                   timeout=60)
                self.assertEqual(r.returncode, code, r.stderr)


IPC_PROGRAM = """
import ctypes, multiprocessing as mp, sys
import gpumem_ipc
import gpumem_torch as gt

MiB = 1 << 20


def child(queue, done):
    shared = queue.get()
    opened = shared.open()
    seen = ctypes.string_at(opened.address, 3 * MiB)
    ctypes.memset(opened.address + MiB, 0x33, MiB)   # written here, read by the exporter
    done.put((seen.count(b"\\x5a"), opened.nbytes, opened.address))
    queue.get()                                        # hold the memory until told to let go
    opened.close()
    done.put("closed")


if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    gt.set_limit(4 * MiB, 0)                           # two 2 MiB chunks, then one block across both
    a, b = gt.allocate(2 * MiB, 0), gt.allocate(2 * MiB, 0)
    gt.deallocate(a, 0), gt.deallocate(b, 0)
    p = gt.allocate(3 * MiB, 0)
    ctypes.memset(p, 0x5a, 3 * MiB)
    queue, done = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=child, args=(queue, done))
    proc.start()
    shared = gpumem_ipc.SharedAllocation(p, 0, owner="the storage")
    assert len(shared._description["pieces"]) >= 2, shared._description
    queue.put(shared)
    count, nbytes, address = done.get(timeout=60)
    assert count == 3 * MiB and nbytes >= 3 * MiB and address != p, (count, nbytes)
    assert ctypes.string_at(p + MiB, MiB) == b"\\x33" * MiB
    gpumem_ipc._collect_exported()
    assert [owner for _, owner in gpumem_ipc._exported] == ["the storage"], gpumem_ipc._exported   # receiver still holds it
    queue.put("let go")
    assert done.get(timeout=60) == "closed"
    proc.join(60)
    assert proc.exitcode == 0, proc.exitcode
    gpumem_ipc._collect_exported()
    assert gpumem_ipc._exported == [], gpumem_ipc._exported
    print("OK")
"""


# A SharedAllocation made while a Process is pickled (install()'s reduce_tensor: a CUDA tensor in
# Process args), with spawn and forkserver: the child was handed descriptors closed already. And a receiver
# whose open() fails lets the exporter's memory go (it was held until the exporter ended).
IPC_ARGS_PROGRAM = """
import ctypes, multiprocessing as mp, sys
import gpumem_ipc
import gpumem_torch as gt

MiB = 1 << 20


class Tensorish:
    def __init__(self, p):
        self.p = p

    def __reduce__(self):
        return (rebuild, (gpumem_ipc.SharedAllocation(self.p, 0, owner="storage"),))


def rebuild(shared):
    return shared


def child(shared, broken):
    if broken:
        shared._description["bytes"] += 1              # not whole pages: the library refuses to open it
        try:
            shared.open()
        except gt.GpumemError:
            sys.exit(7)
        sys.exit(1)
    opened = shared.open()
    sys.exit(0 if ctypes.string_at(opened.address, 2 * MiB) == b"\\x5a" * (2 * MiB) else 1)


if __name__ == "__main__":
    ctx = mp.get_context(sys.argv[1])
    p = gt.allocate(2 * MiB, 0)
    ctypes.memset(p, 0x5a, 2 * MiB)
    for broken, code in ((False, 0), (True, 7)):
        proc = ctx.Process(target=child, args=(Tensorish(p), broken))
        proc.start()
        proc.join(60)
        assert proc.exitcode == code, (sys.argv[1], broken, proc.exitcode)
        del proc                                         # its descriptors go with it
        import gc
        gc.collect()
        gpumem_ipc._collect_exported()
        assert gpumem_ipc._exported == [], (broken, gpumem_ipc._exported)
    print("OK")
"""


FAKE_CUDA = os.path.join(BUILD, "fake_cuda", "libgpumem_fake_cuda.so")


@unittest.skipUnless(os.path.exists(FAKE_CUDA), "the CUDA driver test double is not built")
class GpumemRunOnTheCudaBackend(GpumemRun):
    """`gpumem run` with its default backend (cuda) over the CUDA driver test double
    (tests/backends/fake_cuda): libgpumem.so's CUDA path, map-ahead's worker included, in a real program."""

    BACKEND, ENV = "cuda", {"GPUMEM_LIBCUDA": FAKE_CUDA, "GPUMEM_FAKE_CUDA_MIB": "512"}

    def test_runs_program_with_gpumem_and_reports_peaks(self):
        super().test_runs_program_with_gpumem_and_reports_peaks()
        r, report = self.run_gpumem(program_args=("40", "1"))  # growth after growth: pages made ahead
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("done 40", r.stdout)
        self.assertEqual(report[-1]["devices"]["0"]["peak_requested"], 321 << 20, report)

    def test_device_full_exits_with_status_3(self):
        r, report = self.run_gpumem(program_args=("1", "600"))  # the double has 512 MiB
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("CUDA out of memory", r.stderr)


class SharingBetweenProcesses(unittest.TestCase):
    """CUDA IPC's shim layer on the host backend: a stitched allocation pickled through multiprocessing
    (descriptors as DupFd), opened, read and written by a spawned process; the exporter's keep-alive."""

    def test_spawned_process_reads_and_writes_a_stitched_allocation(self):
        with tempfile.TemporaryDirectory() as d:
            prog = os.path.join(d, "ipc.py")
            with open(prog, "w") as f:
                f.write(IPC_PROGRAM)
            env = dict(os.environ, PYTHONPATH=BUILD)
            r = subprocess.run([sys.executable, prog, "spawn"], env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertIn("OK", r.stdout)
            # Under `gpumem run` the spawned child finds gpumem_ipc through the run's PYTHONPATH alone.
            env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUMEM_LIBRARY")}
            r = subprocess.run([GpumemRun.GPUMEM, "run", "-q", "--backend", "host", "--", sys.executable, prog,
                                "spawn"], env=env, capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)

    def test_allocation_in_process_args_reaches_spawned_and_forkserver_children(self):
        with tempfile.TemporaryDirectory() as d:
            prog = os.path.join(d, "ipc_args.py")
            with open(prog, "w") as f:
                f.write(IPC_ARGS_PROGRAM)
            for method in ("spawn", "forkserver"):
                r = subprocess.run([sys.executable, prog, method], env=dict(os.environ, PYTHONPATH=BUILD),
                                   capture_output=True, text=True, timeout=120)
                self.assertEqual(r.returncode, 0, method + ": " + r.stderr)
                self.assertIn("OK", r.stdout)
            self.assertIn("OK", r.stdout)


def _real_torch_cuda():
    try:
        import importlib.util
        if importlib.util.find_spec("torch") is None:
            return False
        r = subprocess.run([sys.executable, "-c", "import torch; print(torch.cuda.is_available())"],
                           capture_output=True, text=True, timeout=120)
        return r.stdout.strip() == "True"
    except Exception:
        return False


@unittest.skipUnless(_real_torch_cuda(), "needs PyTorch with a CUDA GPU (runs in scripts/gpu-check.sh)")
class RealTorch(unittest.TestCase):
    def test_tensors_live_in_gpumem(self):
        r = run_python("""
            import torch, gpumem_torch
            gpumem_torch.install()
            x = torch.randn(1024, 1024, device="cuda")
            assert torch.cuda.memory_allocated() >= 4 << 20
            del x
            torch.cuda.empty_cache()
            print("OK", gpumem_torch.backend_name())
        """, {"GPUMEM_BACKEND": "cuda"}, fake_torch=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("OK cuda", r.stdout)

    def test_out_of_memory_is_torchs_own_type_and_the_program_goes_on(self):
        r = run_python("""
            import torch, gpumem_torch
            gpumem_torch.install()
            seen = []
            torch._C._cuda_attach_out_of_memory_observer(lambda *a: seen.append(a))
            a = torch.ones(1 << 20, device="cuda")
            assert gpumem_torch._load().gpumem_torch_oom_available() == 1
            total = torch.cuda.get_device_properties(0).total_memory
            torch.cuda.set_per_process_memory_fraction(0.25)
            for size in (1 << 50, total + (1 << 30), int(total * 0.3)):   # absurd, device, limit
                try:
                    torch.empty(size, dtype=torch.uint8, device="cuda")
                    raise SystemExit(f"no OOM for {size}")
                except torch.cuda.OutOfMemoryError as e:
                    assert isinstance(e, torch.OutOfMemoryError) and "out of memory" in str(e), repr(e)
            assert len(seen) == 3, seen
            assert (a * 2).sum().item() == 2 * (1 << 20)
            torch.backends.cudnn.benchmark = True          # cacheInfo through gpumem
            conv = torch.nn.Conv2d(16, 32, 3).cuda()
            conv(torch.randn(8, 16, 32, 32, device="cuda")).sum().backward()
            assert gpumem_torch._load().gpumem_torch_enable_cache_info() == 1
            print("OK")
        """, {"GPUMEM_BACKEND": "cuda"}, fake_torch=False)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("OK", r.stdout)


if __name__ == "__main__":
    unittest.main()


class ControlFromOutside(unittest.TestCase):
    """`gpumem stats/stop` on a PyTorch-shaped program (fake torch + the shim), from another process."""
    GPUMEM = os.path.join(BUILD, "gpumem")
    PROGRAM = """
        import sys, time, torch, gpumem_torch
        gpumem_torch.install()
        raw = torch.cuda.memory._current.allocator()
        keep = raw.malloc(3 << 20, 0, 0)
        stopped = []
        if sys.argv[1] == "handler":
            gpumem_torch.on_stop(lambda: stopped.append("handler"))
        print("ready", torch.cuda.memory_allocated(0), flush=True)
        try:
            while not stopped:
                raw.free(raw.malloc(1 << 20, 0, 0), 1 << 20, 0, 0)
                time.sleep(0.005)
        except KeyboardInterrupt:
            stopped.append("KeyboardInterrupt")
        print("stopped by", stopped[0], flush=True)
    """

    def start(self, mode, control_dir):
        env = dict(os.environ, GPUMEM_CONTROL_DIR=control_dir,
                   PYTHONPATH=os.pathsep.join([FAKE_TORCH, BUILD]))
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(self.PROGRAM), mode], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = proc.stdout.readline().split()
        self.assertEqual(ready[:1], ["ready"], proc.stderr.read() if not ready else ready)
        return proc, int(ready[1])

    def gpumem(self, control_dir, *args):
        return subprocess.run([self.GPUMEM, *args], env=dict(os.environ, GPUMEM_CONTROL_DIR=control_dir),
                              capture_output=True, text=True, timeout=60)

    def test_stats_then_stop_through_the_handler(self):
        with tempfile.TemporaryDirectory() as d:
            proc, allocated = self.start("handler", d)
            stats = self.gpumem(d, "stats", "--json", str(proc.pid))
            self.assertEqual(stats.returncode, 0, stats.stderr)
            self.assertGreaterEqual(json.loads(stats.stdout)[0]["devices"][0]["allocated_bytes"], allocated)
            stop = self.gpumem(d, "stop", "--json", "--timeout", "20", str(proc.pid))
            self.assertEqual(stop.returncode, 0, stop.stdout + stop.stderr)
            self.assertEqual(json.loads(stop.stdout)["outcome"], "stopped")
            out, err = proc.communicate(timeout=20)
            self.assertIn("stopped by handler", out, err)
            self.assertEqual(proc.returncode, 0)

    def test_stop_raises_keyboard_interrupt_without_a_handler(self):
        with tempfile.TemporaryDirectory() as d:
            proc, _ = self.start("none", d)
            stop = self.gpumem(d, "stop", "--timeout", "20", str(proc.pid))
            self.assertEqual(stop.returncode, 0, stop.stdout + stop.stderr)
            out, err = proc.communicate(timeout=20)
            self.assertIn("stopped by KeyboardInterrupt", out, err)
