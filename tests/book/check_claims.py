#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""book.claims: numbers the text can stand on (book/FORMAT.md, "Claims"; tools/record's rules).

    check_claims.py [REPO_ROOT]

1. The condition grammar of {{claim}} / {{if}}: comparisons, ratios, 'about ... within N%',
   and/or, null operands, and the malformed forms (each a FILE:LINE error).
2. A tiny literate chapter and a metrics JSON: a claim the run supports weaves; one the run
   contradicts is a warning with the sentence and the values, and fails under --strict
   (tools/weave exits 1, naming FILE:LINE); {{if}}/{{elif}}/{{else}} picks the branch.
3. The speed-word checker finds an unguarded "faster" beside a measured number, and no
   chapter has one left except the entries of book/claims-allow.json (each with a reason,
   none stale); every chapter's claims parse.
4. tools/record on stand-in chapters (a shell script; no real chapter runs): a busy machine
   is refused (exit 4) unless --allow-busy, which the header records; the metrics are medians
   of the repeats with their spread; a spread above --max-spread is refused (exit 5, naming
   the key) unless --keep-noisy.
Standard library only; a few seconds.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                       os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tools"))
from ctools import record, weave  # noqa: E402

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def holds(cond, metric=None, recorded=None):
    return weave.eval_cond(weave.parse_cond(cond), {"metric": metric or {}, "recorded": recorded or {}}, [])


def raises(fn, words):
    try:
        fn()
    except (weave.ClaimError, weave.WeaveError) as e:
        return all(w in str(e) for w in words)
    return False


def test_grammar():
    m = {"fast_ms": 100.0, "slow_ms": 190.0, "speedup": 0.53, "sizes": [1, 2, 4], "none": None}
    check(holds("metric speedup < 1", m) and not holds("metric speedup >= 1", m), "a comparison")
    check(holds("metric slow_ms / metric fast_ms > 1.8", m), "a ratio of two keys")
    check(holds("metric fast_ms * 2 about metric slow_ms", m) and not holds("metric fast_ms about metric slow_ms", m),
          "about: within the default 15%")
    check(holds("metric fast_ms about 108 within 10%", m) and not holds("metric fast_ms about 120 within 10%", m),
          "about ... within N%")
    check(holds("metric sizes[-1] > 3 and metric speedup < 1", m) and holds("metric speedup > 5 or 1 < 2", m),
          "indexes, and, or")
    d = {"device": "cuda:0", "cpu": "cpu"}
    check(holds("metric device is cuda", d) and not holds("metric device is cpu", d) and holds("metric cpu is cpu", d)
          and not holds("metric device is cud", d), "is: a string metric, or its part before ':'")
    check(raises(lambda: weave.parse_cond("3 is cpu"), ["'is' compares"]), "is needs a metric")
    check(not holds("metric none > 0", m) and not holds("metric none < 0", m), "a null operand makes it false")
    check(holds("recorded speedup > 1", m, {"speedup": 1.9}), "recorded reads the full run's metrics")
    for cond, words in (("metric speedup", ["expected"]), ("metric speedup == 1", ["cannot read"]),
                        ("metric speedup > 1 extra", ["unexpected"]), ("speedup > 1", ["expected 'metric KEY'"]),
                        ("metric speedup about 1 within x%", ["percentage"])):
        check(raises(lambda: weave.parse_cond(cond), words), f"malformed condition {cond!r} is refused")
    check(raises(lambda: holds("metric nope > 1", m), ["no key 'nope'"]), "a missing key is an error")
    for text, words in (("{{if metric a > 1}}x", ["not closed"]), ("x{{end}}", ["without an open"]),
                        ("{{claim metric a > 1}}x{{else}}y{{end}}", ["one sentence"]),
                        ("{{if metric a > 1}}{{claim metric a > 1}}x{{end}}{{end}}", ["do not nest"]),
                        ("{{if metric a > 1}}x{{else}}y{{else}}z{{end}}", ["else is the last"]),
                        ("{{if}}", ["malformed"])):
        check(raises(lambda: weave.parse_claims(text), words), f"malformed form {text!r} is refused")


