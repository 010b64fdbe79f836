"""python/gpumem (the package the wheel installs), from the source tree: the monitoring API against the NVML
test double, in process through the built libgpumem_monitor.so (ctypes) and again through the gpumem binary
(the fallback where the library cannot be loaded), and the notebook helpers against fake_torch with gpumem_torch
installed on the host backend (so torch.cuda's memory functions answer from a real allocator).

Needs GPUMEM_BUILD_DIR (the gpumem binary, libgpumem.so, libgpumem_monitor.so, gpumem_torch.py, fake_nvml/);
ctest sets it."""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.abspath(os.path.join(HERE, "..", ".."))
BUILD = os.path.abspath(os.environ.get("GPUMEM_BUILD_DIR", os.path.join(SOURCE, "build")))
FAKE_TORCH = os.path.join(HERE, "fake_torch")
SCENARIOS = os.path.join(SOURCE, "tests", "monitor", "scenarios")
FAKE_NVML = os.path.join(BUILD, "fake_nvml", "libgpumem_fake_nvml_current.so")
sys.path.insert(0, os.path.join(SOURCE, "python"))
import gpumem  # noqa: E402
from gpumem import _monitor, _native  # noqa: E402


def nvml_env(scenario):
    return {"GPUMEM_BINARY": os.path.join(BUILD, "gpumem"), "GPUMEM_NVML_LIBRARY": FAKE_NVML,
            "GPUMEM_FAKE_NVML_SCENARIO": os.path.join(SCENARIOS, scenario), "GPUMEM_DEV_DIR": "/nonexistent"}


