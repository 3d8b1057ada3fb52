# SPDX-License-Identifier: MIT
"""An independent reader of the Trace Event Format (chrome://tracing, Perfetto).

Written from the format's specification ("Trace Event Format", the Google
document that chrome://tracing and Perfetto's JSON importer follow), not from
the runtime's writer, so that a trace the runtime writes is checked the way a
viewer would read it. Perfetto's trace processor would be the other
independent reader; its Python package fetches the processor's binary from
the network on first use, which this project's machines cannot do.

What the specification says and this module checks:
- the file is JSON: either an array of events, or an object whose
  "traceEvents" member is that array; "displayTimeUnit", when present, is
  "ms" or "ns";
- every event is an object with "ph" (one of the phases below), "name" (a
  string), "pid" and "tid" (integers, or strings); "ts" (a number of
  microseconds) on every event but metadata; "cat", when present, a string;
  "args", when present, an object;
- complete events ("X") carry "dur" >= 0; duration events ("B"/"E") pair up
  per thread; on one thread, duration and complete events nest properly (a
  slice begins and ends inside the slice it starts in);
- instant events ("i", "I") have a scope "s" of "g", "p" or "t" (default t);
- metadata events ("M") are named process_name, process_labels,
  process_sort_index, thread_name or thread_sort_index, and carry their
  value in args ("name", "labels" or "sort_index").

read(path) returns a Trace: the events, the slices per (pid, tid) as trees,
each slice's self time (its duration less its children's), and the instant
events. It raises FormatError naming the event at fault.
"""
import json
from collections import defaultdict

PHASES = set("BEXiIbneCsftPONDMVvRc") | {"(", ")"}
METADATA = {"process_name": "name", "process_labels": "labels", "process_sort_index": "sort_index",
            "thread_name": "name", "thread_sort_index": "sort_index"}
# Nesting is judged to within the trace's own resolution: a trace written in
# whole microseconds (PyTorch 1.13's) rounds ts and dur apart, so a child may
# overhang its parent by 1 us; one written to the nanosecond (ct's) by 1e-3.


class FormatError(Exception):
    pass


class Slice:
    def __init__(self, event, ts, dur):
        self.event, self.ts, self.dur = event, ts, dur
        self.children = []
        self.parent = None

    @property
    def name(self):
        return self.event["name"]

    @property
    def end(self):
        return self.ts + self.dur

    @property
    def self_time(self):
        return self.dur - sum(c.dur for c in self.children)

    @property
    def depth(self):
        d, p = 0, self.parent
        while p is not None:
            d, p = d + 1, p.parent
        return d


class Trace:
    def __init__(self):
        self.events = []
        self.threads = {}        # (pid, tid) -> [root slices]
        self.slices = []         # every slice
        self.instants = []
        self.names = {}          # ("process"|"thread", pid, tid) -> name

    def roots(self):
        return [s for roots in self.threads.values() for s in roots]


def _where(i, e):
    return f"event {i} ({json.dumps(e)[:160]})"


def _is_id(v):
    return isinstance(v, (int, str)) and not isinstance(v, bool)