CHAPTER = """// SPDX-License-Identifier: MIT
/*md
::: zh
# 第 9 章　演示

融合后的核函数用了 {{metric fused_ms}} 毫秒，不融合 {{metric unfused_ms}} 毫秒。{{claim metric unfused_ms / metric fused_ms > 1.2}}融合快了。{{end}}
{{if metric fused_ms < metric unfused_ms}}分支：融合更快。{{elif metric fused_ms about metric unfused_ms within 5%}}分支：差不多。{{else}}分支：融合更慢。{{end}}
:::
::: en
# Chapter 9. A demo

The fused kernel took {{metric fused_ms}} ms, unfused {{metric unfused_ms}} ms.
{{claim metric unfused_ms / metric fused_ms > 1.2}}Fusion made it faster.{{end}}
{{if metric fused_ms < metric unfused_ms}}Branch: fused is faster.{{elif metric fused_ms about metric unfused_ms within 5%}}Branch: about the same.{{else}}Branch: fused is slower.{{end}}
:::
*/
int main(void) { return 0; }
"""


def weave_with(tmp, metrics, strict, name):
    src = os.path.join(tmp, "chapters", "ch09_demo", "ch09_demo.c")
    write(src, CHAPTER)
    run = os.path.join(tmp, name, "ch09")
    write(os.path.join(run, "ch09.out"), "device: cpu\n")
    write(os.path.join(run, "ch09.json"), json.dumps(metrics))
    warnings = []
    _, docs = weave.weave(src, run, None, recorded_dir=os.path.join(tmp, "none"), strict=strict,
                          warn=warnings.append)
    return src, run, docs, warnings


def test_weave(tmp):
    src, run, docs, warns = weave_with(tmp, {"fused_ms": 50, "unfused_ms": 100}, True, "true")
    check("Fusion made it faster." in docs["en"] and "融合快了。" in docs["zh"] and not warns,
          "a claim the run supports weaves, strict, without a warning")
    check("Branch: fused is faster." in docs["en"] and "Branch: fused is slower" not in docs["en"]
          and "分支：融合更快。" in docs["zh"], "{{if}} picks the first true branch, in both languages")
    check("{{" not in docs["en"] + docs["zh"], "no claim syntax left in the Markdown")
    _, _, docs, warns = weave_with(tmp, {"fused_ms": 101, "unfused_ms": 100}, False, "same")
    check("Branch: about the same." in docs["en"], "{{elif}}: the second branch")
    check(len(warns) == 2 and "ch09_demo.c:13:" in warns[1] and "Fusion made it faster" in warns[1]
          and "metric unfused_ms = 100" in warns[1] and "metric fused_ms = 101" in warns[1] and "ch09_demo.c:6:" in warns[0],
          f"a contradicted claim warns with FILE:LINE, the sentence and the values ({warns[-1:]})")
    check("this run contradicts the sentence above" in docs["en"] and "这次运行与上面这句话不符" in docs["zh"],
          "without --strict the book shows the contradiction beside the sentence")
    _, _, docs, _ = weave_with(tmp, {"fused_ms": 190, "unfused_ms": 100}, False, "slow")
    check("Branch: fused is slower." in docs["en"], "{{else}}: the last branch")
    try:
        weave_with(tmp, {"fused_ms": 190, "unfused_ms": 100}, True, "strict")
        check(False, "strict: a contradicted claim raises")
    except weave.WeaveError as e:
        check(e.line == 6 and "2 claim(s) contradicted" in str(e) and "metric fused_ms = 190" in str(e),
              f"strict: a contradicted claim fails at FILE:LINE with the values ({str(e)[:160]})")
    tool = [sys.executable, os.path.join(ROOT, "tools", "weave"), "--run-dir", os.path.join(tmp, "strict", "ch09"),
            "--recorded",
            os.path.join(tmp, "none"), "--lang", "en", src]
    r = subprocess.run(tool + ["--strict"], capture_output=True, text=True)
    check(r.returncode == 1 and "ch09_demo.c:13:" in r.stderr and "contradicted" in r.stderr,
          f"tools/weave --strict exits 1 naming FILE:LINE (got {r.returncode}: {r.stderr.strip()[:160]})")
    r = subprocess.run(tool, capture_output=True, text=True, env=dict(os.environ, CT_BOOK_STRICT="1"))
    check(r.returncode == 1, "CT_BOOK_STRICT=1 makes it strict")
    r = subprocess.run(tool, capture_output=True, text=True, env={k: v for k, v in os.environ.items()
                                                                  if k != "CT_BOOK_STRICT"})
    check(r.returncode == 0 and "warning:" in r.stderr and "Fusion made it faster." in r.stdout,
          "without --strict it warns and exits 0")
    _, docs = weave.weave(src, None, None, recorded_dir=os.path.join(tmp, "none"))
    check("⟨metric fused_ms < metric unfused_ms⟩" in docs["en"] and "⟨else⟩" in docs["en"],
          "a preview (no run) shows every branch with its condition")


