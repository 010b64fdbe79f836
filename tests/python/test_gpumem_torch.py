"""python/gpumem_torch.py and `gpumem run`, in CI: the ctypes layer against the host backend, install()
and the sitecustomize against a test double of torch (fake_torch/). What needs real PyTorch + CUDA is the
last class; it skips here and runs in scripts/gpu-check.sh.

Needs GPUMEM_BUILD_DIR (holding libgpumem.so, gpumem_torch.py and the gpumem binary); ctest sets it."""
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
            assert set(raw.hooks) == {"init", "reset", "memory_fraction", "base_alloc", "record_stream"}, raw.hooks
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


class GpumemRun(unittest.TestCase):
    GPUMEM = os.path.join(BUILD, "gpumem")
    PROGRAM = """
        import sys, torch, gpumem_torch
        assert gpumem_torch.is_installed()          # installed by the sitecustomize on `import torch`
        raw = torch.cuda.memory._current.allocator()
        torch.cuda._lazy_init()
        blocks = [raw.malloc(8 << 20, 0, 0) for _ in range(int(sys.argv[1]))]
        gpumem_torch.allocate(int(sys.argv[2]) << 20, device=0)  # raises OutOfMemoryError past the limit
        print("done", len(blocks))
    """

    def run_gpumem(self, *args, program_args=("2", "1")):
        with tempfile.TemporaryDirectory() as d:
            prog = os.path.join(d, "train.py")
            with open(prog, "w") as f:
                f.write(textwrap.dedent(self.PROGRAM))
            other = os.path.join(d, "other")
            os.mkdir(other)
            with open(os.path.join(other, "sitecustomize.py"), "w") as f:
                f.write("import os\nos.environ['OTHER_SITECUSTOMIZE_RAN'] = '1'\n")
            env = dict(os.environ, PYTHONPATH=os.pathsep.join([FAKE_TORCH, other]))
            report = os.path.join(d, "report.json")
            r = subprocess.run([self.GPUMEM, "run", "--backend", "host", "--report", report, *args, "--",
                                sys.executable, prog, *program_args], env=env, capture_output=True, text=True,
                               timeout=120)
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

    def test_limit_breach_exits_with_status_3(self):
        r, report = self.run_gpumem("--limit", "16MiB", program_args=("1", "12"))
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("CUDA out of memory. Tried to allocate", r.stderr)
        self.assertTrue(any(p["oom"] for p in report))

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


if __name__ == "__main__":
    unittest.main()
