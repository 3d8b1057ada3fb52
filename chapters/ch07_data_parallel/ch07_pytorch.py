#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 7's PyTorch twin: DataParallel, one process driving many devices.

The same sections, flags and printed lines as ch07. On two or more distinct
GPUs the wrapper is torch's own nn.DataParallel. Where the device list
repeats a device or is the CPU (nn.DataParallel needs distinct CUDA devices
and otherwise just calls the module), the twin runs the same mechanics by
hand: torch.chunk splits the batch, one thread per chunk runs the module on
it with torch.func.functional_call over the module's own parameters (a
replica on the same device shares them, as replicate's broadcast would
copy them), torch.cat gathers, and autograd sums every chunk's gradient
into the parameters.

    ./ch07 --devices cpu,cpu,cpu --quick
    /usr/bin/python3 chapters/ch07_data_parallel/ch07_pytorch.py --devices cpu,cpu,cpu --quick

Starting from the C program's initial weights (./ch07 --save-init init.safetensors,
then --load-init here), the DataParallel run here reaches the parameters the
C one saved with --save (tests/chapter/check_ch07.py compares them, with
--float64 here as the reference).
"""
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import twin  # noqa: E402  (chapters/twin.py: the flags, sections and errors every twin shares; puts tools/fixtures on the path)
import fmnist  # noqa: E402  (Fashion-MNIST's IDX files as tensors)
import st  # noqa: E402  (the repository's safetensors reader/writer)
from threaded_dp import ThreadedDataParallel  # noqa: E402  (DataParallel's steps on threads)

MEAN, STD = 0.2860, 0.3530
LOG_EVERY = 25
EVAL_IMAGES = 1000


def parse_args(argv):
    p = twin.parser("ch07_pytorch.py", "Chapter 7's twin: DataParallel.", quick="20 training steps")
    p.add_argument("--devices", default="auto")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--data", default=None)
    p.add_argument("--out-dir", default=".")
    p.add_argument("--save", metavar="FILE")
    p.add_argument("--load-init", metavar="FILE", help="start from these weights (./ch07 --save-init)")
    p.add_argument("--float64", action="store_true", help="train in float64 (the tests' reference)")
    twin.explain(p, {
        "--devices": "device_ids: auto, or a list such as cpu,cpu,cpu or cuda:0,cuda:1",
        "--steps": "training steps of each run (--quick: 20)",
        "--batch-size": "the global batch, split over the replicas",
        "--lr": "SGD learning rate",
        "--momentum": "SGD momentum",
        "--data": "Fashion-MNIST folder (default: $CT_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist)",
        "--out-dir": "where the state-dict files go",
        "--save": "write the DataParallel-trained model.module.state_dict() to FILE"})
    a = p.parse_args(argv)
    if a.steps < 1 or a.batch_size < 1 or a.lr <= 0 or a.momentum < 0:
        p.error("--steps and --batch-size must be >= 1, --lr > 0, --momentum >= 0")
    if a.quick and a.steps == 300:
        a.steps = 20
    return a


def device_list(torch, spec, fallback):
    if spec == "auto":
        g = torch.cuda.device_count()
        return [torch.device(f"cuda:{i}") for i in range(g)] if g >= 2 else [fallback] * 3
    names = spec.split(",")
    for n in names:
        if not re.fullmatch(r"cpu|cuda(:\d+)?", n):
            twin.die(f'--devices: expected a list of cpu, cuda, cuda:N, got "{spec}"')
    return [torch.device(n) for n in names]


def distinct_gpus(devs):
    return len(devs) > 1 and all(d.type == "cuda" for d in devs) and len({d.index for d in devs}) == len(devs)


def make_data_parallel(torch, nn, module, devs):
    """nn.DataParallel on distinct GPUs, else the same mechanics on threads."""
    if distinct_gpus(devs):
        return nn.DataParallel(module, device_ids=[d.index for d in devs])
    return ThreadedDataParallel(torch, nn, module, len(devs))


def show_devices(torch, devs, metrics):
    twin.section("devices")
    print(f"CUDA devices: {torch.cuda.device_count()}")
    print(f"Let's use {len(devs)} devices!  device_ids = [{', '.join(str(d) for d in devs)}]")
    if len(devs) > 1 and len(set(map(str, devs))) == 1:
        print(f"note: one device named {len(devs)} times: the mechanics run, the speed cannot scale")
    metrics.update(replicas=len(devs), device_ids0=str(devs[0]))


def show_current_device(torch, metrics):
    twin.section("current device")
    g = torch.cuda.device_count()
    if g == 0:
        print("no CUDA device: every tensor here is a CPU tensor, get_device() == -1")
        metrics["get_device_sequence"] = ""
        return
    gpu = [0, 1 % g, 2 % g]
    if g < 3:
        print(f"{g} GPU(s): GPU 1 is played by cuda:{gpu[1]}, GPU 2 by cuda:{gpu[2]}")
    # twin: current_device
    torch.cuda.set_device(gpu[0])
    x = torch.cuda.FloatTensor(1)
    with torch.cuda.device(gpu[1]):
        a = torch.cuda.FloatTensor(1)
        b = torch.FloatTensor(1).cuda()
        c = a + b
        z = x + x
    d = torch.randn(2).cuda(gpu[2])
    # twin: end
    seq = [t.get_device() for t in (x, a, b, c, z, d)]
    for name, s in zip("xabczd", seq):
        print(f"{name}.get_device() == {s}")
    metrics["get_device_sequence"] = seq


def size_str(shape):
    return "(" + ", ".join(map(str, shape)) + ("," if len(shape) == 1 else "") + ")"


def seed_example(torch, nn, devs, seed, metrics):
    twin.section("seed example")
    from torch.utils.data import DataLoader, Dataset

    # twin: seed_example
    class RandomDataset(Dataset):
        def __init__(self, size, length):
            self.len = length
            self.data = torch.randn(length, size)

        def __getitem__(self, index):
            return self.data[index]

        def __len__(self):
            return self.len

    loader = DataLoader(RandomDataset(5, 100), batch_size=30, shuffle=True,
                        generator=torch.Generator().manual_seed(seed))
    model = nn.Linear(5, 2).to(devs[0])          # the model on device_ids[0] first
    dp = make_data_parallel(torch, nn, model, devs)
    lines = {}
    local = getattr(dp, "replica", None)           # the threaded mechanics' replica index

    def log_sizes(module, inputs, output):         # the seed's print inside forward, as a hook
        i = local.index if local is not None else inputs[0].device.index
        lines[i] = f"\tIn Model: input size {size_str(inputs[0].shape)} output size {size_str(output.shape)}"

    model.register_forward_hook(log_sizes)
    chunks = []
    for data in loader:
        lines.clear()
        x = data.to(devs[0])
        out = dp(x)
        for i in sorted(lines):
            print(lines[i])
        chunks += [c.shape[0] for c in x.chunk(len(devs))]
        print(f"Outside: input size {size_str(x.shape)} output_size {size_str(out.shape)}")
    # twin: end
    metrics["seed_chunks"] = chunks


def show_split_rule(torch, n_dev, metrics):
    twin.section("split rule")
    flat = []
    print(f"{'rows':>6} {'k':>4}  chunks")
    for rows, k in ((30, n_dev), (10, n_dev), (2, n_dev), (256, n_dev), (5, 4), (7, 3), (17, 5)):
        sizes = [c.shape[0] for c in torch.arange(rows).chunk(k)]  # torch.chunk itself
        print(f"{rows:>6} {k:>4}  " + " + ".join(map(str, sizes)))
        flat += sizes
    metrics["split_table"] = flat


def build_mlp(nn):
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                         nn.Linear(128, 10))


def train(torch, nn, a, model, forward, x_train, y_train, dev):
    # twin: train
    opt = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)  # the module's parameters
    loss_fn = nn.CrossEntropyLoss()
    losses, step_ms = [], []
    per_epoch = -(-len(x_train) // a.batch_size)      # drop_last=False: the last batch is short
    for step in range(a.steps):
        ts = time.perf_counter()
        lo = (step % per_epoch) * a.batch_size          # past one epoch, the next starts
        x = x_train[lo:lo + a.batch_size].to(dev)     # file order, as the C loader reads it
        y = y_train[lo:lo + a.batch_size].to(dev)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(forward(x), y)                 # forward through the wrapper (or the model)
        loss.backward()                               # every replica's grads summed into the module's
        opt.step()
        losses.append(loss.item())
        step_ms.append(1e3 * (time.perf_counter() - ts))  # item() waited for the stream: the whole step
    # twin: end
    return losses, statistics.median(step_ms)  # the median step: one-time costs and a slow step move only the mean


def accuracy(torch, model, x_test, y_test, dev):
    model.eval()
    with torch.no_grad():
        pred = model(x_test[:EVAL_IMAGES].to(dev)).argmax(1).cpu()
    model.train()
    return float((pred == y_test[:EVAL_IMAGES]).double().mean())


def compare_training(torch, nn, a, devs, metrics):
    twin.section("training")
    dtype = torch.float64 if a.float64 else torch.float32
    folder = a.data or os.environ.get("CT_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"
    try:
        x_train, y_train = fmnist.load(torch, folder, True, MEAN, STD)
        x_test, y_test = fmnist.load(torch, folder, False, MEAN, STD)
    except (OSError, ValueError) as e:
        twin.die(f"{e}. Install Debian's dataset-fashion-mnist or pass --data DIR")
    x_train, x_test = x_train.to(dtype), x_test.to(dtype)
    single = build_mlp(nn).to(dtype)
    if a.load_init:
        single.load_state_dict(st.load_torch(a.load_init))
    wrapped = build_mlp(nn).to(dtype)
    wrapped.load_state_dict(single.state_dict())  # the same start
    ref = build_mlp(nn).double()
    ref.load_state_dict(single.state_dict())      # the float64 reference, from the same start
    ref.to(devs[0])
    single.to(devs[0])
    wrapped.to(devs[0])
    dp = make_data_parallel(torch, nn, wrapped, devs)
    sizes = [c.shape[0] for c in torch.arange(a.batch_size).chunk(len(devs))]
    n_params = sum(p.numel() for p in single.parameters())
    print(f"model: MLP 784-256-128-10, {n_params} parameters; SGD lr {a.lr:g} momentum {a.momentum:g}; "
          f"{a.steps} steps of batch {a.batch_size}")
    print(f"each batch on {len(sizes)} replicas: {' + '.join(map(str, sizes))} = {sum(sizes)} rows")
    la, ta = train(torch, nn, a, single, single, x_train, y_train, devs[0])
    lb, tb = train(torch, nn, a, wrapped, dp, x_train, y_train, devs[0])
    train(torch, nn, a, ref, ref, x_train.double(), y_train, devs[0])
    acc_a = accuracy(torch, single, x_test, y_test, devs[0])
    acc_b = accuracy(torch, wrapped, x_test, y_test, devs[0])
    print(f"{'step':>6}  {'one device':>12}  {'DataParallel':>12}")
    for i in range(a.steps):
        if i == 0 or (i + 1) % LOG_EVERY == 0 or i == a.steps - 1:
            print(f"{i + 1:>6}  {la[i]:12.6f}  {lb[i]:12.6f}")
    with torch.no_grad():
        diff = max(float((p - q).abs().max()) for p, q in zip(single.parameters(), wrapped.parameters()))
        scale = max(float(p.abs().max()) for p in single.parameters())
        d64 = [max(float((p.double() - q).abs().max()) for p, q in zip(m.parameters(), ref.parameters()))
               for m in (single, wrapped)]
    print(f"max |parameter difference| after {a.steps} steps: {diff:.3g} (largest |parameter| {scale:.3g})")
    print(f"float64 run, same start and batches: max |one device - float64| {d64[0]:.3g}, "
          f"max |DataParallel - float64| {d64[1]:.3g}")
    print(f"test accuracy on the first {EVAL_IMAGES} test images: one device {acc_a:.4f}, DataParallel {acc_b:.4f}")
    same = len(devs) > 1 and len(set(map(str, devs))) == 1
    print(f"time per step (median of {a.steps} steps): one device {ta:.2f} ms, DataParallel on {len(devs)} "
          f"replica{'' if len(devs) == 1 else 's'} {tb:.2f} ms"
          f"{' (one device, repeated)' if same else ''}")
    metrics.update(single_loss=la, dp_loss=lb, max_param_diff=diff, max_param_abs=scale, single_accuracy=acc_a,
                   dp_accuracy=acc_b, single_ms_per_step=ta, dp_ms_per_step=tb,
                   steps=a.steps, single_f64_diff=d64[0], dp_f64_diff=d64[1])
    if a.save:
        st.save(a.save, {k: v.float() for k, v in wrapped.state_dict().items()})  # model.module.state_dict()


def show_state_dict(torch, nn, a, devs, metrics):
    twin.section("state dict")
    from torch.nn.modules.utils import consume_prefix_in_state_dict_if_present
    model = build_mlp(nn).to(devs[0])
    wrapper = nn.DataParallel(model)  # on the CPU it only wraps; its keys gain "module." all the same
    # twin: state_dict
    w = wrapper.state_dict()          # "module.1.weight", ...
    m = wrapper.module.state_dict()   # "1.weight", ...
    # twin: end
    wk, mk = list(w), list(m)
    print(f"model.state_dict() keys:        {wk[0]}, {wk[1]}, ... ({len(wk)})")
    print(f"model.module.state_dict() keys: {mk[0]}, {mk[1]}, ... ({len(mk)})")
    pw = os.path.join(a.out_dir, "ch07_wrapper.safetensors")
    pm = os.path.join(a.out_dir, "ch07_module.safetensors")
    st.save(pw, w)
    st.save(pm, m)

    def load_into_bare(path, strip):
        sd = st.load_torch(path)
        bare = build_mlp(nn).to(devs[0])
        if strip:
            before = list(sd)
            consume_prefix_in_state_dict_if_present(sd, "module.")
            print(f'consume_prefix_in_state_dict_if_present("module."): '
                  f"{sum(x != y for x, y in zip(before, sd))} keys renamed")
        try:
            bare.load_state_dict(sd)
        except RuntimeError as e:
            print(f"strict load into the bare model fails:\n  {str(e)[:160]}...")
            return False
        same = all(torch.equal(p.cpu(), q.cpu()) for p, q in zip(model.state_dict().values(),
                                                                  bare.state_dict().values()))
        print(f"loaded into the bare model: {'parameters equal, bit for bit' if same else 'PARAMETERS DIFFER'}")
        return True

    print("saved model.module.state_dict() -> ch07_module.safetensors")
    load_into_bare(pm, False)
    print("saved model.state_dict() -> ch07_wrapper.safetensors")
    if not load_into_bare(pw, False):
        load_into_bare(pw, True)
    metrics.update(wrapper_key0=wk[0], module_key0=mk[0])


def show_main_device(torch, nn, devs, metrics):
    twin.section("device_ids[0]")
    if devs[0].type != "cuda":
        print("device_ids[0] is the CPU: the model is already there, the check passes")
        metrics["main_device_error"] = ""
        return
    model = build_mlp(nn)  # built on the CPU and never moved
    try:
        nn.DataParallel(model, device_ids=[d.index for d in devs])(torch.zeros(4, 1, 28, 28, device=devs[0]))
        print("no error (unexpected)")
        metrics["main_device_error"] = ""
    except RuntimeError as e:
        print(str(e))
        metrics["main_device_error"] = str(e)


def main(argv):
    a = parse_args(argv)
    torch = twin.import_torch()
    nn = torch.nn
    torch.manual_seed(a.seed)
    dev = twin.device_of(torch, a.device)
    print(f"device: {dev}", flush=True)
    devs = device_list(torch, a.devices, dev)
    metrics = {"quick": int(a.quick), "float64": int(a.float64)}
    show_devices(torch, devs, metrics)
    show_current_device(torch, metrics)
    seed_example(torch, nn, devs, a.seed, metrics)
    show_split_rule(torch, len(devs), metrics)
    compare_training(torch, nn, a, devs, metrics)
    show_state_dict(torch, nn, a, devs, metrics)
    show_main_device(torch, nn, devs, metrics)
    twin.write_metrics(a.metrics, metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
