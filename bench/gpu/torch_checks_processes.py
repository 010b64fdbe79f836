"""The checks of bench/gpu/torch_checks.py that start other processes: CUDA IPC through torch.multiprocessing
(Queue, Pipe, spawn), DataLoader workers, DDP, and HF generate. Their process targets live here, at module
level, so spawned children can import them."""
import torch

from torch_checks_lib import MiB, check, digest

def _ipc_child(queue, done):
    t = queue.get()
    total = t.sum().item()
    t.add_(1)                                       # written by the receiver, seen by the sender
    torch.cuda.synchronize()
    done.put(total)


@check("test_multiprocessing.py:test_cuda_simple / _test_cuda_ipc")
def ipc_two_process_exchange():
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    queue, done = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_ipc_child, args=(queue, done))
    p.start()
    t = torch.full((8 * MiB,), 2.0, device="cuda")
    queue.put(t)
    total = done.get(timeout=120)
    p.join(60)
    assert p.exitcode == 0 and total == 2.0 * 8 * MiB, (p.exitcode, total)
    assert t.sum().item() == 3.0 * 8 * MiB


def _pipe_child(conn):
    view = conn.recv()                              # a strided view into a larger storage
    conn.send((view.shape, view.sum().item()))
    view.mul_(2)
    torch.cuda.synchronize()
    conn.send("done")


@check("test_multiprocessing.py:test_cuda_small_tensors (Pipe, views)")
def ipc_pipe_strided_view():
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    p = ctx.Process(target=_pipe_child, args=(child,))
    p.start()
    base = torch.arange(4096 * 1024, dtype=torch.float32, device="cuda").reshape(4096, 1024)
    view = base[100:200, ::2]                       # storage offset and strides
    expected, untouched = view.sum().item(), base[100:200, 1::2].sum().item()
    parent.send(view)
    shape, total = parent.recv()
    assert tuple(shape) == (100, 512) and total == expected, (shape, total, expected)
    assert parent.recv() == "done"
    p.join(60)
    assert p.exitcode == 0
    assert base[100:200, ::2].sum().item() == 2 * expected and base[100:200, 1::2].sum().item() == untouched


def _ddp_worker(rank, world, port, result):
    import os
    import torch.distributed as dist
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=world)
    torch.cuda.set_device(rank)
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64).cuda(), device_ids=[rank])
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for step in range(5):
        x = torch.randn(32, 64, device="cuda", generator=torch.Generator("cuda").manual_seed(step * world + rank))
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(round(loss.item(), 5))
    result.put((rank, losses))
    dist.destroy_process_group()


@check("DDP with NCCL", gpus=2)
def ddp_two_gpus():
    import socket
    import torch.multiprocessing as mp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    result = ctx.Queue()
    procs = [ctx.Process(target=_ddp_worker, args=(r, 2, port, result)) for r in range(2)]
    for p in procs:
        p.start()
    losses = dict(result.get(timeout=180) for _ in procs)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return digest(losses)


_TORCHRUN_WORKER = """
import os, json, torch, torch.distributed as dist
dist.init_process_group("nccl")
torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
torch.manual_seed(0)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64).cuda())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
losses = []
for step in range(5):
    loss = model(torch.randn(32 + step, 64, device="cuda")).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step(); losses.append(round(loss.item(), 5))
print(json.dumps({"losses": losses, "backend": torch.cuda.memory.get_allocator_backend()}))
dist.destroy_process_group()
"""


@check("torchrun (elastic launcher) with NCCL, one rank: the worker gets the same allocator as its launcher")
def torchrun_one_rank():
    import json
    import os
    import subprocess
    import sys
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        script = os.path.join(d, "worker.py")
        with open(script, "w") as f:
            f.write(_TORCHRUN_WORKER)
        out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=1", script],
                             capture_output=True, text=True, timeout=150)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads([line for line in out.stdout.splitlines() if line.startswith("{")][-1])
    expected = "pluggable" if os.environ.get("GPUMEM_LIBRARY") else "native"  # set by `gpumem run`
    assert result["backend"] == expected, f"worker allocator {result['backend']}, launcher's {expected}"
    return digest(result["losses"])


@check("DataLoader workers with pin_memory")
def dataloader_pin_memory():
    data = torch.utils.data.TensorDataset(torch.randn(256, 32))
    loader = torch.utils.data.DataLoader(data, batch_size=32, num_workers=2, pin_memory=True)
    total = sum(batch[0].cuda(non_blocking=True).sum() for batch in loader)
    assert abs(total.item() - data.tensors[0].sum().item()) < 1e-2


@check("HF transformers generate (GPT-2 shape, random weights)")
def hf_generate():
    try:
        import transformers
    except ImportError:
        return "transformers not installed"
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=4, n_head=8, n_embd=512, vocab_size=5000, n_positions=256)
    model = transformers.GPT2LMHeadModel(config).cuda().eval()
    ids = torch.randint(0, 5000, (4, 32), device="cuda", generator=torch.Generator("cuda").manual_seed(0))
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=48, do_sample=False, pad_token_id=0)
    assert out.shape == (4, 80)
    return digest(out.tolist())
