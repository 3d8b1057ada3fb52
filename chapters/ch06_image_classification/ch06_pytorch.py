#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 6's PyTorch twin: Fashion-MNIST with an MLP or a CNN, trained on the device.

The same models, hyperparameters, flags and output sections as ch06, written
the way the seed tutorials write a training loop (model.to(device),
imgs.to(device), zero_grad / backward / step), so the two can be read side by
side. One difference from the seeds: batches reach the device through
device_batches (tools/fixtures/batches.py), which copies the next batch on a
side stream as the C DataLoader does; a bare imgs.to(device, non_blocking=True)
would queue the copy behind the previous batch's kernels and overlap nothing.
Side by side:

    ./ch06 --device cpu --model mlp
    /usr/bin/python3 chapters/ch06_image_classification/ch06_pytorch.py --device cpu --model mlp

Starting from the C program's initial weights (./ch06 --save-init init.safetensors,
then --load-init init.safetensors here) with --no-shuffle, the two give the
same losses step by step. Checkpoints are safetensors files read and written
with tools/fixtures/st.py (Debian has no python3-safetensors), so a model
saved by ./ch06 --save loads here with --load, and the other way round.

Run it with a Python that has torch and numpy (Debian: /usr/bin/python3 with
python3-torch). Exit codes as in the C chapters: 2 for a bad flag, 1 for a
run-time error.
"""
import os
import struct
import sys
import time
import zlib

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import twin  # noqa: E402  (chapters/twin.py: the flags, sections and errors every twin shares; puts tools/fixtures on the path)
import st  # noqa: E402  (the repository's safetensors reader/writer)
from batches import device_batches  # noqa: E402  (side-stream copies, as ct's DataLoader makes them)
import fmnist  # noqa: E402  (Fashion-MNIST's IDX files as tensors)

CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
           "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]
MEAN, STD = 0.2860, 0.3530
STEP_LOSSES = 50
EVAL_BATCH = 1000
FIRST_LOGITS = 8
GRID_MAX, GRID_COLS = 32, 8


def parse_args(argv):
    p = twin.parser("ch06_pytorch.py",
                    "Chapter 6 (PyTorch twin): Fashion-MNIST classification.",
                    quick="2560 training images, 1000 test images, 1 epoch")
    p.add_argument("--model", choices=["mlp", "cnn"], default="cnn")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.0, help="learning rate (0: 1e-3 for adam, 0.05 for sgd)")
    p.add_argument("--optimizer", choices=["adam", "sgd"], default="adam")
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--batchnorm", action="store_true")
    p.add_argument("--dropout", type=float, default=0.25)
    p.add_argument("--channels", type=int, default=16)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--data", default=None)
    p.add_argument("--out-dir", default=".")
    p.add_argument("--save", metavar="FILE")
    p.add_argument("--load", metavar="FILE")
    p.add_argument("--save-init", metavar="FILE")
    p.add_argument("--load-init", metavar="FILE", help="start from these weights (e.g. ./ch06 --save-init)")
    p.add_argument("--no-shuffle", action="store_true")
    p.add_argument("--max-steps", type=int, default=0)
    p.add_argument("--train-size", type=int, default=0)
    p.add_argument("--test-size", type=int, default=0)
    p.add_argument("--compile", action="store_true",
                   help="run the model through torch.compile (model.compile(), PyTorch 2.2 or later): "
                        "the compiled figure tools/bench compares C with")
    p.add_argument("--float64", action="store_true",
                   help="train and evaluate in float64: a reference for the float32 runs (tests use it)")
    twin.explain(p, {
        "--model": "mlp or cnn",
        "--epochs": "passes over the training set (--quick: 1)",
        "--batch-size": "training images per step",
        "--optimizer": "adam or sgd (with --momentum)",
        "--momentum": "SGD momentum",
        "--batchnorm": "CNN: BatchNorm2d after each convolution",
        "--dropout": "CNN: dropout before the last layer",
        "--channels": "CNN: channels of the first convolution (the second has twice)",
        "--workers": "DataLoader worker threads",
        "--data": "Fashion-MNIST folder (default: $CT_FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist)",
        "--out-dir": "where predictions.png goes",
        "--save": "write the trained state_dict to FILE (safetensors)",
        "--load": "evaluate the checkpoint FILE instead of training",
        "--save-init": "write the initial state_dict to FILE (safetensors)",
        "--no-shuffle": "read the training set in order",
        "--max-steps": "stop after this many steps (0: no limit)",
        "--train-size": "use the first N training images (0: all; --quick: 2560)",
        "--test-size": "use the first N test images (0: all; --quick: 1000)"})
    a = p.parse_args(argv)
    if a.epochs < 1 or a.batch_size < 1 or a.channels < 1 or a.workers < 0 or not 0 <= a.dropout < 1:
        p.error("--epochs, --batch-size, --channels >= 1; --workers >= 0; --dropout in [0, 1)")
    if a.quick:
        a.epochs = 1 if a.epochs == 10 else a.epochs
        a.train_size = a.train_size or 2560
        a.test_size = a.test_size or 1000
    if a.lr == 0:
        a.lr = 1e-3 if a.optimizer == "adam" else 0.05
    return a


def fashion_mnist(torch, folder, train):
    try:
        return fmnist.load(torch, folder, train, MEAN, STD)
    except (OSError, ValueError) as e:
        twin.die(f"{e}. Install Debian's dataset-fashion-mnist or pass --data DIR")


def build_model(nn, a):
    if a.model == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                             nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 10))
    c1, c2 = a.channels, 2 * a.channels
    layers = [nn.Conv2d(1, c1, 3, padding=1)]
    layers += [nn.BatchNorm2d(c1)] if a.batchnorm else []
    layers += [nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(c1, c2, 3, padding=1)]
    layers += [nn.BatchNorm2d(c2)] if a.batchnorm else []
    layers += [nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(c2 * 7 * 7, 128), nn.ReLU(),
               nn.Dropout(a.dropout), nn.Linear(128, 10)]
    return nn.Sequential(*layers)


def evaluate(torch, model, loader, device):
    """(correct, total, mean loss, confusion 10x10, first logits, seconds)."""
    model.eval()
    confusion = torch.zeros(10, 10, dtype=torch.int64)
    loss_sum, total, first, t0 = 0.0, 0, None, time.perf_counter()
    # twin: evaluate
    with torch.no_grad():
        for imgs, targets in device_batches(torch, loader, device):
            logits = model(imgs)
            loss_sum += torch.nn.functional.cross_entropy(logits, targets).item() * len(targets)
            pred = logits.argmax(1)
            confusion += torch.bincount(targets.cpu() * 10 + pred.cpu(), minlength=100).view(10, 10)
            if first is None:
                first = logits[:FIRST_LOGITS].cpu()
            total += len(targets)
    # twin: end
    correct = int(confusion.diag().sum())
    return correct, total, loss_sum / max(total, 1), confusion, first, time.perf_counter() - t0


def write_png(path, rgb):
    """rgb: uint8 (h, w, 3). A PNG by hand (zlib + CRCs), written atomically."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    png = (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    twin.write_atomic(path, lambda f: f.write(png))


