"""CUDA graphs and memory pools: does a program compute what it computes on PyTorch's own allocator?

    python3 graph_checks.py NAME        one check in this process: prints "PASS NAME ..." or "FAIL NAME ...",
                                        exit 0 / 1
    python3 graph_checks.py --list      the check names

scripts/gpu-graph-check.sh runs each check in a fresh process natively and under `gpumem run` and prints a
table. Every check compares against values computed without graphs, bit for bit where the computation is
deterministic, and fills other memory between capture and replay so that a graph whose memory was handed
to other tensors shows wrong numbers instead of passing by luck.
"""
import sys

import torch

CHECKS = {}


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def scribble(n=40, size=1 << 20):
    """Allocates and fills tensors of several sizes (what a program does between replays); returns them
    with their fill values so the caller can verify them after a replay."""
    out = []
    for i in range(n):
        t = torch.full((size // 4 * (1 + i % 5),), float(1000 + i), device="cuda")
        out.append((t, float(1000 + i)))
    return out


def untouched(tensors):
    torch.cuda.synchronize()
    return all(bool((t == v).all()) for t, v in tensors)


@check
def graph_isolation():
    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    g = torch.cuda.CUDAGraph()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm up as PyTorch documents
        y = (x * 2 + 1).sin() * 3
    torch.cuda.current_stream().wait_stream(s)
    with torch.cuda.graph(g):
        tmp = x * 2 + 1           # intermediates freed inside the capture: the replay still writes them
        tmp2 = tmp.sin()
        y = tmp2 * 3
        del tmp, tmp2
    expected = (x * 2 + 1).sin() * 3
    others = scribble()
    for step in range(5):
        x.add_(1)
        expected = (x * 2 + 1).sin() * 3
        g.replay()
        if not torch.equal(y, expected):
            return False, f"replay {step}: {(y != expected).float().mean().item():.1%} of the output differs"
        if not untouched(others):
            return False, f"replay {step} overwrote tensors allocated after the capture"
        others += scribble(5)
    return True, "5 replays bit-exact, 65 other tensors untouched"


@check
def shared_pool_in_capture_order():
    pool = torch.cuda.graph_pool_handle()
    x = torch.ones(1 << 20, device="cuda")
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1, pool=pool):
        a = x * 2
        t = a + 3          # freed during capture: g2 may reuse it (pool shared, replayed in this order)
        b = t * 5
        del t
    with torch.cuda.graph(g2, pool=pool):
        c = b + 1
        u = c * 2
        d = u - a
        del u
    others = scribble()
    for step in range(4):
        x.fill_(step + 1)
        g1.replay()
        g2.replay()
        torch.cuda.synchronize()
        xa = (step + 1) * 2.0
        want = ((xa + 3) * 5 + 1) * 2 - xa
        if not bool((d == want).all()):
            return False, f"step {step}: got {d[0].item()} want {want}"
        if not untouched(others):
            return False, f"step {step}: tensors allocated after the captures changed"
    return True, "two graphs sharing a pool, 4 rounds exact"


@check
def concurrent_private_pools():
    n = 1 << 22
    x1 = torch.ones(n, device="cuda")
    x2 = torch.full((n,), 2.0, device="cuda")
    g1, g2 = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
    with torch.cuda.graph(g1):
        t = x1 * 3
        r1 = (t + 1).sum()
        del t
    with torch.cuda.graph(g2):
        t = x2 * 5
        r2 = (t - 1).sum()
        del t
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    others = scribble()
    for step in range(10):
        torch.cuda.synchronize()
        with torch.cuda.stream(s1):
            g1.replay()
        with torch.cuda.stream(s2):
            g2.replay()
        torch.cuda.synchronize()
        if r1.item() != 4.0 * n or r2.item() != 9.0 * n:
            return False, f"step {step}: sums {r1.item()} / {r2.item()} want {4.0 * n} / {9.0 * n}"
    if not untouched(others):
        return False, "tensors allocated after the captures changed"
    return True, "10 concurrent replays exact"


@check
def output_after_graph_deleted():
    x = torch.full((1 << 20,), 7.0, device="cuda")
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        tmp = x * 3
        out = tmp + 1
        del tmp
    g.replay()
    del g
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    others = scribble()
    val = out.sum().item()
    if val != 22.0 * (1 << 20):
        return False, f"output reads {val}"
    out.mul_(2)
    torch.cuda.synchronize()
    if not untouched(others):
        return False, "writing the output changed other tensors"
    del out
    torch.cuda.empty_cache()
    torch.cuda.synchronize()
    return True, "output valid after its graph was deleted, memory released after"


@check
def capture_on_several_streams():
    x = torch.arange(1 << 20, device="cuda", dtype=torch.float32)
    g = torch.cuda.CUDAGraph()
    side = torch.cuda.Stream()
    with torch.cuda.graph(g):
        main = torch.cuda.current_stream()
        side.wait_stream(main)
        with torch.cuda.stream(side):
            s_tmp = x * 2
            s_out = s_tmp + 1
            del s_tmp
        m_tmp = x * 3
        m_out = m_tmp - 1
        del m_tmp
        main.wait_stream(side)
        total = s_out + m_out
    others = scribble()
    for step in range(5):
        x.add_(1)
        g.replay()
        torch.cuda.synchronize()
        if not torch.equal(total, (x * 2 + 1) + (x * 3 - 1)):
            return False, f"replay {step} wrong"
    if not untouched(others):
        return False, "other tensors changed"
    return True, "fork/join capture exact"


def _mlp(seed):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)).cuda()


