#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""Chapter 14's PyTorch twin: the same character-level GPT (nanoGPT's model) in PyTorch.

Torch 1.13 (Debian's python3-torch) and 2.x: F.scaled_dot_product_attention
and torch.compile (--compile) where they exist. The corpus, the vocabulary and
the training windows are the C program's (its Philox counter, replicated
below), so both draw the same batches; --load-init FILE starts from the C
program's initial weights (./ch14 --save-init FILE); --generate FILE samples
from a checkpoint the C program saved.
"""
import argparse, math, os, re, sys, time
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import twin  # noqa: E402  (chapters/twin.py: the flags, sections and errors every twin shares; puts tools/fixtures on the path)
import st  # noqa: E402  (Debian has no python3-safetensors)

FILES = {"zh": ["tang300", "song100"],
         "en": ["wisdom", "literature", "humorists", "people", "science", "platitudes", "love", "education"]}
PRESETS = {"quick": (2, 2, 32, 32, 8, 40, 4, 20, 2, 10, 60, 3e-3, 3e-4), "cpu": (4, 4, 128, 64, 32, 1000, 50, 100, 10, 50, 200, 2e-3, 2e-4),
           "gpu": (6, 6, 384, 256, 64, 5000, 100, 250, 200, 50, 300, 1e-3, 1e-4)}
TAG_TRAIN, TAG_EVAL_TRAIN, TAG_EVAL_VAL = 1, 2, 3


# twin: data
def clean_fortunes(text):  # colour escapes, backspace overstrikes, "%" separators
    text = re.sub(r"\x1b\[[^A-Za-z]*[A-Za-z]?", "", text)
    out = []
    for line in text.split("\n"):
        kept = []
        for ch in line:
            if ch == "\b":
                kept = kept[:-1]
            elif ch >= " " or ch == "\t":
                kept.append(ch)
        out.append("" if "".join(kept) == "%" else "".join(kept))
    return "\n".join(out)


def load_corpus(spec):
    if spec not in FILES:
        return open(spec, encoding="utf-8").read()
    d = os.environ.get("CT_FORTUNES_DIR", "/usr/share/games/fortunes")
    return "".join(clean_fortunes(open(os.path.join(d, f), encoding="utf-8").read()) for f in FILES[spec])


def philox(ctr, key):  # Philox 4x32-10 on numpy uint64 lanes, as common/core/random.c
    c0, c1, c2, c3 = (np.asarray(c, np.uint64) for c in ctr)
    k0, k1, m = np.uint64(key[0]), np.uint64(key[1]), np.uint64(0xFFFFFFFF)
    for _ in range(10):
        p0, p1 = np.uint64(0xD2511F53) * c0, np.uint64(0xCD9E8D57) * c2
        c0, c1, c2, c3 = (p1 >> np.uint64(32)) ^ c1 ^ k0, p1 & m, (p0 >> np.uint64(32)) ^ c3 ^ k1, p0 & m
        k0, k1 = (k0 + np.uint64(0x9E3779B9)) & m, (k1 + np.uint64(0xBB67AE85)) & m
    return c0, c1


def window_starts(seed, tag, draw, rows, n, T):  # the C program's window_start for rows 0..rows-1
    r = np.arange(rows, dtype=np.uint64)
    lo, hi = philox((np.full(rows, draw), r, r >> np.uint64(32), np.full(rows, tag)), (seed & 0xFFFFFFFF, seed >> 32))
    return ((lo | (hi << np.uint64(32))) % np.uint64(n - T)).astype(np.int64)


def get_batch(data, starts, T, device):
    ix = torch.from_numpy(starts)
    x = torch.stack([data[i:i + T] for i in ix])
    y = torch.stack([data[i + 1:i + 1 + T] for i in ix])
    return x.to(device), y.to(device)
# twin: end


# twin: model
class CausalSelfAttention(nn.Module):
    def __init__(self, C, nh):
        super().__init__()
        self.c_attn, self.c_proj, self.nh = nn.Linear(C, 3 * C), nn.Linear(C, C), nh

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.nh, C // self.nh).transpose(1, 2) for t in self.c_attn(x).split(C, dim=2))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch 1.13: what SDPA computes
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            att = att.masked_fill(torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1), float("-inf"))
            y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class Block(nn.Module):
    def __init__(self, C, nh):
        super().__init__()
        self.ln_1, self.attn, self.ln_2 = nn.LayerNorm(C), CausalSelfAttention(C, nh), nn.LayerNorm(C)
        self.mlp = nn.ModuleDict(dict(c_fc=nn.Linear(C, 4 * C), gelu=nn.GELU(approximate="tanh"), c_proj=nn.Linear(4 * C, C)))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        m = self.mlp
        return x + m.c_proj(m.gelu(m.c_fc(self.ln_2(x))))


class GPT(nn.Module):
    def __init__(self, V, T, L, nh, C):
        super().__init__()
        self.transformer = nn.ModuleDict(dict(wte=nn.Embedding(V, C), wpe=nn.Embedding(T, C),
                                              h=nn.ModuleList(Block(C, nh) for _ in range(L)), ln_f=nn.LayerNorm(C)))
        self.lm_head = nn.Linear(C, V, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying
        for name, p in self.named_parameters():  # GPT-2's init
            if p.dim() == 2:
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * L) if name.endswith("c_proj.weight") else 0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx):
        t = self.transformer
        x = t.wte(idx) + t.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in t.h:
            x = block(x)
        return self.lm_head(t.ln_f(x))
# twin: end


def get_lr(a, it):
    if it < a.warmup_iters:
        return a.lr * (it + 1) / (a.warmup_iters + 1)
    if it >= a.max_iters:
        return a.min_lr
    return a.min_lr + 0.5 * (1.0 + math.cos(math.pi * (it - a.warmup_iters) / (a.max_iters - a.warmup_iters))) * (a.lr - a.min_lr)


def philox_pick(logits, temperature, top_k, seed, pos):
    """The C program's draw (pick_token): its Philox uniform for this position, the inverse CDF."""
    lo, _ = philox(([pos], [0xFFFFFFFF], [0], [4]), (seed & 0xFFFFFFFF, seed >> 32))
    u = float(lo[0] >> np.uint64(8)) * 2.0 ** -24
    z = logits[0].double() / temperature
    cut = torch.topk(z, top_k).values[-1] if 0 < top_k < z.numel() else -math.inf
    w = torch.where(z < cut, torch.zeros_like(z), torch.exp(z - z.max()))
    hit = ((torch.cumsum(w, 0) > u * float(w.sum())) & (w > 0)).nonzero()
    return torch.tensor([[int(hit[0]) if len(hit) else int(z.argmax())]], device=logits.device)