def test_checker(tmp):
    src = os.path.join(tmp, "chapters", "ch09_lint", "ch09_lint.c")
    write(src, CHAPTER.replace("{{claim metric unfused_ms / metric fused_ms > 1.2}}Fusion made it faster.{{end}}",
                               "Fusion was {{metric speedup}} times faster."))
    found = weave.speed_findings(src)
    check(len(found) == 1 and found[0][1] == 13 and found[0][2] == "en" and "times faster" in found[0][3],
          f"the checker finds an unguarded speed word beside a number, at FILE:LINE ({found})")
    with open(os.path.join(ROOT, "book", "claims-allow.json"), encoding="utf-8") as f:
        allow = json.load(f)["allow"]
    check(all(a.get("file") and a.get("contains") and len(a.get("why", "")) > 20 for a in allow),
          "every allow-list entry names a file, a text and its reason")
    used, left = set(), []
    chapters = sorted(p for p in
                      (os.path.join(ROOT, "chapters", d, d + ".c") for d in os.listdir(os.path.join(ROOT, "chapters")))
                      if os.path.exists(p))
    for ch in chapters:
        weave.check(ch)  # claims and branches parse
        for path, line, lang, sentence in weave.speed_findings(ch):
            hit = [i for i, a in enumerate(allow) if weave.rel(path) == a["file"] and a["contains"] in sentence]
            used.update(hit)
            if not hit:
                left.append(f"{weave.rel(path)}:{line}: {lang}: {sentence[:120]}")
    check(not left, "no chapter has a speed word beside a measured number outside a claim or branch"
          + "".join(f"\n     {x}" for x in left))
    stale = [a["contains"] for i, a in enumerate(allow) if i not in used]
    check(not stale, f"no stale allow-list entry ({stale})")


STAND_IN = """#!/bin/sh
# a stand-in chapter: run k prints and writes the k-th of $TIMES as its time
while [ $# -gt 0 ]; do [ "$1" = --metrics ] && m=$2; shift; done
n=$(cat "$COUNTER" 2>/dev/null || echo 0); n=$((n + 1)); echo $n > "$COUNTER"
t=$(echo $TIMES | cut -d' ' -f$n)
echo 'device: cpu'; echo '== time =='; echo "run $n: $t ms"
printf '{"step_ms": %s, "sizes_gflops": [%s, 2.0], "steps": 7, "model": "demo"}' "$t" "$t" > "$m"
"""