@check
def make_graphed_callables():
    eager, graphed = _mlp(0), _mlp(0)
    sample = torch.randn(64, 256, device="cuda", requires_grad=True)
    graphed = torch.cuda.make_graphed_callables(graphed, (sample,))
    others = scribble()
    for step in range(6):
        torch.manual_seed(100 + step)
        inp = torch.randn(64, 256, device="cuda", requires_grad=True)
        inp2 = inp.detach().clone().requires_grad_(True)
        y1, y2 = eager(inp), graphed(inp2)
        y1.sum().backward()
        y2.sum().backward()
        if not torch.allclose(y1, y2, rtol=0, atol=1e-5) or not torch.allclose(inp.grad, inp2.grad, rtol=0, atol=1e-5):
            return False, f"step {step}: graphed differs from eager by {(y1 - y2).abs().max().item()}"
        others += scribble(3)
    if not untouched(others):
        return False, "other tensors changed"
    return True, "6 steps forward+backward equal to eager"


@check
def mem_pool():
    pool = torch.cuda.MemPool()
    with torch.cuda.use_mem_pool(pool):
        a = torch.full((1 << 20,), 3.0, device="cuda")
    b = torch.full((1 << 20,), 4.0, device="cuda")
    others = scribble()
    if pool.use_count() < 1:
        return False, f"use_count {pool.use_count()}"
    ok = a.sum().item() == 3.0 * (1 << 20) and b.sum().item() == 4.0 * (1 << 20) and untouched(others)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool.id):
        c = a * 2
    g.replay()
    torch.cuda.synchronize()
    ok = ok and c.sum().item() == 6.0 * (1 << 20)
    del a, c, g
    del pool
    return ok, "MemPool + use_mem_pool + graph in the pool"


def _compiled_training(mode):
    model = _mlp(1)
    reference = _mlp(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.01)
    step_fn = torch.compile(model, mode=mode)
    losses, ref_losses = [], []
    for step in range(12):
        torch.manual_seed(step)
        x = torch.randn(128, 256, device="cuda")
        loss = step_fn(x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
        ref_loss = reference(x).pow(2).mean()
        ref_loss.backward()
        ref_opt.step()
        ref_opt.zero_grad(set_to_none=True)
        ref_losses.append(ref_loss.item())
        scribble(2)
    worst = max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(losses, ref_losses))
    return worst < 1e-3, f"12 steps, worst relative loss difference vs eager {worst:.2e}"


@check
def compile_reduce_overhead_training():
    return _compiled_training("reduce-overhead")


