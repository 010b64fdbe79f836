"""Checks a gpumem-written snapshot pickle against PyTorch's own (tests/data/native_snapshot.pickle,
recorded with torch 2.11 on an H100) key by key and type by type, then runs the pure-Python parts of
torch.cuda._memory_viz's reading on it when torch is importable. Prints PASS/FAIL lines; exit 1 on failure.
Usage: check_torch_snapshot.py GPUMEM_SNAPSHOT NATIVE_SNAPSHOT"""
import pickle
import sys

failures = []


def check(cond, what):
    print(("PASS " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def same_shape(ours, native, where):
    """Every key PyTorch writes is there with the same type (recursively, first element of lists)."""
    if isinstance(native, dict):
        if not isinstance(ours, dict):
            check(False, f"{where}: a dict")
            return
        for key, value in native.items():
            if key not in ours:
                check(False, f"{where}: key {key!r}")
                continue
            same_shape(ours[key], value, f"{where}.{key}")
    elif isinstance(native, list):
        if not isinstance(ours, list):
            check(False, f"{where}: a list")
            return
        if native and ours:
            same_shape(ours[0], native[0], f"{where}[0]")
    elif isinstance(native, bool) or isinstance(ours, bool):
        if type(ours) is not type(native):
            check(False, f"{where}: {type(native).__name__}, not {type(ours).__name__}")
    elif not isinstance(ours, type(native)):
        check(False, f"{where}: {type(native).__name__}, not {type(ours).__name__}")


def main():
    with open(sys.argv[1], "rb") as f:
        ours = pickle.load(f)
    with open(sys.argv[2], "rb") as f:
        native = pickle.load(f)
    before = len(failures)
    same_shape(ours, native, "snapshot")
    for seg in native["segments"][:1]:
        for mine in ours["segments"]:
            same_shape(mine, seg, "segment")
            for block in mine["blocks"]:
                same_shape(block, seg["blocks"][0], "block")
    # Every trace entry of every action has the keys the native one of that action has.
    native_by_action = {e["action"]: e for e in native["device_traces"][0]}
    for trace in ours["device_traces"]:
        for e in trace:
            if e["action"] in native_by_action:
                same_shape(e, native_by_action[e["action"]], "trace " + e["action"])
            else:
                check(e["action"] in ("segment_map", "segment_unmap"), "known action " + e["action"])
    check(len(failures) == before, "keys and types match PyTorch's snapshot")

    # What _memory_viz relies on: blocks tile their segment; sizes add up; states are PyTorch's.
    states = {"active_allocated", "active_pending_free", "inactive"}
    for seg in ours["segments"]:
        total = sum(b["size"] for b in seg["blocks"])
        addr = seg["address"]
        tiled = True
        for b in seg["blocks"]:
            tiled &= b["address"] == addr and b["state"] in states
            addr += b["size"]
        check(tiled and total == seg["total_size"], f"segment {seg['address']:#x} tiled by its blocks")
        alloc = sum(b["size"] for b in seg["blocks"] if b["state"] == "active_allocated")
        check(alloc == seg["allocated_size"], f"segment {seg['address']:#x} allocated_size")
    actions = {e["action"] for t in ours["device_traces"] for e in t}
    for needed in [a for a in sys.argv[3:] if not a.startswith("--")]:
        check(needed in actions, "trace has " + needed)
    frames = [f for t in ours["device_traces"] for e in t for f in e["frames"]]
    if "--frames" in sys.argv:
        check(any(f["line"] > 0 for f in frames), "trace entries carry frames")

    try:
        from torch.cuda import _memory_viz  # only where torch is installed (the GPU machine)
    except Exception:
        print("SKIP torch.cuda._memory_viz not importable here")
    else:
        _memory_viz.segments(ours)
        _memory_viz.memory(ours)
        _memory_viz.trace_plot(ours)
        check(True, "_memory_viz.segments / memory / trace_plot read it")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