@torch.no_grad()
def generate(model, idx, n, temperature, top_k, block_size, philox_seed=None):
    model.eval()
    for _ in range(n):
        logits = model(idx[:, -block_size:])[:, -1, :]
        if temperature <= 0:
            nxt = logits.argmax(dim=-1, keepdim=True)  # greedy: the first maximum
        elif philox_seed is not None:  # --sampler philox: the C program's draws, to compare the two
            nxt = philox_pick(logits, temperature, top_k, philox_seed, idx.size(1))
        else:
            logits = logits / temperature
            if 0 < top_k < logits.size(-1):
                logits[logits < torch.topk(logits, top_k).values[:, [-1]]] = -float("inf")
            nxt = torch.multinomial(F.softmax(logits.double(), dim=-1), 1)
        idx = torch.cat((idx, nxt), dim=1)
    model.train()
    return idx


def encode(chars, text):
    stoi = {c: i for i, c in enumerate(chars)}
    return torch.tensor([[stoi[c] for c in text] or [0]])


def main(argv):
    p = argparse.ArgumentParser(prog="ch14_pytorch.py", description=__doc__.splitlines()[0])
    for name, default in (("device", "auto"), ("corpus", "en"), ("preset", "cpu"), ("amp", "off"), ("metrics", None),
                          ("load-init", None), ("generate", None), ("prompt", None), ("sampler", "torch"),
                          ("profile", None)):
        p.add_argument("--" + name, default=default)
    for name in ("n-layer", "n-head", "n-embd", "block-size", "batch-size", "max-iters",
                 "eval-interval", "eval-iters", "log-interval", "sample-len"):
        p.add_argument("--" + name, type=int, default=0)
    for name, default in (("seed", 0), ("top-k", 200), ("warmup-iters", -1)):
        p.add_argument("--" + name, type=int, default=default)
    for name, default in (("lr", 0.0), ("min-lr", 0.0), ("weight-decay", 0.1), ("beta2", 0.99), ("grad-clip", 1.0),
                          ("temperature", 0.8)):
        p.add_argument("--" + name, type=float, default=default)
    for name in ("quick", "compile", "float64"):
        p.add_argument("--" + name, action="store_true")
    twin.explain(p, {
        "--device": "auto (the GPU when CUDA is available), cpu, cuda, cuda:N",
        "--corpus": "zh (fortunes-zh: Tang and Song poems), en (fortunes), or a UTF-8 FILE",
        "--preset": "cpu (minutes on 2 cores) or gpu (nanoGPT's shakespeare-char size)",
        "--amp": "off, bf16 or fp16: autocast (and GradScaler for fp16), chapter 9",
        "--metrics": "write the figures as JSON to FILE",
        "--load-init": "start from ./ch14 --save-init's initial weights and windows (default: none, torch's own init)",
        "--generate": "only sample from the C program's checkpoint FILE (default: none, train)",
        "--prompt": "text the final sample and --generate continue (default: none, a newline)",
        "--sampler": "torch (torch.multinomial) or philox (the C program's draws, to compare samples)",
        "--profile": "profile steps 3-6 with torch.profiler: the key_averages table and a Chrome trace in FILE (default: none, no profile)",
        "--n-layer": "transformer blocks (0: the preset's)",
        "--n-head": "attention heads (0: the preset's)",
        "--n-embd": "width C (0: the preset's)",
        "--block-size": "context length T (0: the preset's)",
        "--batch-size": "windows per step, per process (0: the preset's)",
        "--max-iters": "training steps; the cosine schedule ends there (0: the preset's)",
        "--eval-interval": "steps between evaluations (0: the preset's)",
        "--eval-iters": "batches per loss estimate (0: the preset's)",
        "--log-interval": "steps between log lines (0: the preset's)",
        "--sample-len": "characters per sample (0: the preset's)",
        "--seed": "seed for torch.manual_seed and the C program's Philox windows",
        "--top-k": "sample from the k most likely characters (0: all)",
        "--warmup-iters": "linear warm-up steps (-1: the preset's, or a tenth of a shorter run)",
        "--lr": "peak learning rate (0: the preset's)",
        "--min-lr": "learning rate at the end of the cosine (0: the preset's)",
        "--weight-decay": "AdamW's decay of the 2-D weights",
        "--beta2": "AdamW's beta2",
        "--grad-clip": "clip the global gradient norm to this (0: off)",
        "--temperature": "sampling temperature (0: greedy)",
        "--quick": "a small workload, seconds on a 2-core CPU (used by the tests)",
        "--compile": "train a second time under torch.compile, from the same start (PyTorch 2)",
        "--float64": "train in float64 (the tests' reference)"})
    a = p.parse_args(argv[1:])
    keys = ("n_layer", "n_head", "n_embd", "block_size", "batch_size", "max_iters", "warmup", "eval_interval",
            "eval_iters", "log_interval", "sample_len", "lr", "min_lr")
    for k, v in zip(keys, PRESETS["quick" if a.quick else a.preset]):
        setattr(a, k, getattr(a, k, 0) or v)
    if a.warmup_iters < 0:
        a.warmup_iters = a.warmup if a.warmup < a.max_iters else a.max_iters // 10
    device = ("cuda" if torch.cuda.is_available() else "cpu") if a.device == "auto" else a.device
    torch.manual_seed(a.seed)
    torch.set_num_threads(os.cpu_count())
    dtype = torch.float64 if a.float64 else torch.float32
    print(f"device: {device} (torch {torch.__version__})")
    metrics = {"device": device, "torch": torch.__version__}
    if a.generate:  # sample from the C program's checkpoint
        twin.section("generate")
        tensors, meta = st.load(a.generate, with_metadata=True)
        cfg = dict(kv.split("=") for kv in meta["ch14.model"].split())
        chars = meta["ch14.vocab"]
        model = GPT(*(int(cfg[k]) for k in ("vocab_size", "block_size", "n_layer", "n_head", "n_embd")))
        state = {k[len("model."):] if k.startswith("model.") else k: torch.from_numpy(v) for k, v in tensors.items()
                 if not k.startswith("optimizer.")}
        model.load_state_dict(state)
        out = generate(model.to(device), encode(chars, a.prompt or "\n").to(device), a.sample_len, a.temperature, a.top_k,
                       int(cfg["block_size"]), a.seed if a.sampler == "philox" else None)
        text = "".join(chars[i] for i in out[0].tolist())
        print(text)
        metrics["sample_generate"] = text
    else:
        metrics.update(train(a, device, dtype))
    twin.write_metrics(a.metrics, metrics)
    return 0