def main(argv):
    a = parse_args(argv)
    torch = twin.import_torch()
    nn = torch.nn
    torch.set_num_threads(os.cpu_count())  # the same thread count as the C program's OpenMP
    torch.manual_seed(a.seed)
    if a.device == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    else:
        if a.device.startswith("cuda") and not torch.cuda.is_available():
            twin.die("CUDA unavailable for this PyTorch")
        device = torch.device(a.device)
    print(f"device: {device}" + (f" ({torch.cuda.get_device_name(device)})" if device.type == "cuda" else ""))
    metrics = {"device": str(device), "seed": a.seed, "quick": int(a.quick), "float64": int(a.float64)}

    # twin: data
    folder = a.data or os.environ.get("CT_FASHION_MNIST_DIR") or "/usr/share/datasets/fashion-mnist"
    x_train, y_train = fashion_mnist(torch, folder, train=True)
    x_test, y_test = fashion_mnist(torch, folder, train=False)
    if a.train_size:
        x_train, y_train = x_train[:a.train_size], y_train[:a.train_size]
    if a.test_size:
        x_test, y_test = x_test[:a.test_size], y_test[:a.test_size]
    dtype = torch.float64 if a.float64 else torch.float32
    x_train, x_test = x_train.to(dtype), x_test.to(dtype)
    TensorDataset, DataLoader = torch.utils.data.TensorDataset, torch.utils.data.DataLoader
    pin = device.type == "cuda"
    train_loader = DataLoader(TensorDataset(x_train, y_train), batch_size=a.batch_size,
                              shuffle=not a.no_shuffle, num_workers=a.workers, pin_memory=pin,
                              generator=torch.Generator().manual_seed(a.seed))
    test_loader = DataLoader(TensorDataset(x_test, y_test), batch_size=EVAL_BATCH, shuffle=False,
                             num_workers=a.workers, pin_memory=pin)
    # twin: end
    twin.section("data")
    print(f"train: {len(x_train)} images ({', '.join(map(str, x_train.shape[1:]))}) float32, "
          f"labels int64 in [0, 10)")
    print(f"test:  {len(x_test)} images")
    print(f"normalize: (x / 255 - {MEAN:.4f}) / {STD:.4f}")
    print("classes:" + "".join(f" {i}={c}" for i, c in enumerate(CLASSES)))
    print(f"train loader: batch_size {a.batch_size}, shuffle {'off' if a.no_shuffle else 'on'} (seed {a.seed}), "
          f"num_workers {a.workers}, pin_memory {'on' if pin else 'off'}, prefetch_factor 2 -> "
          f"{len(train_loader)} batches per epoch")
    metrics.update(train_size=len(x_train), test_size=len(x_test), batches_per_epoch=len(train_loader))

    # twin: model
    model = build_model(nn, a)
    if a.load_init:
        model.load_state_dict(st.load_torch(a.load_init))  # e.g. the C program's initial weights
    model = model.to(device)
    loss_fn = nn.CrossEntropyLoss().to(device)
    # twin: end
    model = model.to(dtype)  # float64 only with --float64
    if a.save_init:
        st.save(a.save_init, model.state_dict())
    if a.load:
        model.load_state_dict(st.load_torch(a.load))  # load_state_dict casts to the model's dtype
    twin.section("model")
    print(model)
    state = model.state_dict()
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params} in {len(list(model.parameters()))} tensors "
          f"(state_dict: {len(state)} entries), on {device}")
    buffers = {name for name, _ in model.named_buffers()}
    for name, t in state.items():
        print(f"  {name:<24} {str(tuple(t.shape)):<16} {str(t.dtype).replace('torch.', '')}"
              + ("  (buffer)" if name in buffers else ""))
    # twin: optimizer
    if a.optimizer == "adam":
        optimizer = torch.optim.Adam(model.parameters(), lr=a.lr)
    else:
        optimizer = torch.optim.SGD(model.parameters(), lr=a.lr, momentum=a.momentum)
    # twin: end
    print(f"optimizer: {type(optimizer).__name__}, lr {a.lr:g}" + (", betas (0.9, 0.999)" if a.optimizer == "adam" else ""))
    if a.compile:
        if not hasattr(model, "compile"):
            twin.die(f"--compile: torch {torch.__version__} has no nn.Module.compile (PyTorch 2.2 or later)")
        model.compile()  # in place: the same module and state_dict; the first steps compile
        print("model.compile(): torch.compile in place (the first training and evaluation steps compile)")
    metrics.update(compiled=int(a.compile), torch=torch.__version__)
    metrics.update(model=a.model, batchnorm=int(a.batchnorm), num_params=n_params, optimizer=a.optimizer,
                   lr=a.lr, batch_size=a.batch_size)

    twin.section("train")
    hist = {"train_loss": [], "test_loss": [], "test_acc": [], "epoch_images_per_s": []}
    step_losses, steps, images, train_seconds = [], 0, 0, 0.0
    result = None
    if a.load:
        print(f"no training: evaluating {a.load}")
        result = evaluate(torch, model, test_loader, device)
    for epoch in range(1, 0 if a.load else a.epochs + 1):
        model.train()
        loss_sum = torch.zeros((), device=device)
        t0, step, seen = time.perf_counter(), 0, 0
        # twin: train_epoch
        for imgs, targets in device_batches(torch, train_loader, device):  # side-stream copies, as in C
            optimizer.zero_grad(set_to_none=True)
            loss = loss_fn(model(imgs), targets)
            loss.backward()
            optimizer.step()
            loss_sum += loss.detach()  # stays on the device: no synchronization
            # twin: end
            step += 1
            seen += len(targets)
            if len(step_losses) < STEP_LOSSES:
                step_losses.append(loss.item())
            if a.max_steps and steps + step >= a.max_steps:
                break
        mean = loss_sum.item() / max(step, 1)  # waits for the epoch's work
        seconds = time.perf_counter() - t0
        print(f"epoch {epoch}/{a.epochs}: loss {mean:.4g}, {seen / seconds:.0f} samples/s, {seconds:.1f} s")
        steps, images, train_seconds = steps + step, images + seen, train_seconds + seconds
        result = evaluate(torch, model, test_loader, device)
        correct, total, test_loss = result[:3]
        hist["train_loss"].append(mean)
        hist["test_loss"].append(test_loss)
        hist["test_acc"].append(correct / total)
        hist["epoch_images_per_s"].append(seen / seconds)
        print(f"  test loss {test_loss:.4f}, test acc {correct / total:.4f} ({correct}/{total}), "
              f"eval {result[5]:.1f} s", flush=True)
        if a.max_steps and steps >= a.max_steps:
            break
    metrics.update(epochs=len(hist["train_loss"]), epoch=list(range(1, len(hist["train_loss"]) + 1)),
                   step_losses=step_losses, steps=steps, **hist)

    correct, total, test_loss, confusion, first, eval_seconds = result
    metrics["sample_logits"] = [float(v) for v in first.flatten()]
    twin.section("accuracy")
    print(f"test accuracy: {correct / total:.4f} ({correct}/{total}), test loss {test_loss:.4f}")
    print(f"{'class':<14} {'images':>7} {'correct':>8} {'accuracy':>9}")
    counts = confusion.sum(1)
    for c in range(10):
        acc = float(confusion[c, c]) / float(counts[c]) if counts[c] else float("nan")
        print(f"{c} {CLASSES[c]:<12} {int(counts[c]):7d} {int(confusion[c, c]):8d} {acc:9.4f}")
    metrics.update(final_test_acc=correct / total, final_test_loss=test_loss, test_correct=correct,
                   test_total=total, class_counts=counts.tolist(), class_correct=confusion.diag().tolist(),
                   per_class_acc=(confusion.diag().double() / counts.double()).tolist())
    twin.section("confusion")
    print("rows: true class, columns: predicted class")
    print(f"{'':<14}" + "".join(f" {j:5d}" for j in range(10)))
    for i in range(10):
        print(f"{i} {CLASSES[i]:<12}" + "".join(f" {int(v):5d}" for v in confusion[i]))
    metrics["confusion"] = confusion.flatten().tolist()

    twin.section("throughput")
    ips = images / train_seconds if train_seconds > 0 else float("nan")
    if images:
        print(f"train: {images} images in {train_seconds:.1f} s: {ips:.0f} images/s "
              f"(batch {a.batch_size}, {torch.get_num_threads()} CPU threads)")
    else:
        print("train: no training in this run (--load)")
    print(f"eval:  {total} images in {eval_seconds:.2f} s: {total / eval_seconds:.0f} images/s (batch {EVAL_BATCH})")
    metrics.update(images_per_s=ips, train_seconds=train_seconds, train_images=images,
                   eval_images_per_s=total / eval_seconds, threads=torch.get_num_threads())

    twin.section("checkpoint")
    if a.load:
        print(f"loaded {a.load} (strict: every state_dict key matched)")
    if a.save_init:
        print(f"initial weights were saved to {a.save_init} before training")
    if a.save:
        # twin: save
        st.save(a.save, model.state_dict())  # safetensors, temp file + fsync + rename
        # twin: end
        print(f"saved {a.save}: {len(state)} tensors, {os.path.getsize(a.save)} bytes (safetensors, written atomically)")
    else:
        print("not saved (pass --save FILE to write the trained state_dict)")

    twin.section("predictions")
    n = min(GRID_MAX, len(x_test))
    model.eval()
    with torch.no_grad():
        pred = model(x_test[:n].to(device)).argmax(1).cpu()
    # A plainer grid than the C program's: framed images (green right, red wrong), no text.
    cell, rows = 28 * 3 + 6 + 6, (n + GRID_COLS - 1) // GRID_COLS
    img = np.full((6 + rows * cell, 6 + GRID_COLS * cell, 3), 24, np.uint8)
    pixels = np.clip(np.rint((x_test[:n, 0].numpy() * STD + MEAN) * 255), 0, 255).astype(np.uint8)
    for i in range(n):
        y0, x0 = 6 + (i // GRID_COLS) * cell, 6 + (i % GRID_COLS) * cell
        ok = bool(pred[i] == y_test[i])
        img[y0:y0 + 90, x0:x0 + 90] = (40, 200, 80) if ok else (230, 50, 50)
        img[y0 + 3:y0 + 87, x0 + 3:x0 + 87] = np.repeat(np.repeat(pixels[i], 3, 0), 3, 1)[:, :, None]
    path = os.path.join(a.out_dir, "predictions_pytorch.png")
    write_png(path, img)
    right = int((pred == y_test[:n]).sum())
    print(f"wrote {path}: {img.shape[1]}x{img.shape[0]} pixels, the first {n} test images, {right} of them right")
    print("frame green = predicted right, red = wrong")

    twin.write_metrics(a.metrics, metrics)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