@check
def compile_reduce_overhead_inference():
    model = _mlp(2).eval()
    fast = torch.compile(model, mode="reduce-overhead")
    others = scribble()
    with torch.no_grad():
        for step in range(10):
            torch.manual_seed(step)
            x = torch.randn(32 + 32 * (step % 3), 256, device="cuda")
            y = fast(x).clone()
            ref = model(x)
            if not torch.allclose(y, ref, rtol=1e-4, atol=1e-4):
                return False, f"step {step}: differs by {(y - ref).abs().max().item()}"
    if not untouched(others):
        return False, "other tensors changed"
    return True, "10 inference steps (3 shapes) match eager"


def _train_step(loss, opt):
    """One optimizer step on loss; its value."""
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    return loss.item()


def _relative(got, want):
    return abs(got - want) / max(abs(want), 1e-12)

def _count_checkpoint_restores():
    """Wraps torch._C._cuda_setCheckpointPoolState (PyTorch's, or gpumem's replacement) to count the calls:
    proof that a check reached the graph-tree path that restores a pool to a checkpoint."""
    calls = [0]
    original = torch._C._cuda_setCheckpointPoolState

    def counted(*args, **kwargs):
        calls[0] += 1
        return original(*args, **kwargs)
    torch._C._cuda_setCheckpointPoolState = counted
    return calls