def train(a, device, dtype):
    text = load_corpus(a.corpus)
    chars = sorted(set(text))
    data = torch.tensor([{c: i for i, c in enumerate(chars)}[c] for c in text], dtype=torch.long)
    n_train = int(0.9 * len(data))
    splits = {"train": data[:n_train], "val": data[n_train:]}
    twin.section("data")
    print(f"corpus {a.corpus}: {len(text)} characters, vocabulary {len(chars)}, split {n_train}/{len(data) - n_train}")
    model = GPT(len(chars), a.block_size, a.n_layer, a.n_head, a.n_embd)
    if a.load_init:  # the C program's initial weights and windows
        init = st.load(a.load_init)
        model.load_state_dict({k: torch.from_numpy(v) for k, v in init.items() if k != "batch_starts"})
        want = init["batch_starts"]
        got = np.stack([window_starts(a.seed, TAG_TRAIN, s, a.batch_size, n_train, a.block_size) for s in range(len(want))])
        assert (got == want).all(), "the twin's windows are not the C program's"
    model = model.to(device, dtype)
    twin.section("model")
    print(model)
    print(f"parameters: {sum(p.numel() for p in model.parameters())}")
    start = {k: v.clone() for k, v in model.state_dict().items()}
    twin.section("train")
    out = fit(a, device, model, model, splits, n_train, verbose=True)
    twin.section("sample")
    idx = generate(model, encode(chars, a.prompt or "\n").to(device), a.sample_len, 0.0, 0, a.block_size)
    out["sample_greedy"] = "".join(chars[i] for i in idx[0].tolist())
    print(f"-- greedy:\n{out['sample_greedy']}")
    twin.section("throughput")
    print(f"eager: {a.max_iters} steps, {out['tokens']} tokens in {out['seconds']:.1f} s: "
          f"{out['tokens_per_s']:.0f} tokens/s ({out['tokens_per_s_steady']:.0f} after the first {WARM} steps)")
    out.update(vocab_size=len(chars), threads=torch.get_num_threads(), compiled=False)
    if a.compile and hasattr(torch, "compile"):  # the same run again under torch.compile, from the same start
        model.load_state_dict(start)
        c = fit(a, device, model, torch.compile(model), splits, n_train, verbose=False)
        print(f"torch.compile: {c['tokens_per_s_steady']:.0f} tokens/s after the first {WARM} steps (which compile), "
              f"val loss {c['val_loss'][-1]:.4f}")
        out.update(compiled=True, compile_tokens_per_s=c["tokens_per_s_steady"], compile_val_loss=c["val_loss"][-1])
    elif a.compile:
        print(f"torch.compile: not in torch {torch.__version__}")
    return out


