"""python/gpumem_history.py through gpumem_torch.install() against the fake torch (whose memory.py has
PyTorch 2.11's history functions reduced to their torch._C calls): _record_memory_history, _snapshot,
_dump_snapshot and memory_snapshot answer from gpumem in PyTorch's format, with Python frames.
Needs GPUMEM_BUILD_DIR; ctest sets it."""
import os
import subprocess
import sys
import textwrap
import unittest

BUILD = os.environ.get("GPUMEM_BUILD_DIR", os.path.join(os.path.dirname(__file__), "..", "..", "build"))
HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(os.path.dirname(HERE))


def run_python(code):
    env = dict(os.environ, GPUMEM_BACKEND="host", GPUMEM_HOST_CAPACITY="256MiB",
               GPUMEM_LIBRARY=os.path.join(BUILD, "libgpumem.so"),
               PYTHONPATH=os.pathsep.join([os.path.join(HERE, "fake_torch"), BUILD]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120)


class MemoryHistory(unittest.TestCase):
    def test_history_snapshot_and_dump_in_pytorchs_format(self):
        path = os.path.join(BUILD, f"history-test-{os.getpid()}.pickle")
        r = run_python(f"""
            import pickle, torch, gpumem_torch
            gpumem_torch.install()
            raw = torch.cuda.memory._current.allocator()
            torch.cuda.memory._record_memory_history(max_entries=1000)
            def make_activation():
                return raw.malloc(3 << 20, 0, 0)
            p = make_activation()
            q = raw.malloc(4000, 0, 0)
            raw.free(p, 3 << 20, 0, 0)
            s = torch.cuda.memory._snapshot()
            actions = [e["action"] for e in s["device_traces"][0]]
            assert actions.count("alloc") == 2 and "free_requested" in actions and "free_completed" in actions, actions
            alloc = [e for e in s["device_traces"][0] if e["action"] == "alloc"][0]
            assert alloc["size"] == 3 << 20, alloc
            names = [f["name"] for f in alloc["frames"]]
            assert "make_activation" in names, names
            blocks = [b for seg in s["segments"] for b in seg["blocks"] if b["state"] == "active_allocated"]
            assert [b["requested_size"] for b in blocks] == [4000], blocks
            assert any(f["line"] > 0 for f in blocks[0]["frames"]), blocks
            torch.cuda.memory._dump_snapshot("{path}")
            with open("{path}", "rb") as f:
                dumped = pickle.load(f)
            assert set(dumped) == set(s), (set(dumped), set(s))
            segs = torch.cuda.memory.memory_snapshot()  # torch.cuda.memory_snapshot is the same function
            assert isinstance(segs, list) and segs and "blocks" in segs[0], segs
            torch.cuda.memory._record_memory_history(enabled=None)
            n = len(torch.cuda.memory._snapshot()["device_traces"][0])
            raw.free(raw.malloc(512, 0, 0), 512, 0, 0)
            assert len(torch.cuda.memory._snapshot()["device_traces"][0]) == n, "stopped history records nothing"
            torch.cuda.memory._record_memory_history(True)        # the legacy boolean form
            raw.free(raw.malloc(1024, 0, 0), 1024, 0, 0)
            torch.cuda.memory._record_memory_history(False)
            torch.cuda.memory._record_memory_history("state")     # frames of live blocks only, no events
            raw.malloc(2048, 0, 0)
            try:
                torch.cuda.memory._record_memory_history("bogus")
            except ValueError as e:
                print("ERR", e)
            # What PyTorch refuses: a negative or fractional count (-1 reached C as SIZE_MAX), a NUL in a
            # file name (the file was written under the name cut at it); a bytes path is a path.
            for bad in (-1, 1.5, True):
                try:
                    torch.cuda.memory._record_memory_history(max_entries=bad)
                    print("ACCEPTED", bad)
                except ValueError:
                    pass
            try:
                torch.cuda.memory._dump_snapshot("{path}\\0x")
                print("ACCEPTED NUL")
            except ValueError:
                pass
            torch.cuda.memory._dump_snapshot(b"{path}.bytes")
            import os
            assert os.path.exists("{path}.bytes"), "bytes path"
            os.remove("{path}.bytes")
            print("OK")
        """)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("OK", r.stdout)
        self.assertIn("ERR enabled must be None, 'state' or 'all'", r.stdout)
        self.assertNotIn("ACCEPTED", r.stdout)
        check = subprocess.run([sys.executable, os.path.join(SOURCE, "tests", "report", "check_torch_snapshot.py"), path,
                                os.path.join(SOURCE, "tests", "data", "native_snapshot.pickle"), "alloc",
                                "free_requested", "free_completed", "--frames"], capture_output=True, text=True)
        os.remove(path)
        self.assertEqual(check.returncode, 0, check.stdout + check.stderr)


if __name__ == "__main__":
    unittest.main()