@check
def graph_tree_path_switches():
    """Two branches after a graph break: each switch records or replays a sibling path of the graph tree,
    and a recording below a replayed node restores the pool to that node's checkpoint. Outputs are compared
    with eager every call (an output held past the next call may be overwritten, natively too: graph trees
    allow it); once every path is recorded, allocated memory must stay put (adopted blocks freed)."""
    restores = _count_checkpoint_restores()
    torch.manual_seed(3)
    w1, w2 = torch.randn(512, 512, device="cuda") / 20, torch.randn(512, 512, device="cuda") / 20

    def head(x):
        return (x * 2 + 1).tanh()

    def branch(y, which):
        return (y @ w1).relu() * 3 if which else (y @ w2).sigmoid() + 1

    def fn(x, which):
        y = head(x)
        torch._dynamo.graph_break()
        return branch(y, which)

    fast = torch.compile(fn, mode="reduce-overhead")
    others = scribble()
    settled = []
    for step in range(120):
        which = (step // 3) % 2 == 0  # three calls per branch: warm-up, record, replay
        torch.manual_seed(100 + step)
        batch = (64, 128, 96)[(step // 6) % 3]
        x = torch.randn(batch, 512, device="cuda")
        out = fast(x, which)
        if step % 5 == 4:
            torch.cuda.empty_cache()  # what programs fighting "memory not released" do between calls
        want = branch(head(x), which)
        if not torch.allclose(out, want, rtol=1e-5, atol=1e-5):
            return False, f"call {step}: differs from eager by {(out - want).abs().max().item()}"
        others += scribble(2)
        if step in (59, 119):
            torch.cuda.synchronize()
            settled.append(torch.cuda.memory_allocated() - sum(t.numel() * 4 for t, _ in others))
    if restores[0] == 0:
        return False, "no pool checkpoint was restored: the check did not reach that path"
    if not untouched(others):
        return False, "other tensors changed"
    grew = settled[1] - settled[0]
    if grew > 8 << 20:  # every path and shape was recorded by call 59: the pool's blocks must be reused
        return False, f"allocated memory grew by {grew / 2**20:.1f} MiB between calls 59 and 119"
    return True, (f"120 calls over 2 paths x 3 shapes equal to eager, {restores[0]} checkpoint restores, "
                  f"allocated {grew / 2**20:+.1f} MiB from call 59 to 119")


@check
def graph_tree_train_and_eval():
    """Training steps (forward, backward: one graph-tree path) alternated with no-grad evaluation at another
    batch size (another path): losses equal to an eager copy trained alike, evaluation equal to eager."""
    restores = _count_checkpoint_restores()
    model, reference = _mlp(4), _mlp(4)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.01)
    fast = torch.compile(model, mode="reduce-overhead")
    others = scribble()
    worst = 0.0
    for step in range(16):
        torch.manual_seed(step)
        x = torch.randn(128, 256, device="cuda")
        loss = _train_step(fast(x).pow(2).mean(), opt)
        worst = max(worst, _relative(loss, _train_step(reference(x).pow(2).mean(), ref_opt)))
        with torch.no_grad():
            e = torch.randn(48, 256, device="cuda")
            got = fast(e).clone()
            want = reference(e)
            if not torch.allclose(got, want, rtol=1e-3, atol=1e-4):
                return False, f"step {step}: evaluation differs from eager by {(got - want).abs().max().item()}"
        others += scribble(2)
    if worst > 1e-3:
        return False, f"worst relative loss difference vs eager {worst:.2e}"
    if not untouched(others):
        return False, "other tensors changed"
    return True, f"16 train + eval rounds equal to eager (loss within {worst:.1e}), {restores[0]} checkpoint restores"


@check
def graph_tree_training_path_switches():
    """Training through a graph break with two branches after it (forward and backward graphs of each are
    recorded as graph-tree paths; switching branches restores checkpoints): losses and weights equal to an
    eager copy trained alike."""
    restores = _count_checkpoint_restores()

    def make(seed):
        torch.manual_seed(seed)
        return torch.nn.ModuleDict({"head": torch.nn.Linear(256, 256), "a": torch.nn.Linear(256, 64),
                                    "b": torch.nn.Linear(256, 64)}).cuda()
    model, reference = make(5), make(5)

    def forward(m, x, which):
        h = torch.relu(m["head"](x))
        torch._dynamo.graph_break()
        return (m["a"](h) if which else m["b"](h).tanh()).pow(2).mean()

    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.01)
    fast = torch.compile(forward, mode="reduce-overhead")
    others = scribble()
    worst = 0.0
    for step in range(24):
        which = (step // 3) % 2 == 0
        torch.manual_seed(200 + step)
        x = torch.randn(96, 256, device="cuda")
        loss = _train_step(fast(model, x, which), opt)
        worst = max(worst, _relative(loss, _train_step(forward(reference, x, which), ref_opt)))
        others += scribble(2)
    drift = max((p - q).abs().max().item() for p, q in zip(model.parameters(), reference.parameters()))
    if worst > 1e-3 or drift > 1e-4:
        return False, f"worst relative loss difference {worst:.2e}, weights differ by up to {drift:.2e}"
    if not untouched(others):
        return False, "other tensors changed"
    return True, f"24 steps over 2 branches equal to eager (loss within {worst:.1e}), {restores[0]} checkpoint restores"


@check
def graph_tree_two_functions_interleaved():
    """Two compiled functions (an encoder and a head, as a server compiles them) called in changing orders,
    at three batch sizes, with torch.compiler.cudagraph_mark_step_begin() between requests and earlier
    results kept (cloned): every result equal to eager, and the kept ones unchanged at the end."""
    restores = _count_checkpoint_restores()
    encoder, head = _mlp(6).eval(), _mlp(7).eval()
    fast_encoder = torch.compile(encoder, mode="reduce-overhead")
    fast_head = torch.compile(head, mode="reduce-overhead")
    others = scribble()
    kept = []
    with torch.no_grad():
        for step in range(60):
            torch.compiler.cudagraph_mark_step_begin()
            torch.manual_seed(400 + step)
            x = torch.randn((16, 48, 80)[step % 3], 256, device="cuda")
            if step % 4 == 3:
                got, want = fast_head(x), head(x)                      # the head alone
            else:
                got, want = fast_head(fast_encoder(x)), head(encoder(x))
            if not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
                return False, f"request {step}: differs from eager by {(got - want).abs().max().item()}"
            kept.append((got.clone(), want))
            others += scribble(1)
    for step, (got, want) in enumerate(kept):
        if not torch.allclose(got, want, rtol=1e-4, atol=1e-4):
            return False, f"kept result {step} changed"
    if not untouched(others):
        return False, "other tensors changed"
    return True, f"60 requests over 2 functions x 3 shapes equal to eager, {restores[0]} checkpoint restores"


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    if sys.argv[1] == "--list":
        print("\n".join(CHECKS))
        return
    name = sys.argv[1]
    try:
        ok, detail = CHECKS[name]()
        torch.cuda.synchronize()
    except Exception as e:  # a check that raises has failed; say how
        ok, detail = False, f"{type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    print(f"{'PASS' if ok else 'FAIL'} {name}: {detail}", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
