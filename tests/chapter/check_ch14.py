#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Chapter 14's checks (a character-level GPT trained in C).

usage:
    check_ch14.py report CH14 WORKDIR               --quick on both corpora and on a FILE: the corpus and
                                                    vocabulary against this file's own reading of the
                                                    fortune files, nanoGPT's state_dict keys and parameter
                                                    count, the first loss at ln(V) (GPT-2's init), the loss
                                                    falling well below it, the sample printed and made of
                                                    the vocabulary, memory figures; --save then --generate
                                                    writes the run's own final sample again
    check_ch14.py badflag CH14 WORKDIR              bad corpus (missing, not UTF-8, too short, fortunes
                                                    absent), bad preset/amp/sizes, bad --generate files,
                                                    a prompt outside the vocabulary: a clear message, exit
                                                    1 or 2, no crash, no file left
    check_ch14.py resume CH14 WORKDIR               Ctrl-C (a real SIGINT at step 13) with --save, then
                                                    --resume: every later step's loss and every final
                                                    tensor bit-identical to an uninterrupted run; other
                                                    flags refused
    check_ch14.py graphs CH14 WORKDIR               --graphs (the CPU recorder here): losses bit-identical
                                                    to the eager run's
    check_ch14.py amp CH14 WORKDIR                  --amp bf16 and fp16: the float32 run's losses within
                                                    the low dtype's rounding, still learning; fp16's
                                                    GradScaler state survives --resume bit for bit
    check_ch14.py ddp CH14 LAUNCH WORKDIR           tools/launch, 2 ranks of batch 8: the step losses of
                                                    one process with batch 16, within float rounding
    check_ch14.py twin CH14 PYTHON TWIN WORKDIR     ch14_pytorch.py --quick: its corpus, vocabulary and
                                                    parameter count are the C program's; it trains
    check_ch14.py twin_agree CH14 PYTHON TWIN WORKDIR
                                                    from ./ch14 --save-init's weights and windows the
                                                    twin's first 20 losses agree with C's within 1e-4
                                                    relative (float32), and C's checkpoint samples the
                                                    same text in both, greedily and with C's Philox
                                                    draws; then each check is shown to fail when one
                                                    weight is changed
    check_ch14.py gpu CH14 WORKDIR HAVE_CUDA        --device cuda --quick (exit 77 without a GPU)

Exit 0: passed; 1: failed (the reason is printed); 77: skipped, only where the
thing under test cannot exist here (no fortunes package, no MPI, no GPU).

Independent references: the fortune files read and cleaned here (Python's own
UTF-8 decoder), nanoGPT's module names and GPT-2's parameter formula, ln(V) for
an untrained model, the safetensors header parsed here.
"""
import json
import math
import os
import re
import shutil
import struct
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import chaptertest  # noqa: E402
from chaptertest import (expect, expect_cuda_ok, fresh, load_metrics, run, run_cuda,  # noqa: E402
                         sections_of, section_text, skip, skip_unless_cuda_build)

SECTIONS = ["data", "model", "optimizer", "train", "sample", "memory", "throughput", "profile", "checkpoint"]
FORTUNES = os.environ.get("CT_FORTUNES_DIR", "/usr/share/games/fortunes")
FILES = {"zh": ["tang300", "song100"],
         "en": ["wisdom", "literature", "humorists", "people", "science", "platitudes", "love", "education"]}


# ---- the corpus, read here --------------------------------------------------------------------

def clean_fortunes(text):
    """A fortune file as the chapter promises to read it: colour escapes (ESC [ ... letter) gone,
    a backspace erasing the character before it on its line, other control characters but tab
    dropped, each '%' separator line an empty line."""
    text = re.sub(r"\x1b\[[^A-Za-z]*[A-Za-z]?", "", text)
    lines = []
    for line in text.split("\n"):
        kept = []
        for ch in line:
            if ch == "\b":
                if kept:
                    kept.pop()
            elif ch >= " " or ch == "\t":
                kept.append(ch)
        line = "".join(kept)
        lines.append("" if line == "%" else line)
    return "\n".join(lines)


def corpus_text(name):
    paths = [os.path.join(FORTUNES, f) for f in FILES[name]]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        skip(f"the {name} corpus is not installed ({missing[0]}; apt-get install fortunes fortunes-zh)")
    return "".join(clean_fortunes(open(p, encoding="utf-8").read()) for p in paths)


def read_safetensors(path):
    """(metadata, {name: (dtype, shape, bytes)}) of a safetensors file, parsed here."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    out = {}
    for k, v in header.items():
        b, e = v["data_offsets"]
        out[k] = (v["dtype"], tuple(v["shape"]), blob[8 + n + b:8 + n + e])
    return meta, out


def nanogpt_keys(n_layer):
    """model.state_dict()'s keys for nanoGPT's GPT with bias=True, as its module tree names them."""
    keys = ["transformer.wte.weight", "transformer.wpe.weight"]
    for i in range(n_layer):
        h = f"transformer.h.{i}."
        keys += [h + "ln_1.weight", h + "ln_1.bias", h + "attn.c_attn.weight", h + "attn.c_attn.bias",
                 h + "attn.c_proj.weight", h + "attn.c_proj.bias", h + "ln_2.weight", h + "ln_2.bias",
                 h + "mlp.c_fc.weight", h + "mlp.c_fc.bias", h + "mlp.c_proj.weight", h + "mlp.c_proj.bias"]
    return keys + ["transformer.ln_f.weight", "transformer.ln_f.bias", "lm_head.weight"]


def gpt_params(V, T, L, C):
    """GPT-2's parameter count with biases, the tied wte/lm_head counted once."""
    return V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C


# ---- report -------------------------------------------------------------------------------------

def nanogpt_lr(it, lr, min_lr, warmup, max_iters):
    """nanoGPT's get_lr: linear warm-up over `warmup` steps ((it + 1) / (warmup + 1)), then a
    cosine from lr down to min_lr at max_iters."""
    if it < warmup:
        return lr * (it + 1) / (warmup + 1)
    if it >= max_iters:
        return min_lr
    ratio = (it - warmup) / (max_iters - warmup)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (lr - min_lr)


def top_k_draw(logits, temperature, k, u):
    """The token where the cumulative probability of softmax(logits / temperature) over the k
    largest logits first exceeds u (torch.multinomial's inverse-CDF draw)."""
    z = [x / temperature for x in logits]
    cut = sorted(z, reverse=True)[k - 1]
    p = [math.exp(x - max(z)) if x >= cut else 0.0 for x in z]
    acc, total = 0.0, sum(p)
    for i, q in enumerate(p):
        acc += q
        if q > 0 and acc > u * total:
            return i
    return max(range(len(z)), key=lambda i: z[i])


def check_lr(tag, r, m):
    """The printed 'lr at steps 0, W, M/2, M' against nanoGPT's schedule."""
    line = re.search(r"^lr at steps 0, (\d+), (\d+), (\d+): (\S+) (\S+) (\S+) (\S+)$", r.stdout, re.M)
    expect(line, f"{tag}: no 'lr at steps' line", r)
    steps = [0] + [int(x) for x in line.groups()[:3]]
    for it, got in zip(steps, (float(x) for x in line.groups()[3:])):
        want = nanogpt_lr(it, m["lr"], m["min_lr"], int(m["warmup_iters"]), int(m["max_iters"]))
        expect(chaptertest.close(got, want, 2e-3), f"{tag}: lr at step {it} is {got}, nanoGPT's schedule gives {want}")


def check_flops(m, tensors, tag):
    """The chapter's model FLOPs per token against a count made here from the checkpoint: 2 * out *
    in for every 2-D weight a token goes through (the blocks' four linear layers, and lm_head, tied
    to wte: the embeddings are lookups), attention's two products 2 * T * C each per token and
    layer (q k^T and P v over the whole T x T square), all times 3 for the forward and the two
    gradients of each product."""
    T, L, C = m["block_size"], m["n_layer"], m["n_embd"]
    shape = lambda key: tensors["model." + key][1]  # noqa: E731
    linear = [shape(f"transformer.h.{i}.{k}.weight") for i in range(L)
              for k in ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")] + [shape("lm_head.weight")]
    want = 3 * (sum(2 * o * i for o, i in linear) + L * 2 * (2 * T * C))
    got = m.get("model_flops_per_token")
    expect(got == want, f"{tag}: model_flops_per_token {got}, the checkpoint's shapes give {want}")
    gflops, ceiling = m["model_gflops_per_s"], m["matmul_ceiling_gflops"]
    expect(abs(gflops - want * m["tokens_per_s_steady"] * 1e-9) <= 1e-9 * gflops,
           f"{tag}: model_gflops_per_s {gflops}, {want} x {m['tokens_per_s_steady']} tokens/s")
    expect(ceiling > 0 and abs(m["ceiling_fraction"] - gflops / ceiling) <= 1e-12,
           f"{tag}: ceiling_fraction {m['ceiling_fraction']}, {gflops} / {ceiling}")


def check_run(ch14, work, tag, args, text):
    """One --quick run on a corpus whose text is known here: its claims checked. Returns the metrics."""
    mpath = fresh(os.path.join(work, f"{tag}.json"))
    ck = fresh(os.path.join(work, f"{tag}.safetensors"))
    r = run([ch14, "--device", "cpu", "--quick", *args, "--save", ck, "--metrics", mpath])
    expect(r.returncode == 0, f"{tag}: exit code {r.returncode}", r)
    expect(sections_of(r.stdout) == SECTIONS, f"{tag}: sections {sections_of(r.stdout)}, expected {SECTIONS}", r)
    m = load_metrics(mpath)
    vocab = sorted(set(text))
    expect(m["corpus_chars"] == len(text), f"{tag}: {m['corpus_chars']} characters, {len(text)} read here")
    expect(m["vocab_size"] == len(vocab), f"{tag}: vocabulary of {m['vocab_size']}, {len(vocab)} read here")
    expect(m["train_tokens"] == int(0.9 * len(text)), f"{tag}: train split {m['train_tokens']} of {len(text)}")
    V, T, L, C = len(vocab), m["block_size"], m["n_layer"], m["n_embd"]
    expect(m["num_params"] == gpt_params(V, T, L, C), f"{tag}: {m['num_params']} parameters, GPT-2's formula "
           f"gives {gpt_params(V, T, L, C)}")
    meta, tensors = read_safetensors(ck)
    model = sorted(k[len("model."):] for k in tensors if k.startswith("model."))
    expect(model == sorted(nanogpt_keys(L)), f"{tag}: state_dict keys {model} are not nanoGPT's")
    expect(tensors["model.lm_head.weight"][2] == tensors["model.transformer.wte.weight"][2],
           f"{tag}: lm_head.weight and transformer.wte.weight differ in the checkpoint (not tied)")
    expect(meta.get("ch14.vocab") == "".join(vocab), f"{tag}: the checkpoint's vocabulary is not the corpus's")
    check_lr(tag, r, m)
    want = [top_k_draw([2, 1, 0, -1], 0.5, 3, u) for u in (0.1, 0.9, 0.99, 0.999)]
    expect(m.get("pick_token_example") == want, f"{tag}: pick_token on logits (2, 1, 0, -1), temperature 0.5, "
           f"top-k 3 at u = 0.1, 0.9, 0.99, 0.999 gives {m.get('pick_token_example')}, the rule {want}")
    check_flops(m, tensors, tag)
    # GPT-2's init (N(0, 0.02), tied head) gives near-uniform logits: the first loss is ln(V).
    lnv = math.log(V)
    first = m["step_losses"][0]
    expect(abs(first - lnv) < 0.1, f"{tag}: the first step's loss {first:.4f} is not ln(V) = {lnv:.4f}")
    vl = m["val_loss"]
    expect(len(vl) >= 2 and vl[-1] < vl[0] - 0.4 and vl[-1] < lnv - 0.4,
           f"{tag}: the val loss went {vl}: not well below ln(V) = {lnv:.3f}")
    sample = section_text(r.stdout, "sample")
    expect(m["sample_final"] and m["sample_final"] in sample, f"{tag}: the final sample is not printed", r)
    expect(set(m["sample_final"]) <= set(vocab), f"{tag}: the sample has characters outside the vocabulary")
    expect(len(m["sample_final"]) == 1 + 2 * 60, f"{tag}: the sample has {len(m['sample_final'])} characters "
           "(the newline prompt + 120 expected)")
    expect(m["mem_peak_bytes"] >= m["mem_fixed_bytes"] > 0 and m["mem_activation_bytes_computed"] > 0,
           f"{tag}: memory figures {m['mem_peak_bytes']}, {m['mem_fixed_bytes']}")
    expect(m["mem_fixed_bytes"] == 16 * m["num_params"], f"{tag}: params+grads+AdamW is not 16 bytes a parameter")
    expect(chaptertest.positive(m["tokens_per_s"]), f"{tag}: tokens/s {m['tokens_per_s']}")
    # --generate: the checkpoint alone writes the run's final sample again (same seed, same draws).
    g = run([ch14, "--device", "cpu", "--generate", ck, "--sample-len", "120"])
    expect(g.returncode == 0 and sections_of(g.stdout) == ["generate"], f"{tag}: --generate exit {g.returncode}", g)
    expect(m["sample_final"] in g.stdout, f"{tag}: --generate wrote another text than the run's final sample", g)
    g2 = run([ch14, "--device", "cpu", "--generate", ck, "--temperature", "0", "--sample-len", "60"])
    expect(g2.returncode == 0 and m["sample_greedy"] in g2.stdout, f"{tag}: greedy --generate differs", g2)
    print(f"{tag}: {len(text)} characters, V={V}, loss {first:.3f} (ln V {lnv:.3f}) -> val {vl[-1]:.3f}, "
          f"{m['tokens_per_s']:.0f} tokens/s")
    return m


def cmd_report(ch14, work):
    os.makedirs(work, exist_ok=True)
    check_run(ch14, work, "en", ["--corpus", "en"], corpus_text("en"))
    check_run(ch14, work, "zh", ["--corpus", "zh"], corpus_text("zh"))
    # Any UTF-8 file, taken as it is (no fortune cleaning): mixed scripts, tabs, "%" kept.
    text = ("%\tThe quick brown fox jumps over the lazy dog. 白日依山尽，黄河入海流。 Ça va? €5\n" * 400)
    path = os.path.join(work, "mixed.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    check_run(ch14, work, "file", ["--corpus", path], text)
    print("PASS")


# ---- bad input ------------------------------------------------------------------------------------

def expect_clean_failure(r, code, needles, what):
    expect(r.returncode == code, f"{what}: exit code {r.returncode}, expected {code}", r)
    for n in needles:
        expect(n in r.stderr, f"{what}: stderr does not say {n!r}", r)
    expect("Traceback" not in r.stderr and "Segmentation" not in r.stderr, f"{what}: crashed", r)


def cmd_badflag(ch14, work):
    os.makedirs(work, exist_ok=True)
    q = [ch14, "--device", "cpu", "--quick"]
    missing = os.path.join(work, "no-such-corpus.txt")
    expect_clean_failure(run(q + ["--corpus", missing]), 1, [missing], "a missing --corpus file")
    env = dict(os.environ, CT_FORTUNES_DIR=os.path.join(work, "nowhere"))
    r = subprocess.run(q + ["--corpus", "zh"], capture_output=True, text=True, env=env, timeout=120)
    expect_clean_failure(r, 1, ["fortunes-zh", "apt-get install"], "--corpus zh without fortunes-zh")
    latin1 = os.path.join(work, "latin1.txt")
    with open(latin1, "wb") as f:
        f.write("Ça va très bien, merci.\n".encode("latin-1") * 100)
    expect_clean_failure(run(q + ["--corpus", latin1]), 1, ["not UTF-8", "byte 0"], "a Latin-1 corpus")
    tiny = os.path.join(work, "tiny.txt")
    with open(tiny, "w") as f:
        f.write("too short\n" * 10)
    expect_clean_failure(run(q + ["--corpus", tiny]), 1, ["--block-size"], "a corpus shorter than a window")
    for args, needles in ((["--preset", "tpu"], ["--preset", "cpu or gpu"]),
                          (["--amp", "fp8"], ["--amp", "bf16"]),
                          (["--n-embd", "30", "--n-head", "4"], ["--n-embd", "multiple"]),
                          (["--warmup-iters", "100"], ["--warmup-iters"]),
                          (["--temperature", "-1"], ["--temperature"]),
                          (["--generate", "a", "--resume", "b"], ["--generate"])):
        chaptertest.expect_usage_error(run(q + args), args, needles)
    nothere = os.path.join(work, "none.safetensors")
    expect_clean_failure(run(q + ["--generate", nothere]), 1, [nothere], "--generate of a missing file")
    # A valid safetensors file that is not a ch14 checkpoint, and a truncated ch14 checkpoint.
    other = os.path.join(work, "other.safetensors")
    header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
    with open(other, "wb") as f:
        f.write(struct.pack("<Q", len(header)) + header + b"\0" * 8)
    expect_clean_failure(run(q + ["--generate", other]), 1, ["not a ch14 checkpoint"], "--generate of another file")
    ck = fresh(os.path.join(work, "ok.safetensors"))
    r = run(q + ["--max-iters", "5", "--warmup-iters", "1", "--save", ck])
    expect(r.returncode == 0, "a short run to save a checkpoint", r)
    cut = os.path.join(work, "cut.safetensors")
    with open(ck, "rb") as f, open(cut, "wb") as g:
        g.write(f.read()[:300])
    expect_clean_failure(run(q + ["--generate", cut]), 1, [cut], "--generate of a truncated checkpoint")
    expect_clean_failure(run(q + ["--generate", ck, "--prompt", "snow \u2603"]), 1,
                         ["not in the model's vocabulary", "U+2603"], "a prompt outside the vocabulary")
    bad_out = os.path.join(work, "no-dir", "x.safetensors")
    expect_clean_failure(run(q + ["--save", bad_out]), 1, [bad_out], "--save into a missing folder")
    print("PASS")


# ---- resume ---------------------------------------------------------------------------------------

def cmd_resume(ch14, work):
    os.makedirs(work, exist_ok=True)
    flags = [ch14, "--device", "cpu", "--quick", "--max-iters", "30"]
    full, cut, done = (fresh(os.path.join(work, n)) for n in ("full.safetensors", "cut.safetensors", "done.safetensors"))
    ma, mc = fresh(os.path.join(work, "a.json")), fresh(os.path.join(work, "c.json"))
    r = run(flags + ["--save", full, "--metrics", ma])
    expect(r.returncode == 0, "the uninterrupted run", r)
    at = 13
    env = dict(os.environ, CT_TEST_SIGINT_AFTER=str(at))
    print(f"+ CT_TEST_SIGINT_AFTER={at}", flush=True)
    r = subprocess.run(flags + ["--save", cut], capture_output=True, text=True, env=env, timeout=280)
    expect(r.returncode == 130 and f"interrupted after step {at - 1}" in r.stdout, f"Ctrl-C: exit {r.returncode}", r)
    meta, _ = read_safetensors(cut)
    expect(meta.get("step") == str(at) and meta.get("optimizer") == "AdamW" and "ch14.config" in meta,
           f"the cut checkpoint's metadata {meta}")
    r = run(flags + ["--resume", cut, "--save", done, "--metrics", mc])
    expect(r.returncode == 0 and f"resuming {cut} at step {at}" in r.stdout, f"--resume: exit {r.returncode}", r)
    a, c = load_metrics(ma), load_metrics(mc)
    want, got = a["step_losses"][at:30], c["step_losses"]
    expect(got == want, f"steps {at}..29 after --resume: losses {got[:4]}..., uninterrupted {want[:4]}...")
    _, ta = read_safetensors(full)
    _, tc = read_safetensors(done)
    differ = [k for k in ta if k.startswith("model.") and ta[k] != tc.get(k)]
    expect(not differ, f"{len(differ)} final tensors differ from the uninterrupted run's, e.g. {differ[:3]}")
    print(f"cut after step {at - 1}, resumed: {len(want)} losses and every final tensor bit-identical")
    r = run(flags + ["--lr", "0.01", "--resume", cut])
    expect(r.returncode == 1 and "resume with the same flags" in r.stderr and "lr=0.01" in r.stderr,
           "--resume with another --lr", r)
    print("PASS")


# ---- the twin ----------------------------------------------------------------------------------------

def patch_float(src, dst, name, index, delta):
    """Copies the safetensors file src to dst with element `index` of float32 tensor `name` changed by delta."""
    with open(src, "rb") as f:
        blob = bytearray(f.read())
    (n,) = struct.unpack("<Q", blob[:8])
    e = json.loads(blob[8:8 + n])[name]
    expect(e["dtype"] == "F32", f"{name} is {e['dtype']}")
    at = 8 + n + e["data_offsets"][0] + 4 * index
    (v,) = struct.unpack_from("<f", blob, at)
    struct.pack_into("<f", blob, at, v + delta)
    with open(dst, "wb") as f:
        f.write(blob)


def cmd_twin(ch14, python, twin, work):
    chaptertest.skip_unless_imports(python, "torch", "numpy")
    os.makedirs(work, exist_ok=True)
    rc, rp, mc, mp = chaptertest.run_with_twin("ch14", [ch14, "--device", "cpu", "--quick"],
                                               [python, twin, "--device", "cpu", "--quick"], work)
    expect(mp["vocab_size"] == mc["vocab_size"], f"vocabulary: twin {mp['vocab_size']}, C {mc['vocab_size']}")
    for name in ("data", "model", "train", "sample", "throughput"):
        expect(name in sections_of(rp.stdout), f"the twin prints no == {name} ==", rp)
    expect(f"parameters: {mc['num_params']}" in rp.stdout, "the twin's parameter count is not C's", rp)
    expect("(wte): Embedding" in rp.stdout and "(c_attn): Linear" in rp.stdout, "print(model) of the twin", rp)
    vl = mp["val_loss"]
    expect(vl[-1] < vl[0] - 0.4, f"the twin's val loss went {vl}")
    print(f"twin: V={mp['vocab_size']}, val loss {vl[0]:.3f} -> {vl[-1]:.3f}, {mp['tokens_per_s']:.0f} tokens/s "
          f"(C: {mc['tokens_per_s']:.0f})")
    print("PASS")


def twin_losses(python, twin, init, work, tag):
    mp = fresh(os.path.join(work, f"{tag}.json"))
    r = run([python, twin, "--device", "cpu", "--quick", "--max-iters", "20", "--load-init", init, "--metrics", mp])
    expect(r.returncode == 0, f"the twin from {init}: exit {r.returncode}", r)
    return load_metrics(mp)["step_losses"]


def samples(ch14, python, twin, ck):
    """(C, twin) text of the checkpoint ck: greedy, then with C's Philox draws at temperature 0.8."""
    out = []
    for extra in (["--temperature", "0"], ["--temperature", "0.8", "--top-k", "20"]):
        args = ["--generate", ck, "--prompt", "The ", "--sample-len", "150", *extra]
        c = run([ch14, "--device", "cpu", *args])
        p = run([python, twin, "--device", "cpu", "--sampler", "philox", *args])
        expect(c.returncode == 0 and p.returncode == 0, f"--generate {extra}", c if c.returncode else p)
        out.append((section_text(c.stdout, "generate").split("\n", 1)[1].rstrip("\n"),
                    section_text(p.stdout, "generate").rstrip("\n")))
    return out


def cmd_twin_agree(ch14, python, twin, work):
    chaptertest.skip_unless_imports(python, "torch", "numpy")
    os.makedirs(work, exist_ok=True)
    init, ck, mc = (fresh(os.path.join(work, n)) for n in ("init.safetensors", "c20.safetensors", "c.json"))
    r = run([ch14, "--device", "cpu", "--quick", "--max-iters", "20", "--save-init", init, "--save", ck, "--metrics", mc])
    expect(r.returncode == 0, "./ch14 --save-init", r)
    want = load_metrics(mc)["step_losses"]
    expect(len(want) == 20, f"{len(want)} step losses")

    def worst(got):
        return max(abs(g - w) / abs(w) for g, w in zip(got, want))
    got = twin_losses(python, twin, init, work, "py")
    expect(len(got) == 20 and worst(got) < 1e-4, f"the first 20 losses differ by {worst(got):.2e} relative:\n"
           f"  C     {want}\n  torch {got}")
    print(f"20 step losses agree within {worst(got):.1e} relative (float32)")
    texts = samples(ch14, python, twin, ck)
    for (c, p), how in zip(texts, ("greedy", "sampled")):
        expect(c == p and len(c) > 100, f"{how} text of the same checkpoint differs:\n  C     {c!r}\n  torch {p!r}")
    print(f"greedy and sampled text of the checkpoint identical: {texts[1][0][:40]!r}...")
    # The checks can fail: one weight changed, on the twin's side only.
    bad = os.path.join(work, "init-perturbed.safetensors")
    patch_float(init, bad, "transformer.h.0.mlp.c_fc.weight", 0, 0.5)
    off = worst(twin_losses(python, twin, bad, work, "py_bad"))
    expect(off >= 1e-4, f"one changed weight moved the twin's losses by only {off:.2e}: the check cannot fail")
    bad_ck = os.path.join(work, "c20-perturbed.safetensors")
    patch_float(ck, bad_ck, "model.transformer.ln_f.bias", 0, 1.0)
    _, (c, p) = samples(ch14, python, twin, bad_ck)
    _, (c0, _) = texts
    expect(p != c0, "one changed weight left the twin's sampled text unchanged: the check cannot fail")
    print(f"negative controls: one weight changed -> losses off by {off:.1e}, sampled text differs")
    print("PASS")


# ---- graphs, ddp, gpu -------------------------------------------------------------------------------

def cmd_graphs(ch14, work):
    os.makedirs(work, exist_ok=True)
    me, mg = fresh(os.path.join(work, "eager.json")), fresh(os.path.join(work, "graphs.json"))
    r = run([ch14, "--device", "cpu", "--quick", "--metrics", me])
    expect(r.returncode == 0, "the eager run", r)
    r = run([ch14, "--device", "cpu", "--quick", "--graphs", "--metrics", mg])
    expect(r.returncode == 0 and "CUDA graph" in section_text(r.stdout, "throughput"), "the --graphs run", r)
    e, g = load_metrics(me), load_metrics(mg)
    expect(e["step_losses"] == g["step_losses"], f"--graphs losses {g['step_losses'][:5]} differ from eager "
           f"{e['step_losses'][:5]}")
    expect(e["val_loss"] == g["val_loss"], f"--graphs val losses {g['val_loss']} differ from eager {e['val_loss']}")
    print(f"--graphs: {len(g['step_losses'])} step losses and {len(g['val_loss'])} val losses bit-identical to eager")
    print("PASS")


def cmd_amp(ch14, work):
    os.makedirs(work, exist_ok=True)
    runs = {}
    for amp in ("off", "bf16", "fp16"):
        mp = fresh(os.path.join(work, f"{amp}.json"))
        r = run([ch14, "--device", "cpu", "--quick", "--amp", amp, "--metrics", mp])
        expect(r.returncode == 0, f"--amp {amp}: exit {r.returncode}", r)
        runs[amp] = load_metrics(mp)
    f32 = runs["off"]["step_losses"]
    # bfloat16 keeps 8 significant bits (rounding 2^-9 relative), float16 11 (2^-12): each
    # product's rounding moves a loss by about that much, and 40 steps of training let it grow.
    for amp, tol in (("bf16", 3e-2), ("fp16", 5e-3)):
        got = runs[amp]["step_losses"]
        worst = max(abs(a - b) / abs(b) for a, b in zip(got, f32))
        expect(len(got) == len(f32) and worst < tol, f"--amp {amp}: losses {worst:.2e} relative from float32's")
        expect(got != f32, f"--amp {amp}: losses bit-identical to float32's: autocast did nothing")
        vl = runs[amp]["val_loss"]
        expect(vl[-1] < vl[0] - 0.4, f"--amp {amp}: val loss went {vl}")
        print(f"--amp {amp}: losses within {worst:.1e} of float32's (bound {tol}), val {vl[0]:.3f} -> {vl[-1]:.3f}")
    # fp16 resume: the GradScaler's scale and growth tracker travel in the checkpoint.
    flags = [ch14, "--device", "cpu", "--quick", "--amp", "fp16", "--max-iters", "30"]
    cut, ma, mc = (fresh(os.path.join(work, n)) for n in ("cut.safetensors", "a.json", "c.json"))
    r = run(flags + ["--metrics", ma])
    expect(r.returncode == 0, "fp16: the uninterrupted run", r)
    env = dict(os.environ, CT_TEST_SIGINT_AFTER="11")
    r = subprocess.run(flags + ["--save", cut], capture_output=True, text=True, env=env, timeout=280)
    expect(r.returncode == 130, f"fp16: Ctrl-C exit {r.returncode}", r)
    meta, _ = read_safetensors(cut)
    expect("scaler.scale" in meta, f"fp16: no GradScaler state in the checkpoint's metadata {sorted(meta)}")
    r = run(flags + ["--resume", cut, "--metrics", mc])
    expect(r.returncode == 0, "fp16: --resume", r)
    a, c = load_metrics(ma)["step_losses"][11:30], load_metrics(mc)["step_losses"]
    expect(a == c, f"fp16 resumed: losses {c[:3]}... against {a[:3]}...")
    print(f"--amp fp16 resumed after step 10: {len(c)} losses bit-identical (scale {meta['scaler.scale']})")
    print("PASS")


def cmd_ddp(ch14, launch, work):
    if not shutil.which("mpirun"):
        skip("no mpirun (Open MPI) here")
    os.makedirs(work, exist_ok=True)
    md, ms = fresh(os.path.join(work, "ddp.json")), fresh(os.path.join(work, "one.json"))
    r = run([launch, "--nproc-per-node", "2", ch14, "--device", "cpu", "--corpus", "en", "--quick",
             "--metrics", md])
    expect(r.returncode == 0, f"2 ranks: exit {r.returncode}", r)
    expect(r.stdout.count("== train ==") == 1, "only rank 0 prints", r)
    r1 = run([ch14, "--device", "cpu", "--corpus", "en", "--quick", "--batch-size", "16", "--metrics", ms])
    expect(r1.returncode == 0, "one process, batch 16", r1)
    d, s = load_metrics(md), load_metrics(ms)
    expect(d["world_size"] == 2, f"world_size {d['world_size']}")
    worst = max(abs(x - y) / abs(y) for x, y in zip(d["step_losses"], s["step_losses"]))
    expect(len(d["step_losses"]) == len(s["step_losses"]) and worst < 1e-5,
           f"2 ranks x 8 against 1 x 16: step losses differ by {worst:.2e} relative")
    print(f"2 ranks x batch 8 = 1 process x batch 16: {len(s['step_losses'])} step losses within {worst:.1e}")
    print("PASS")


def cmd_gpu(ch14, work, have_cuda):
    skip_unless_cuda_build(have_cuda)
    os.makedirs(work, exist_ok=True)
    mpath = fresh(os.path.join(work, "gpu.json"))
    r = run_cuda([ch14, "--device", "cuda", "--quick", "--metrics", mpath])
    expect_cuda_ok(r)
    m = load_metrics(mpath)
    lnv = math.log(m["vocab_size"])
    expect(abs(m["step_losses"][0] - lnv) < 0.1 and m["val_loss"][-1] < lnv - 0.4,
           f"cuda: losses {m['step_losses'][0]} -> {m['val_loss']}")
    rc = fresh(os.path.join(work, "cpu.json"))
    r = run([ch14, "--device", "cpu", "--quick", "--metrics", rc])
    expect(r.returncode == 0, "the CPU run", r)
    c = load_metrics(rc)
    worst = max(abs(x - y) / abs(y) for x, y in zip(m["step_losses"][:10], c["step_losses"][:10]))
    expect(worst < 1e-3, f"the first 10 losses on cuda and cpu differ by {worst:.2e} relative")
    print(f"cuda: {m['tokens_per_s']:.0f} tokens/s; first 10 losses within {worst:.1e} of the CPU's")
    print("PASS")


def main(argv):
    return chaptertest.dispatch(argv, {"report": (cmd_report, 2), "badflag": (cmd_badflag, 2),
                                       "resume": (cmd_resume, 2), "graphs": (cmd_graphs, 2), "amp": (cmd_amp, 2),
                                       "ddp": (cmd_ddp, 3), "gpu": (cmd_gpu, 3), "twin": (cmd_twin, 4),
                                       "twin_agree": (cmd_twin_agree, 4)}, __doc__)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