def test_record(tmp):
    runs = [{"a_ms": 3.0, "n": 5, "l_gbs": [1.0, 4.0], "s": "x"}, {"a_ms": 1.0, "n": 5, "l_gbs": [2.0, 4.0], "s": "y"},
            {"a_ms": 2.0, "n": 5, "l_gbs": [3.0, 4.4], "s": "z"}]
    med, spread = record.combine(runs)
    check(med["a_ms"] == 2.0 and med["n"] == 5 and med["l_gbs"] == [2.0, 4.0] and med["s"] == "x",
          f"medians per key, lists element by element, other values from the first run ({med})")
    check(sorted(spread) == ["a_ms", "l_gbs[0]", "l_gbs[1]"] and spread["a_ms"] == 1.0
          and abs(spread["l_gbs[1]"] - 0.1) < 1e-9,
          f"spread (max - min) / median on timed keys only ({spread})")
    check(record.nearest(runs, med, spread) == 2 and record.worst_spread(spread)[1] == 1.0, "the run nearest the medians")
    check(record.busy(1.2, 2, 0.5) and not record.busy(0.8, 2, 0.5) and not record.busy(None, 2, 0.5),
          "busy: load per core above the limit")
    # the checked keys: what the chapter's prose reads from its recording ({{...}} forms only)
    src = os.path.join(tmp, "rec-src")
    write(os.path.join(src, "chapters", "ch09_demo", "ch09_demo.c"),
          "/*md ::: en\nIn {{recorded @run}}: {{recorded step_ms %.1f}} ms, {{recorded sizes_gflops[-1]}}.\n"
          "{{claim recorded a_ms < recorded b_ms and metric c_ms > 1}}x{{end}} The recorded d_ms is prose.\n:::*/\n")
    write(os.path.join(src, "chapters", "ch09_demo", "notes.md"), "{{if recorded e_gbs about 1}}y{{end}}\n")
    write(os.path.join(src, "chapters", "ch10_other", "ch10_other.c"), "{{recorded f_ms}}\n")
    conds = record.prose_conditions("ch09", root=src)
    check(conds == ["recorded a_ms < recorded b_ms and metric c_ms > 1", "recorded e_gbs about 1"],
          f"prose_conditions: the conditions that read the recording, each once, in file order ({conds})")
    forms = record.prose_forms("ch09", root=src)
    check(forms == [("claim", ["recorded a_ms < recorded b_ms and metric c_ms > 1"]), ("if", ["recorded e_gbs about 1"])],
          f"prose_forms: each claim and branch whose conditions read the recording ({forms})")
    keys = record.prose_keys("ch09", root=src)
    check(keys == {"a_ms": None, "b_ms": None, "e_gbs": None},
          f"prose_keys: the conditions of claims and branches in every source of the chapter; not a number only "
          f"quoted, not metric keys, not words outside a form, not another chapter ({keys})")
    write(os.path.join(src, "chapters", "ch09_demo", "notes.md"),
          "{{if recorded e_gbs about 1}}y{{elif recorded sizes_gflops[-1] > 2}}z{{end}}\n")
    keys = record.prose_keys("ch09", root=src)
    sp = {"step_ms": 0.5, "sizes_gflops[0]": 0.9, "sizes_gflops[1]": 0.2, "saving_ms": 3.0}
    got = record.checked(sp, keys, [{"sizes_gflops": [1, 2]}])
    check(got == {"sizes_gflops[1]": 0.2}, f"checked: the keys read, a negative index from the end ({got})")
    build = os.path.join(tmp, "rec-build")
    write(os.path.join(build, "ch09"), STAND_IN)
    os.chmod(os.path.join(build, "ch09"), 0o755)
    out = os.path.join(tmp, "rec-out")
    counter = os.path.join(tmp, "counter")

    def rec(times, load, *flags):
        if os.path.exists(counter):
            os.remove(counter)
        shutil.rmtree(out, ignore_errors=True)
        os.environ.update(TIMES=times, COUNTER=counter)
        record.loadavg = lambda: load
        argv = ["--build", build, "--out-dir", out, "--commit", "abc"] + list(flags) + ["ch09"]
        rc = record.main(argv)
        files = sorted(os.listdir(out)) if os.path.isdir(out) else []
        text = meta = None
        if files:
            with open(os.path.join(out, files[1]), encoding="utf-8") as f:
                text = f.read()
            with open(os.path.join(out, files[0]), encoding="utf-8") as f:
                meta = json.load(f)
        return rc, text, meta
    prose_keys, prose_forms = record.prose_keys, record.prose_forms
    record.prose_keys = lambda ch, root=None: {"step_ms": None}
    record.prose_forms = lambda ch, root=None: [("claim", ["recorded step_ms < 12 and recorded steps > 1"])]
    cores = os.cpu_count() or 1
    rc, text, _ = rec("10 10 10", 10.0 * cores)
    check(rc == 4 and text is None and not os.path.exists(counter), "a busy machine is refused before any run (exit 4)")
    rc, text, meta = rec("10.0 10.4 10.2", 10.0 * cores, "--allow-busy")
    check(rc == 0 and "# load: " in text and "kept with --allow-busy" in text, "--allow-busy: the header says so")
    check(meta["step_ms"] == 10.2 and meta["record_repeats"] == 3 and abs(meta["record_spread_max"] - 0.4 / 10.2) < 1e-9
          and meta["steps"] == 7 and meta["model"] == "demo", f"metrics: medians of 3 runs and their spread ({meta})")
    check("run 3: 10.2 ms" in text and "# repeats: 3 (metrics: each key's median; output: run 3" in text,
          "the transcript is the run nearest the medians, and the header says which")
    rc, text, _ = rec("10 14 10", 0.0)
    check(rc == 5 and text is None, "a spread above --max-spread whose runs flip the prose's claim is refused (exit 5)")
    record.prose_forms = lambda ch, root=None: [("if", ["recorded step_ms < 20", "recorded step_ms < 12", None]),
                                                ("claim", ["recorded step_ms > 9 or recorded steps < 1"])]
    rc, text, meta = rec("10 14 10", 0.0)
    check(rc == 0 and "widest spread 40.0% (step_ms), above 10%, but each of its 2 claims and branches "
          "prints the same sentence in every run and in the medians: kept" in text and meta["step_ms"] == 10,
          "a wide spread whose runs all print the prose's same sentences is kept (a later branch's condition "
          "may differ), and the header says so")
    record.prose_forms = lambda ch, root=None: [("if", ["recorded step_ms > 12", None])]
    rc, text, _ = rec("10 14 10", 0.0)
    check(rc == 5 and text is None, "an {{if}} taking another branch in one run is refused (exit 5)")
    record.prose_forms = lambda ch, root=None: [("claim", ["recorded step_ms < 20"]), ("claim", ["recorded missing_ms < 1"])]
    rc, text, _ = rec("10 14 10", 0.0)
    check(rc == 5 and text is None, "a condition over a key the runs lack counts as unstable (exit 5)")
    record.prose_forms = lambda ch, root=None: [("claim", ["recorded step_ms < 12"])]
    rc, text, meta = rec("10 14 10", 0.0, "--keep-noisy")
    check(rc == 0 and "kept with --keep-noisy" in text and "widest spread 40.0% (step_ms)" in text,
          "--keep-noisy keeps it, and the header names the key")
    record.prose_keys = lambda ch, root=None: {"sizes_gflops": {1}}
    rc, text, meta = rec("10 14 10", 0.0)
    check(rc == 0 and "the prose interprets no timed value" not in text and "widest spread 0.0% (sizes_gflops[1])" in text
          and "widest of all timed values 40.0% (step_ms)" in text and meta["record_spread_checked"] == ["sizes_gflops[1]"],
          f"a timed key the prose does not read is shown, not checked ({text.splitlines()[9:10]})")
    rc, text, _ = rec("10 14 10", 0.0, "--check-all")
    check(rc == 5 and text is None, "--check-all checks every timed key")
    record.prose_keys = lambda ch, root=None: {}
    rc, text, _ = rec("10 14 10", 0.0)
    check(rc == 0 and "the prose interprets no timed value of this run" in text, "no key read: nothing checked, and said")
    record.prose_keys, record.prose_forms = prose_keys, prose_forms
    rc, text, meta = rec("10", 0.0, "--repeats", "1")
    check(rc == 0 and "# repeats: 1 (one run" in text and meta["record_repeats"] == 1, "--repeats 1 says so")


def main():
    tmp = tempfile.mkdtemp(prefix="ct-claims-")
    try:
        test_grammar()
        test_weave(tmp)
        test_checker(tmp)
        test_record(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if failures:
        print(f"{len(failures)} check(s) failed", file=sys.stderr)
        return 1
    print("all claim checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
