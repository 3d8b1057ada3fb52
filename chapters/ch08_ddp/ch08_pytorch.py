#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 8's PyTorch twin: DistributedDataParallel with torch.distributed.

The same sections, flags and printed lines as ch08, with gloo on the CPU
and init_method env://. On GPUs (--device auto where CUDA is available, or
cuda) each rank takes cuda:LOCAL_RANK and NCCL, as torchrun's scripts do;
where there are fewer GPUs than ranks on the node (NCCL refuses two ranks on
one GPU), --device auto trains on the CPU over gloo and says why. Started without RANK in the
environment, it runs itself again under tools/launch, as ./ch08 does:

    /usr/bin/python3 chapters/ch08_ddp/ch08_pytorch.py --quick
    tools/launch --nproc-per-node 2 /usr/bin/python3 chapters/ch08_ddp/ch08_pytorch.py --quick

Only rank 0 prints and saves. Run it with a Python that has torch and numpy
(Debian: /usr/bin/python3 with python3-torch).
"""
import argparse
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "chapters"))
import twin  # noqa: E402  (chapters/twin.py: the flags, sections and errors every twin shares; puts tools/fixtures on the path)
import fmnist  # noqa: E402  (Fashion-MNIST's IDX files as tensors)
import st  # noqa: E402  (the repository's safetensors reader/writer)
from threaded_dp import ThreadedDataParallel  # noqa: E402  (DataParallel's steps on threads)

MEAN, STD = 0.2860, 0.3530
TIMED_STEPS = 100  # steps timed for overlap and DP vs DDP (--quick: QUICK_TIMED_STEPS)
QUICK_TIMED_STEPS = 20
DEV = "cpu"  # this rank's device: "cpu", or "cuda:LOCAL_RANK" under NCCL (pick_backend)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="ch08_pytorch.py", description="Chapter 8's twin: DDP.")
    p.add_argument("--device", default="auto",
                   help="auto (each rank on cuda:LOCAL_RANK when there is a GPU per rank, else the CPU), cpu, "
                        "cuda (default: auto)")
    p.add_argument("--seed", type=int, default=0, help="seed (default: 0)")
    p.add_argument("--quick", action="store_true", help="1 epoch of 2560 images (used by the tests)")
    p.add_argument("--metrics", metavar="FILE", help="write the figures as JSON to FILE (default: none)")
    p.add_argument("--nproc", type=int, default=2, help="ranks started under tools/launch (default: 2)")
    p.add_argument("--backend", default="auto", choices=["auto", "gloo", "mpi", "nccl"],
                   help="auto: nccl on GPUs, gloo on the CPU (default: auto)")
    p.add_argument("--epochs", type=int, default=2, help="passes over the training images (default: 2; --quick 1)")
    p.add_argument("--batch-size", type=int, default=64, help="images per rank per step (default: 64)")
    p.add_argument("--accumulate", type=int, default=1, help="micro-batches per step, no_sync() (default: 1)")
    p.add_argument("--lr", type=float, default=0.05, help="SGD learning rate (default: 0.05)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (default: 0.9)")
    p.add_argument("--bucket-mb", type=float, default=0,
                   help="DDP's bucket_cap_mb (0: not given, 1 MiB first bucket then 25) (default: 0)")
    p.add_argument("--train-size", type=int, default=0,
                   help="training images used, 0: all 60000 (default: 0; --quick 2560)")
    p.add_argument("--data", default=None,
                   help="Fashion-MNIST folder (default: $CT_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist)")
    p.add_argument("--save", metavar="FILE", help="rank 0 saves the model here (default: ch08_pytorch_model.safetensors)")
    twin.explain(p, {})
    a = p.parse_args(argv)
    if a.epochs < 1 or a.batch_size < 1 or a.accumulate < 1 or a.lr <= 0 or a.bucket_mb < 0:
        p.error("--epochs, --batch-size, --accumulate >= 1; --lr > 0; --bucket-mb >= 0")
    if a.quick:
        a.epochs = 1 if a.epochs == 2 else a.epochs
        a.train_size = a.train_size or 2560
    a.timed_steps = QUICK_TIMED_STEPS if a.quick else TIMED_STEPS
    return a


def launch_if_needed(argv, nproc):
    """No RANK: run this script again under tools/launch (as torchrun would)."""
    if os.environ.get("RANK"):
        if os.environ["RANK"] != "0":
            sys.stdout = open(os.devnull, "w")  # only rank 0 prints
        return
    launch = os.path.join(ROOT, "tools", "launch")
    os.execv(launch, [launch, "--nproc-per-node", str(nproc), sys.executable, os.path.abspath(__file__), *argv])


def sync(torch):
    """Waits for this rank's GPU work (NCCL's collectives and the kernels are asynchronous), so
    that a host clock read after it times the work; nothing to wait for on the CPU."""
    if DEV != "cpu":
        torch.cuda.synchronize()


def reduce_scalar(torch, dist, v, op):
    t = torch.tensor([float(v)], dtype=torch.float64, device=DEV)
    dist.all_reduce(t, op=op)
    return float(t[0])


def show_group(torch, dist, metrics):
    twin.section("process group")
    w = dist.get_world_size()
    mine = torch.tensor([dist.get_rank(), int(os.environ["LOCAL_RANK"]), os.getpid(),
                         int(DEV.split(":")[1]) if ":" in DEV else -1], dtype=torch.float64, device=DEV)
    all_ = [torch.zeros(4, dtype=torch.float64, device=DEV) for _ in range(w)]
    dist.all_gather(all_, mine)
    print(f"backend {dist.get_backend()}, world size {w}, MASTER_ADDR {os.environ['MASTER_ADDR']}, "
          f"MASTER_PORT {os.environ['MASTER_PORT']}")
    print(f"{'rank':>5} {'local rank':>11} {'pid':>8}  device")
    for v in all_:
        print(f"{int(v[0]):>5} {int(v[1]):>11} {int(v[2]):>8}  {'cpu' if v[3] < 0 else 'cuda:%d' % int(v[3])}")
    metrics.update(world_size=w, backend=dist.get_backend())


def show_collectives(torch, dist, metrics):
    twin.section("collectives")
    r, w = dist.get_rank(), dist.get_world_size()
    # twin: collectives
    t = torch.full((4,), float(r + 1), device=DEV)
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    s = float(t[0])
    t = torch.full((4,), float(100 + r), device=DEV)
    dist.broadcast(t, src=w - 1)
    b = float(t[0])
    out = [torch.full((2,), -1.0, device=DEV) for _ in range(w)]
    dist.all_gather(out, torch.full((2,), 10.0 * r, device=DEV))
    # twin: end
    terms = " + ".join(str(k) for k in range(1, w + 1)) if w <= 4 else f"1 + 2 + ... + {w}"
    print(f"all_reduce(r + 1, SUM)  = {s:g}   ({terms} = {w * (w + 1) // 2})")
    print(f"broadcast(100 + r, src={w - 1}) = {b:g}")
    gathered = [float(o[0]) for o in out]
    print("all_gather(10 r)        =" + "".join(f" {g:g}" for g in gathered))
    mine = torch.zeros(1, device=DEV)
    chunks = [torch.full((1,), float(r + k), device=DEV) for k in range(w)]
    if hasattr(dist, "reduce_scatter") and dist.get_backend() != "gloo":
        dist.reduce_scatter(mine, chunks)
    else:  # gloo has no reduce_scatter: all-reduce the stack, keep this rank's row (what ct does)
        stack = torch.stack(chunks)
        dist.all_reduce(stack)
        mine = stack[r]
    print(f"reduce_scatter(r + k) on rank 0 = {float(mine[0]):g}   (sum over r of r + 0 = {w * (w - 1) // 2})")
    dist.barrier()
    print(f"barrier: all {w} ranks arrived")
    metrics.update(all_reduce_sum=s, broadcast_value=b, all_gather=gathered, reduce_scatter_rank0=float(mine[0]))


def show_sampler(w, metrics):
    twin.section("sampler")
    from torch.utils.data import DistributedSampler
    flat = []
    for shuffle in (False, True):
        for epoch in range(2 if shuffle else 1):
            for r in range(w):
                # twin: sampler
                s = DistributedSampler(range(10), num_replicas=w, rank=r, shuffle=shuffle, seed=0)
                s.set_epoch(epoch)
                idx = list(s)
                # twin: end
                print(f"shuffle {str(shuffle):<5} epoch {epoch}  rank {r}: " + " ".join(map(str, idx)))
                flat += idx
    metrics["sampler_table"] = flat


def show_bandwidth(torch, dist, quick, metrics):
    twin.section("all-reduce bandwidth")
    w = dist.get_world_size()
    sizes, alg, bus = [], [], []
    print(f"{'bytes':>10} {'time (us)':>10} {'algbw GB/s':>12} {'busbw GB/s':>12}")
    nbytes = 4096
    while nbytes <= ((1 << 20) if quick else (16 << 20)):
        t = torch.ones(nbytes // 4, device=DEV)
        times = []
        for _ in range(5):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(t)
            sync(torch)
            times.append(time.perf_counter() - t0)
        sec = reduce_scalar(torch, dist, statistics.median(times), dist.ReduceOp.MAX)
        sizes.append(nbytes)
        alg.append(nbytes / sec / 1e9)
        bus.append(alg[-1] * 2 * (w - 1) / w)
        print(f"{nbytes:>10} {sec * 1e6:>10.1f} {alg[-1]:>12.3f} {bus[-1]:>12.3f}")
        nbytes *= 16
    if w == 2:
        print("(2 ranks: 2(N - 1)/N = 1, so busbw equals algbw; they part from 3 ranks on)")
    metrics.update(allreduce_bytes=sizes, allreduce_algbw_gbs=alg, allreduce_busbw_gbs=bus)


def build_mlp(nn):
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                         nn.Linear(128, 10))


def train_step(torch, nn, ddp, opt, x_parts, y_parts):
    # twin: train_step
    opt.zero_grad(set_to_none=True)
    total = 0.0
    for j, (x, y) in enumerate(zip(x_parts, y_parts)):
        last = j == len(x_parts) - 1
        ctx = ddp.no_sync() if not last else torch.enable_grad()  # no all-reduce before the last
        with ctx:
            loss = nn.functional.cross_entropy(ddp(x), y) / len(x_parts)
            loss.backward()
        total += loss.item()
    opt.step()
    # twin: end
    return total


def pick_backend(torch, a):
    """(backend, this rank's device, why) for --device and --backend; (None, None, error) when
    they cannot work. NCCL takes one GPU per rank (cuda:LOCAL_RANK); with fewer GPUs than the
    node's ranks, --device auto falls back to the CPU over gloo and says why."""
    local = int(os.environ.get("LOCAL_RANK", "0"))
    ranks = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if a.device not in ("auto", "cpu", "cuda"):
        return None, None, f"--device expects auto, cpu or cuda, got {a.device!r}"
    if a.device == "cpu" or (a.device == "auto" and gpus == 0):
        if a.backend == "nccl":
            return None, None, "--backend nccl needs GPUs; use --backend gloo on the CPU"
        return ("gloo" if a.backend == "auto" else a.backend), "cpu", ""
    if gpus < ranks:  # NCCL refuses two ranks on one GPU
        msg = f"{gpus} GPU{'s' if gpus != 1 else ''} for {ranks} ranks: NCCL needs one GPU per rank"
        if a.device == "cuda" or a.backend == "nccl":
            return None, None, f"{msg}; use --nproc {gpus} or --device cpu" if gpus else f"no GPU: {msg}"
        return ("gloo" if a.backend == "auto" else a.backend), "cpu", \
            f"{msg}; the ranks train on the CPU over gloo (--nproc {gpus} --device cuda to use the GPU{'s' if gpus != 1 else ''})"
    if a.backend in ("gloo", "mpi"):
        return a.backend, "cpu", f"--backend {a.backend}: the ranks train on the CPU"
    return "nccl", f"cuda:{local}", ""


def main(argv):
    a = parse_args(argv)
    launch_if_needed(argv, a.nproc)
    try:
        import torch
        import torch.distributed as dist
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.utils.data import DistributedSampler
    except ImportError as e:
        print(f"ch08_pytorch.py: cannot import torch ({e})", file=sys.stderr)
        return 1
    global DEV
    backend, DEV, why = pick_backend(torch, a)
    if backend is None:
        print(f"ch08_pytorch.py: {why}", file=sys.stderr)
        return 1
    if DEV.startswith("cuda"):
        torch.cuda.set_device(DEV)  # before init: NCCL's communicator binds this rank to its GPU
    print(f"device: {DEV}" + (f" ({why})" if why else ""), flush=True)
    dist.init_process_group(backend)  # init_method env://: RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
    r, w = dist.get_rank(), dist.get_world_size()
    metrics = {"quick": int(a.quick)}
    show_group(torch, dist, metrics)
    show_collectives(torch, dist, metrics)
    show_sampler(w, metrics)
    show_bandwidth(torch, dist, a.quick, metrics)

    twin.section("training")
    folder = a.data or os.environ.get("CT_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"
    x_all, y_all = (t.to(DEV) for t in fmnist.load(torch, folder, True, MEAN, STD))
    x_test, y_test = (t.to(DEV) for t in fmnist.load(torch, folder, False, MEAN, STD))
    n = a.train_size if 0 < a.train_size < len(x_all) else len(x_all)
    sampler = DistributedSampler(range(n), num_replicas=w, rank=r, shuffle=True, seed=0)
    torch.manual_seed(1000 + r)  # different starts: DDP broadcasts rank 0's weights
    model = build_mlp(nn).to(DEV)
    # PyTorch 2.x: an explicit bucket_cap_mb caps the first bucket too; left out, the first
    # bucket is 1 MiB (torch 1.13 kept a 1 MiB first bucket either way)
    cap = {"bucket_cap_mb": a.bucket_mb} if a.bucket_mb > 0 else {}
    ddp = DDP(model, **cap,
              device_ids=[torch.cuda.current_device()] if DEV.startswith("cuda") else None)
    opt = torch.optim.SGD(ddp.parameters(), lr=a.lr, momentum=a.momentum)
    B, acc = a.batch_size, a.accumulate
    steps = len(sampler) // (B * acc)
    print(f"{w} ranks x batch {B} x {acc} accumulated = global batch {B * w * acc}; {n} training images, "
          f"{len(sampler)} per rank; (buckets: PyTorch does not say) ({'cap %g MB' % a.bucket_mb if a.bucket_mb > 0 else 'default cap: 1 MiB first, then 25 MiB'})")
    losses, accs = [], []
    for e in range(a.epochs):
        sampler.set_epoch(e)
        idx = torch.tensor(list(sampler))
        t0, total = time.perf_counter(), 0.0
        for k in range(steps):
            rows = [idx[(k * acc + j) * B:(k * acc + j + 1) * B] for j in range(acc)]
            total += train_step(torch, nn, ddp, opt, [x_all[i] for i in rows], [y_all[i] for i in rows])
        sync(torch)
        sec = reduce_scalar(torch, dist, time.perf_counter() - t0, dist.ReduceOp.MAX)
        test_idx = torch.tensor(list(DistributedSampler(range(2000), num_replicas=w, rank=r, shuffle=False,
                                                        drop_last=True)))
        with torch.no_grad():
            correct = float((model(x_test[test_idx]).argmax(1) == y_test[test_idx]).sum())
        acc_e = reduce_scalar(torch, dist, correct, dist.ReduceOp.SUM) / reduce_scalar(
            torch, dist, len(test_idx), dist.ReduceOp.SUM)
        loss_e = reduce_scalar(torch, dist, total / max(steps, 1), dist.ReduceOp.SUM) / w
        losses.append(loss_e)
        accs.append(acc_e)
        print(f"epoch {e + 1}: train loss {loss_e:.4f} (mean over ranks), test accuracy {acc_e:.4f}, {sec:.2f} s, "
              f"{steps * B * acc * w / sec:.0f} images/s")
    metrics.update(train_loss=losses, test_acc=accs, steps_per_epoch=steps)

    twin.section("overlap")
    idx = torch.tensor(list(sampler))

    def timed(overlap):  # the median step and median wait, each the slowest rank's
        dist.barrier()
        ms, wait = [], []
        for k in range(a.timed_steps):
            t0 = time.perf_counter()
            rows = idx[(k % steps) * B:(k % steps + 1) * B]
            opt.zero_grad(set_to_none=True)
            if overlap:
                nn.functional.cross_entropy(ddp(x_all[rows]), y_all[rows]).backward()
            else:  # backward first, then every gradient all-reduced: what DDP's buckets avoid
                with ddp.no_sync():
                    nn.functional.cross_entropy(ddp(x_all[rows]), y_all[rows]).backward()
                sync(torch)
                t1 = time.perf_counter()
                for p in model.parameters():
                    dist.all_reduce(p.grad)
                    p.grad /= w
                sync(torch)
                wait.append(1e3 * (time.perf_counter() - t1))
            opt.step()
            sync(torch)  # every step, as the C chapter's step_ms explains
            ms.append(1e3 * (time.perf_counter() - t0))
        return (reduce_scalar(torch, dist, statistics.median(ms), dist.ReduceOp.MAX),
                reduce_scalar(torch, dist, statistics.median(wait or [0.0]), dist.ReduceOp.MAX))

    off, w_off = timed(False)
    on, _ = timed(True)
    print(f"median of {a.timed_steps} steps, the slowest rank's:")
    print(f"overlap off: {off:.2f} ms per step, {w_off:.3f} ms of it waiting for all-reduce after backward")
    print(f"overlap on:  {on:.2f} ms per step, (inside backward: PyTorch does not report the wait)")
    metrics.update(step_ms_overlap_on=on, step_ms_overlap_off=off)

    twin.section("DP vs DDP")
    dp_ms = solo_ms = 0.0
    if r == 0:
        def timed_global(model, forward):  # ms per SGD step on the global batch, the median step
            step_opt = torch.optim.SGD(model.parameters(), lr=a.lr)
            ms = []
            for _ in range(a.timed_steps):
                t0 = time.perf_counter()
                rows = idx[0:B * w]
                step_opt.zero_grad(set_to_none=True)
                nn.functional.cross_entropy(forward(x_all[rows]), y_all[rows]).backward()
                step_opt.step()
                sync(torch)
                ms.append(1e3 * (time.perf_counter() - t0))
            return statistics.median(ms)

        dp_model, solo = build_mlp(nn).to(DEV), build_mlp(nn).to(DEV)  # solo: one process alone, what W ranks scale against
        dp_ms = timed_global(dp_model, ThreadedDataParallel(torch, nn, dp_model, w))
        solo_ms = timed_global(solo, solo)
    dist.barrier()
    print(f"median of {a.timed_steps} steps each")
    print(f"global batch {B * w} on {w} devices: DDP {on:.2f} ms per step, DataParallel {dp_ms:.2f} ms per step "
          f"({dp_ms / on:.2f}x)")
    print(f"one process alone, the same global batch: {solo_ms:.2f} ms per step; DDP's speed-up over it "
          f"{solo_ms / on:.2f}x on {w} ranks")
    metrics.update(ddp_ms_per_step=on, dp_ms_per_step=dp_ms, single_ms_per_step=solo_ms)

    twin.section("checkpoint")
    path = a.save or "ch08_pytorch_model.safetensors"
    if r == 0:
        st.save(path, {k: v.cpu() for k, v in model.state_dict().items()})  # rank 0 alone: the bare model's keys
    dist.barrier()
    loaded = st.load_torch(path)
    diff = max(float((loaded[k].to(v.device) - v).abs().max()) for k, v in model.state_dict().items())
    worst = reduce_scalar(torch, dist, diff, dist.ReduceOp.MAX)
    print(f"rank 0 saved {path}; every rank loaded it: largest difference from its own parameters {worst:g}")
    metrics["checkpoint_max_diff"] = worst
    if r == 0:
        twin.write_metrics(a.metrics, metrics)
    dist.barrier()  # every rank done with every collective
    # Debian's torch 1.13 with gloo sometimes never returns from destroy_process_group or from
    # the interpreter's exit (about 1 run in 3 here, one rank spinning); everything is written,
    # so leave at once, as a crashed rank would, but with status 0.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