class Monitoring(unittest.TestCase):
    """Through libgpumem_monitor.so beside the binary (ctypes, in this process)."""
    backend = ("library", os.path.join(BUILD, "libgpumem_monitor.so"))

    def setUp(self):
        self.saved = dict(os.environ)
        os.environ.update(nvml_env("two_gpus.txt"))
        self.use(os.environ)
        _native.reset()  # each test opens the NVML double afresh, with its own scenario
        self.assertEqual(_monitor.backend(), self.backend)

    def use(self, env):
        pass

    def tearDown(self):
        os.environ.clear()
        os.environ.update(self.saved)
        _native.reset()

    def reopen(self, **env):
        os.environ.update(env)
        _native.reset()

    def test_gpus_have_every_field_in_bytes_and_their_processes(self):
        g = gpumem.gpus()
        self.assertEqual([x.index for x in g], [0, 1, 2])
        h100 = g[0]
        self.assertEqual(h100.name, "NVIDIA H100 80GB HBM3")
        self.assertEqual(h100.uuid, "GPU-8f1c2e4a-1111-2222-3333-444455556666")
        self.assertEqual(h100.bus_id, "00000000:18:00.0")
        self.assertEqual(h100.memory_total, 81559 << 20)
        self.assertEqual(h100.memory_used, 20480 << 20)
        self.assertEqual(h100.memory_free, (81559 - 20480 - 512) << 20)
        self.assertEqual(h100.memory_reserved, 512 << 20)
        self.assertEqual((h100.utilization, h100.temperature, h100.power, h100.power_limit), (97, 61, 412.345, 700.0))
        self.assertEqual((h100.clock_sm, h100.clock_memory, h100.pstate), (1755, 2619, "P0"))
        self.assertEqual([(p.pid, p.used_memory) for p in h100.processes], [(4242, 12288 << 20), (4343, 8000 << 20)])
        self.assertEqual(g[1].processes, [])
        lost = g[2]  # a lost GPU: every field None, no crash
        self.assertIsNone(lost.name)
        self.assertIsNone(lost.memory_used)
        self.assertEqual(lost.error, "GPU is lost")
        self.assertEqual(lost.processes, [])
        self.assertEqual([len(x.processes) for x in gpumem.gpus(with_processes=False)], [0, 0, 0])

    def test_unsupported_fields_are_none(self):
        self.reopen(**nvml_env("unsupported.txt"))
        t4 = gpumem.gpus()[0]
        self.assertEqual(t4.name, "Tesla T4")
        self.assertIsNone(t4.utilization)
        self.assertIsNone(t4.power)
        self.assertIsNone(t4.power_limit)
        self.assertEqual(t4.memory_used, 3 << 20)
        # A process list that cannot be read is not an idle GPU: None, with the reason.
        self.assertIsNone(t4.processes)
        self.assertEqual(t4.processes_error, "Not Supported")

    def test_processes_and_watch(self):
        self.assertEqual(sorted(p.pid for p in gpumem.processes()), [4242, 4343])
        self.assertIsNone(gpumem.gpus()[0].processes_error)
        samples = list(gpumem.watch(0.05, count=3, with_processes=False))
        self.assertEqual(len(samples), 3)
        self.assertTrue(all(s[0].memory_used == 20480 << 20 for s in samples))
        # Bad arguments are refused at the call, before any sample.
        for interval, count in ((0, 1), (-1, 1), (float("inf"), 1), ("1", 1), (True, 1), (1, "2"), (1, -1), (1, 1.5),
                                (10**400, 1), (1e300, 1)):  # the last two: OverflowError at the second sample
            with self.assertRaises(ValueError, msg=(interval, count)):
                gpumem.watch(interval, count)

    def test_names_that_are_not_utf8_cost_one_character_not_the_sample(self):
        with tempfile.TemporaryDirectory() as d:
            scenario = os.path.join(d, "names.txt")
            with open(scenario, "wb") as f:
                f.write(b'driver 550.54.15\ngpu name="GPU \xe9\xff" uuid=GPU-1 total_mib=1000 used_mib=10\n'
                        b"proc gpu=0 pid=4242 used_mib=5 name=py\xff\xfethon\n")
            self.reopen(GPUMEM_FAKE_NVML_SCENARIO=scenario)
            [g] = gpumem.gpus()  # the whole sample failed on the first bad byte through the library
            self.assertEqual(g.name, "GPU \ufffd\ufffd")

    def test_a_gpu_that_stops_answering_ends_in_an_error_not_a_hang(self):
        if self.backend[0] != "library":
            self.skipTest("the binary's run has its own 60 s timeout")
        with tempfile.TemporaryDirectory() as d:
            flag, scenario = os.path.join(d, "hang"), os.path.join(d, "hang.txt")
            open(flag, "w").close()
            with open(scenario, "w") as f:
                f.write(f'driver 550.54.15\ngpu name="A" uuid=GPU-a\ngpu name="B" uuid=GPU-b hang_file={flag}\n')
            self.reopen(GPUMEM_FAKE_NVML_SCENARIO=scenario)
            saved, _native.TIMEOUT_S = _native.TIMEOUT_S, 1
            try:
                with self.assertRaisesRegex(gpumem.GpumemError, "no answer in 1 s"):
                    gpumem.gpus()
            finally:
                _native.TIMEOUT_S = saved
                os.remove(flag)  # the stuck call answers and leaves the library's lock
                __import__("time").sleep(0.5)

    def test_watch_skips_the_samples_it_fell_behind_on(self):
        times = []
        for i, _ in enumerate(gpumem.watch(0.2, count=4, with_processes=False)):
            times.append(__import__("time").monotonic())
            if i == 0:
                __import__("time").sleep(0.7)  # a slow consumer: three ticks missed
        gaps = [b - a for a, b in zip(times, times[1:])]
        self.assertTrue(all(g > 0.1 for g in gaps[1:]), gaps)  # no burst of back-to-back samples

    def test_gpumem_processes_carry_their_allocators_numbers(self):
        # A real process on gpumem's allocator (host backend) that the NVML double lists on GPU 0.
        with tempfile.TemporaryDirectory() as d:
            env = dict(os.environ, GPUMEM_BACKEND="host", GPUMEM_LIBRARY=os.path.join(BUILD, "libgpumem.so"),
                       GPUMEM_CONTROL_DIR=d, PYTHONPATH=BUILD)
            child = subprocess.Popen([sys.executable, "-c", "import gpumem_torch, sys\n"
                                      "p = gpumem_torch.allocate(5 << 20); print('ready', flush=True); sys.stdin.read()"],
                                     env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            try:
                self.assertEqual(child.stdout.readline().strip(), "ready")
                scenario = os.path.join(d, "scenario.txt")
                with open(os.path.join(SCENARIOS, "two_gpus.txt")) as f, open(scenario, "w") as out:
                    out.write(f.read() + f"proc gpu=0 pid={child.pid} used_mib=6 name=python3\n")
                self.reopen(GPUMEM_FAKE_NVML_SCENARIO=scenario, GPUMEM_CONTROL_DIR=d)
                ours = [p for p in gpumem.gpus()[0].processes if p.pid == child.pid]
                self.assertEqual(len(ours), 1, gpumem.gpus()[0].processes)
                self.assertEqual((ours[0].allocated, ours[0].peak_allocated), (5 << 20, 5 << 20))
                self.assertGreaterEqual(ours[0].reserved, 5 << 20)
                others = [p for p in gpumem.gpus()[0].processes if p.pid != child.pid]
                self.assertTrue(all(p.allocated is None for p in others))
                self.assertIsNone([p for p in gpumem.gpus(with_allocators=False)[0].processes
                                   if p.pid == child.pid][0].allocated)
                self.assertEqual([p.allocated for p in gpumem.processes(with_allocators=True)
                                  if p.pid == child.pid], [5 << 20])
            finally:
                child.stdin.close()
                child.wait(timeout=30)
                child.stdout.close()

    def test_no_driver_is_its_own_error_and_a_later_driver_is_found(self):
        self.reopen(GPUMEM_NVML_LIBRARY="/nonexistent/libnvidia-ml.so.1")
        with self.assertRaises(gpumem.NoDriverError) as e:
            gpumem.gpus()
        self.assertIn("could not be loaded", str(e.exception))
        os.environ["GPUMEM_NVML_LIBRARY"] = FAKE_NVML  # a failed open is not remembered
        self.assertEqual(len(gpumem.gpus()), 3)

    def test_nvml_stays_open_between_samples(self):
        # The double reads its scenario at nvmlInit: a changed scenario shows only once NVML is opened again.
        with tempfile.TemporaryDirectory() as d:
            scenario = os.path.join(d, "scenario.txt")
            with open(os.path.join(SCENARIOS, "two_gpus.txt")) as f:
                text = f.read()
            with open(scenario, "w") as out:
                out.write(text)
            self.reopen(GPUMEM_FAKE_NVML_SCENARIO=scenario)
            self.assertEqual(gpumem.gpus()[0].memory_used, 20480 << 20)
            with open(scenario, "w") as out:
                out.write(text.replace("used_mib=20480", "used_mib=1024"))
            self.assertEqual([s[0].memory_used for s in gpumem.watch(0.01, count=2)], [self.cached] * 2)
            _native.reset()
            self.assertEqual(gpumem.gpus()[0].memory_used, 1024 << 20)

    cached = 20480 << 20  # in process: the open NVML still has the first scenario

    def test_library_and_binary_give_one_document(self):
        def without_times(doc):
            return {k: v for k, v in doc.items() if k not in ("taken_at", "nvml_ms")}
        library = _monitor.sample(processes=True, allocators=True, holders=True, extras=True)
        self.assertEqual(without_times(library), without_times(_monitor._sample_from_binary()))
        self.assertEqual(library["schema"], 1)


class MonitoringThroughBinary(Monitoring):
    """The same, where libgpumem_monitor.so cannot be loaded: one run of `gpumem --json --full` per sample."""
    backend = ("binary", os.path.join(BUILD, "gpumem"))
    cached = 1024 << 20  # each run opens NVML afresh
    test_library_and_binary_give_one_document = None  # both sides would be the binary here

    def use(self, env):
        env["GPUMEM_MONITOR_LIBRARY"] = "/nonexistent/libgpumem_monitor.so"

    def test_missing_binary_is_one_clear_error(self):
        os.environ["GPUMEM_BINARY"] = "/nonexistent/gpumem"
        with self.assertRaisesRegex(gpumem.GpumemError, "cannot run /nonexistent/gpumem"):
            gpumem.gpus()

    def test_a_binary_that_prints_no_json_is_one_clear_error(self):
        os.environ["GPUMEM_BINARY"] = "/bin/true"  # exits 0 and prints nothing (an older or foreign binary)
        for call in (gpumem.gpus, gpumem.processes):
            with self.assertRaisesRegex(gpumem.GpumemError, "printed no JSON sample"):
                call()

    def test_the_wheels_console_script_on_path_is_not_taken_for_the_binary(self):
        # pip puts a Python `gpumem` script on PATH; taken for the binary, it exec'd itself for ever.
        from gpumem import _binary
        with tempfile.TemporaryDirectory() as scripts, tempfile.TemporaryDirectory() as real:
            with open(os.path.join(scripts, "gpumem"), "w") as f:
                f.write("#!/usr/bin/env python3\nfrom gpumem._cli import main\n")
            os.chmod(os.path.join(scripts, "gpumem"), 0o755)
            os.symlink(os.path.join(BUILD, "gpumem"), os.path.join(real, "gpumem"))
            del os.environ["GPUMEM_BINARY"]
            os.environ["PATH"] = scripts + os.pathsep + real
            self.assertEqual(_binary.path(), os.path.join(real, "gpumem"))
            os.environ["PATH"] = scripts
            if not os.path.isfile(os.path.join(_binary._HERE, "_bin", "gpumem")):
                with self.assertRaises(gpumem.GpumemNotFound):
                    _binary.path()
                r = subprocess.run([sys.executable, "-c", "import sys; from gpumem._cli import main; sys.exit(main())"],
                                   env=dict(os.environ, PYTHONPATH=os.path.join(SOURCE, "python")),
                                   capture_output=True, text=True, timeout=60)
                self.assertEqual((r.returncode, r.stderr.count("\n")), (1, 1), r.stderr)  # one line, no traceback


def run_notebook(code):
    env = dict(os.environ, GPUMEM_BACKEND="host", GPUMEM_HOST_CAPACITY="256MiB",
               GPUMEM_LIBRARY=os.path.join(BUILD, "libgpumem.so"),
               PYTHONPATH=os.pathsep.join([FAKE_TORCH, BUILD, os.path.join(SOURCE, "python")]))
    prelude = """
        import torch, gpumem_torch, gpumem
        gpumem_torch.install()
        raw = torch.cuda.memory._current.allocator()
        torch.cuda.empty_cache = raw.empty_cache  # as real torch.cuda.empty_cache reaches the pluggable allocator
        MiB = 1 << 20
    """
    return subprocess.run([sys.executable, "-c", textwrap.dedent(prelude) + textwrap.dedent(code)], env=env,
                          capture_output=True, text=True, timeout=60)


class Notebook(unittest.TestCase):
    def check(self, code):
        r = run_notebook(code)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("OK", r.stdout)
        return r

    def test_track_nested_blocks_keep_their_own_peaks(self):
        r = self.check("""
            keep = raw.malloc(2 * MiB, 0, 0)
            with gpumem.track("outer") as outer:
                a = raw.malloc(8 * MiB, 0, 0)
                raw.free(a, 8 * MiB, 0, 0)                      # outer's peak: 10 MiB, before inner resets it
                with gpumem.track("inner") as inner:
                    b = raw.malloc(4 * MiB, 0, 0)
                    c = raw.malloc(1 * MiB, 0, 0)
                    raw.free(b, 4 * MiB, 0, 0)
                kept = c
            assert (inner.allocated_before, inner.allocated_after, inner.peak) == (2 * MiB, 3 * MiB, 7 * MiB), inner
            assert (outer.allocated_before, outer.allocated_after, outer.peak) == (2 * MiB, 3 * MiB, 10 * MiB), outer
            assert inner.depth == 1 and outer.depth == 0
            assert outer.reserved_after - outer.reserved_before >= 0 and outer.seconds > 0

            @gpumem.track()
            def step(n):
                p = raw.malloc(n, 0, 0)
                raw.free(p, n, 0, 0)
                return n
            assert step(5 * MiB) == 5 * MiB
            records = gpumem._notebook.track_records()
            assert [r.label for r in records][-1].endswith("step") and records[-1].peak == 8 * MiB, records[-1]
            # One instance entered twice, nested: each exit closes its own entry (it raised ValueError).
            again = gpumem.track("again", quiet=True)
            with again as first_entry:
                with again as second_entry:
                    d = raw.malloc(1 * MiB, 0, 0)
                    raw.free(d, 1 * MiB, 0, 0)
            assert first_entry is not second_entry and second_entry.depth == first_entry.depth + 1
            assert not gpumem._notebook._open
            table = gpumem.summary(reset=True)
            assert table.splitlines()[1].startswith("  inner:") and "outer:" in table, table
            assert gpumem.summary() == "gpumem track summary:"

            # A block on another device nested inside: its peak is not the outer block's (it was 50 MiB).
            with gpumem.track("device 0", device=0, quiet=True) as on0:
                with gpumem.track("device 1", device=1, quiet=True) as on1:
                    e = raw.malloc(50 * MiB, 1, 0)
                    raw.free(e, 50 * MiB, 1, 0)
            assert on1.peak == 50 * MiB and on0.peak == on0.allocated_before, (on0, on1)
            print("OK")
        """)
        self.assertIn("gpumem: outer: allocated 2.00 MiB -> 3.00 MiB (1.00 MiB), peak 10.00 MiB", r.stderr)

    def test_tensors_groups_live_cuda_tensors_and_gradients(self):
        self.check("""
            import types

            class Tensor:
                def __init__(self, shape, cuda=True, grad=None):
                    self.shape, self.is_cuda, self.grad, self.dtype = shape, cuda, grad, "torch.float32"
                def element_size(self): return 4
                def nelement(self):
                    n = 1
                    for d in self.shape: n *= d
                    return n
                def get_device(self): return 0 if self.is_cuda else -1

            class Parameter(Tensor):
                pass

            torch.Tensor = Tensor
            torch.is_tensor = lambda o: isinstance(o, Tensor)
            torch.nn = types.SimpleNamespace(Parameter=Parameter)
            weight = Parameter((1024, 1024), grad=Tensor((1024, 1024)))
            state = {"exp_avg": Tensor((1024, 1024)), "step": Tensor((1,), cuda=False)}
            acts = [Tensor((64, 256)) for _ in range(3)]
            groups = gpumem.tensors()
            big = groups[0]
            assert (big.shape, big.dtype, big.count, big.bytes) == ((1024, 1024), "float32", 3, 3 * 4 * MiB), big
            assert set(big.kinds) == {"parameter", "gradient", "tensor"}, big.kinds
            assert (groups[1].shape, groups[1].count) == ((64, 256), 3), groups[1]
            assert len(groups) == 2, groups                    # the CPU tensor is not listed
            assert gpumem.tensors(device=1) == []
            # torch's spellings of a device (returned [] before: compared with the string as given)
            assert len(gpumem.tensors(device="cuda:0")) == 2 and len(gpumem.tensors(device="cuda")) == 2
            assert gpumem.tensors(device="cuda:1") == []
            for bad in (1.5, -1, True, object()):                # were [] (1.5 named the current device)
                try:
                    gpumem.tensors(device=bad)
                    raise AssertionError(f"tensors({bad!r}) accepted")
                except ValueError:
                    pass
            assert str(big) == "3 x float32[1024, 1024] (parameter, gradient, tensor): 12.00 MiB", str(big)

            # With memory history on, each group says where its tensors were allocated.
            torch.cuda.memory._record_memory_history()
            def make_activation():
                t = Tensor((7, 7))
                t.ptr = raw.malloc(1 * MiB, 0, 0)
                t.data_ptr = lambda: t.ptr
                return t
            act = make_activation()
            [g] = [g for g in gpumem.tensors() if g.shape == (7, 7)]
            assert len(g.where) == 1 and g.where[0].endswith(" in make_activation"), g.where
            assert str(g).endswith(" from " + g.where[0]), str(g)
            print("OK")
        """)

    def test_purge_and_print_memory(self):
        r = self.check("""
            p = raw.malloc(16 * MiB, 0, 0)
            raw.free(p, 16 * MiB, 0, 0)
            assert torch.cuda.memory_reserved(0) >= 16 * MiB
            result = gpumem.purge()
            assert result.reserved_before >= 16 * MiB and result.reserved_after == 0, result
            assert result.allocated_after == 0
            gpumem.print_memory()
            print("OK")
        """)
        self.assertIn("given back", r.stderr)
        self.assertIn("gpumem: allocated 0 B, max allocated 16.00 MiB, reserved 0 B", r.stdout)

    def test_cell_magic_tracks_the_cell(self):
        self.check("""
            class FakeIPython:
                def register_magic_function(self, fn, kind, name): self.magic = (fn, kind, name)
                def run_cell(self, cell): exec(cell, globals())
            ip = FakeIPython()
            gpumem.load_ipython_extension(ip)
            fn, kind, name = ip.magic
            assert (kind, name) == ("cell", "track")
            fn("cell 3", "p = raw.malloc(3 * MiB, 0, 0)")
            assert gpumem._notebook.track_records()[-1].label == "cell 3"
            assert gpumem._notebook.track_records()[-1].allocated_after == 3 * MiB
            print("OK")
        """)


if __name__ == "__main__":
    unittest.main()