def start_profiler(path, device):
    """--profile FILE: the C program's window, steps 3 to 6 (skip 2, warm up 1, record 3), with
    torch.profiler; at its end the key_averages table sorted by self time and a Chrome trace in FILE."""
    from torch.profiler import ProfilerActivity, profile, schedule
    cuda = device.startswith("cuda")
    # torch 2.4 renamed the CUDA columns self_device_*; the attribute is set per instance
    dev_col = "device" if hasattr(torch.autograd.profiler_util.FunctionEventAvg(), "self_device_time_total") else "cuda"
    sort = f"self_{dev_col}_time_total" if cuda else "self_cpu_time_total"

    def ready(p):
        twin.section("profile")
        print(p.key_averages().table(sort_by=sort, row_limit=12))
        p.export_chrome_trace(path)
        p.ct_written = True
        print(f"Chrome trace of steps 3-6 written to {path}")

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    prof = profile(activities=activities, schedule=schedule(wait=2, warmup=1, active=3, repeat=1),
                   on_trace_ready=ready, profile_memory=True)
    prof.ct_written = False
    prof.start()
    return prof


WARM = 10  # steps left out of the steady tokens/s (warm-up; torch.compile compiles in them)


def grad_scaler(device, enabled):
    """GradScaler: torch.amp.GradScaler(device_type) where it exists (PyTorch 2.3 on;
    torch.cuda.amp.GradScaler is deprecated there), else 1.13's torch.cuda.amp.GradScaler."""
    if hasattr(torch, "amp") and hasattr(torch.amp, "GradScaler"):
        return torch.amp.GradScaler(device.split(":")[0], enabled=enabled)
    return torch.cuda.amp.GradScaler(enabled=enabled)