def _is_num(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _check_event(i, e):
    if not isinstance(e, dict):
        raise FormatError(f"{_where(i, e)}: an event is a JSON object")
    ph = e.get("ph")
    if ph not in PHASES:
        raise FormatError(f"{_where(i, e)}: unknown phase {ph!r}")
    if not isinstance(e.get("name"), str):
        raise FormatError(f"{_where(i, e)}: 'name' must be a string")
    for k in ("pid", "tid"):
        if not _is_id(e.get(k)):
            raise FormatError(f"{_where(i, e)}: '{k}' must be an integer or a string")
    if ph != "M" and not _is_num(e.get("ts")):
        raise FormatError(f"{_where(i, e)}: 'ts' must be a number (microseconds)")
    if "cat" in e and not isinstance(e["cat"], str):
        raise FormatError(f"{_where(i, e)}: 'cat' must be a string")
    if "args" in e and not isinstance(e["args"], dict):
        raise FormatError(f"{_where(i, e)}: 'args' must be an object")
    if ph == "X" and not (_is_num(e.get("dur")) and e["dur"] >= 0):
        raise FormatError(f"{_where(i, e)}: a complete event needs 'dur' >= 0")
    if ph in "iI" and e.get("s", "t") not in ("g", "p", "t"):
        raise FormatError(f"{_where(i, e)}: instant scope 's' must be g, p or t")
    if ph == "M":
        key = METADATA.get(e["name"])
        if key is None:
            raise FormatError(f"{_where(i, e)}: unknown metadata event {e['name']!r}")
        if key not in e.get("args", {}):
            raise FormatError(f"{_where(i, e)}: metadata {e['name']} needs args.{key}")


def _resolution(events):
    """1.0 when every ts and dur is a whole number of microseconds, else 1e-3."""
    for e in events:
        for k in ("ts", "dur"):
            v = e.get(k)
            if _is_num(v) and float(v) != int(v):
                return 1e-3
    return 1.0


def _slices_of_thread(key, items, EPS):
    """items: (ts, dur, event) of one thread; builds the nesting tree, or raises."""
    # Earlier first; of two that begin together, the longer one holds the other.
    items.sort(key=lambda x: (x[0], -x[1]))
    roots, stack, out = [], [], []
    for ts, dur, e in items:
        s = Slice(e, ts, dur)
        while stack and ts >= stack[-1].end - EPS:
            stack.pop()
        if stack:
            parent = stack[-1]
            if s.end > parent.end + EPS:
                raise FormatError(f"thread {key}: slice {s.name!r} [{ts}, {s.end}] begins inside "
                                  f"{parent.name!r} [{parent.ts}, {parent.end}] and ends after it")
            s.parent = parent
            parent.children.append(s)
        else:
            roots.append(s)
        stack.append(s)
        out.append(s)
    return roots, out


def parse(doc):
    if isinstance(doc, dict):
        if not isinstance(doc.get("traceEvents"), list):
            raise FormatError("the JSON object format needs a 'traceEvents' array")
        if doc.get("displayTimeUnit", "ms") not in ("ms", "ns"):
            raise FormatError("'displayTimeUnit' must be 'ms' or 'ns'")
        events = doc["traceEvents"]
    elif isinstance(doc, list):
        events = doc
    else:
        raise FormatError("a trace is a JSON array or object")
    t = Trace()
    t.events = events
    per_thread = defaultdict(list)
    open_b = defaultdict(list)
    for i, e in enumerate(events):
        _check_event(i, e)
        ph, key = e["ph"], (e["pid"], e["tid"])
        if ph == "X":
            per_thread[key].append((float(e["ts"]), float(e["dur"]), e))
        elif ph == "B":
            open_b[key].append(e)
        elif ph == "E":
            if not open_b[key]:
                raise FormatError(f"{_where(i, e)}: 'E' without a matching 'B' on its thread")
            b = open_b[key].pop()
            if e["ts"] < b["ts"]:
                raise FormatError(f"{_where(i, e)}: ends before its 'B' begins")
            per_thread[key].append((float(b["ts"]), float(e["ts"]) - float(b["ts"]), b))
        elif ph in "iI":
            t.instants.append(e)
        elif ph == "M" and e["name"] in ("process_name", "thread_name"):
            kind = "process" if e["name"] == "process_name" else "thread"
            t.names[(kind, e["pid"], e["tid"] if kind == "thread" else None)] = e["args"]["name"]
    for key, stack in open_b.items():
        if stack:
            raise FormatError(f"thread {key}: {len(stack)} 'B' event(s) never ended")
    eps = _resolution(events)
    for key, items in per_thread.items():
        roots, slices = _slices_of_thread(key, items, eps)
        t.threads[key] = roots
        t.slices += slices
    return t


def read(path):
    with open(path, encoding="utf-8") as f:
        try:
            doc = json.load(f)
        except ValueError as e:
            raise FormatError(f"{path} is not JSON: {e}")
    return parse(doc)


def self_times_by_name(trace, pids=None):
    """{name: (calls, self time us, total time us)} over the slices (of processes pids, if given)."""
    out = {}
    for s in trace.slices:
        if pids is not None and s.event["pid"] not in pids:
            continue
        n, st, tt = out.get(s.name, (0, 0.0, 0.0))
        out[s.name] = (n + 1, st + s.self_time, tt + s.dur)
    return out