def fit(a, device, model, step_model, splits, n_train, verbose):
    """Trains model (stepping through step_model) from its current weights; the run's figures."""
    # twin: optimizer
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.weight_decay}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, a.beta2), eps=1e-8)
    # twin: end
    amp = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.amp)
    scaler = grad_scaler(device, amp == torch.float16)

    @torch.no_grad()
    def estimate_loss(split, tag):
        model.eval()
        losses = []
        for j in range(a.eval_iters):
            x, y = get_batch(splits[split], window_starts(a.seed, tag, j, a.batch_size, len(splits[split]), a.block_size),
                             a.block_size, device)
            with torch.autocast(device.split(":")[0], dtype=amp, enabled=amp is not None):
                losses.append(F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item())
        model.train()
        return sum(losses) / len(losses)

    step_losses, evals, seconds, tokens, steady_s, steady_tok = [], [], 0.0, 0, 0.0, 0
    prof = start_profiler(a.profile, device) if verbose and a.profile else None
    for it in range(a.max_iters + 1):
        if it % a.eval_interval == 0 or it == a.max_iters:
            tl, vl = estimate_loss("train", TAG_EVAL_TRAIN), estimate_loss("val", TAG_EVAL_VAL)
            evals.append((it, tl, vl))
            if verbose:
                print(f"step {it:5d}: train loss {tl:.4f}, val loss {vl:.4f}")
        if it == a.max_iters:
            break
        t0 = time.perf_counter()
        x, y = get_batch(splits["train"], window_starts(a.seed, TAG_TRAIN, it, a.batch_size, n_train, a.block_size),
                         a.block_size, device)
        # twin: step
        for g in opt.param_groups:
            g["lr"] = get_lr(a, it)
        with torch.autocast(device.split(":")[0], dtype=amp, enabled=amp is not None):
            loss = F.cross_entropy(step_model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), a.grad_clip if a.grad_clip > 0 else float("inf"))
        scaler.step(opt)
        scaler.update()
        # twin: end
        lv = loss.item()
        dt = time.perf_counter() - t0
        seconds, tokens = seconds + dt, tokens + x.numel()
        if it >= WARM:
            steady_s, steady_tok = steady_s + dt, steady_tok + x.numel()
        step_losses.append(lv)
        if verbose and (it % a.log_interval == 0 or it == a.max_iters - 1):
            print(f"step {it:5d} | loss {lv:.4f} | lr {get_lr(a, it):.3e} | norm {float(norm):.3f} | {tokens / seconds:7.0f} tok/s")
        if prof is not None:
            prof.step()
    if prof is not None:
        prof.stop()  # a run shorter than the window: what was recorded is written now
        if not prof.ct_written:
            print(f"profile: not written (the run ended before step 3; --profile records steps 3-6)")
    return {"step_losses": step_losses, "eval_steps": [e[0] for e in evals], "train_loss": [e[1] for e in evals],
            "val_loss": [e[2] for e in evals], "tokens_per_s": tokens / seconds, "tokens": tokens, "seconds": seconds,
            "tokens_per_s_steady": steady_tok / steady_s if steady_s > 0 else tokens / seconds}

if __name__ == "__main__":
    sys.exit(main(sys.argv))
