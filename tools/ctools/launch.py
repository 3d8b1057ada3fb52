#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/launch: torchrun's part, played over Open MPI's mpirun.

    tools/launch [--nproc-per-node N] [--hosts H1,H2,... | --hostfile FILE]
                 [--master-port P] [--rsh-agent CMD] [--dry-run] PROGRAM [ARGS...]

Starts N processes of PROGRAM on each host (one host, this one, by default)
through mpirun, and gives every process the environment torchrun gives:
RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
The ranks come from MPI's own numbering (OMPI_COMM_WORLD_RANK, ...), so the
program's MPI rank and its RANK always agree; ct_dist_init_process_group
checks that they do. PROGRAM may be a ct chapter (./ch08) or a Python
script using torch.distributed with init_method env:// (the twins).

    tools/launch --nproc-per-node 2 build/ch08 --quick
    tools/launch --nproc-per-node 2 /usr/bin/python3 chapters/ch08_ddp/ch08_pytorch.py --quick
    tools/launch --hosts node1,node2 --nproc-per-node 4 ./ch08 --device cuda

Threads: unless OMP_NUM_THREADS is set, each rank gets (in it, and in
OPENBLAS_NUM_THREADS and MKL_NUM_THREADS when those are unset) the CPUs divided by
the ranks per host (at least 1), as torchrun sets it (to 1): N ranks each
running an OpenMP team as wide as the machine oversubscribe the cores, and
MPI's busy-waiting ranks then steal the cores the others compute on.
For the same reason mpirun is given --mca mpi_yield_when_idle 1 (unless
OMPI_MCA_mpi_yield_when_idle is set): Open MPI's blocking calls then yield
the core while they poll, which mpirun does by itself only when there are
more ranks than cores, and a machine busy with other work needs as well.

What it adds to mpirun: --allow-run-as-root when run as root (containers),
--oversubscribe (more ranks than cores is allowed: slow, but it is how one
machine plays a cluster), --bind-to none (each rank runs OpenMP threads of
its own), -x for the variables above and the ones ct reads (CT_*, OMP_*,
OPENBLAS_*, CUDA_VISIBLE_DEVICES, NCCL_*, PATH, LD_LIBRARY_PATH).

Signals: SIGTERM or SIGINT sent to the launcher goes on to mpirun, which
sends every rank SIGTERM and then SIGKILL; nothing outlives the launcher.
Faults: when a rank exits non-zero or dies, mpirun stops every other rank;
launch then exits with that rank's status and says which rank it was. A
missing mpirun, a bad flag or a host list it cannot parse exits 2 with the
reason. Exit codes: the job's (0 when every rank exited 0).
"""
import argparse
import os
import shutil
import socket
import subprocess
import signal
import sys
import time

ENTRY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "launch")  # tools/launch: each rank runs it again

PASS_PREFIXES = ("CT_", "OMP_", "OPENBLAS_", "NCCL_", "CUDA_")
PASS_NAMES = ("PATH", "LD_LIBRARY_PATH", "PYTHONPATH", "HOME")


def die(msg, code=2):
    print(f"launch: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def child(argv):
    """Inside mpirun: torchrun's variables from MPI's numbering, then exec the program."""
    env = os.environ
    try:
        rank, size = env["OMPI_COMM_WORLD_RANK"], env["OMPI_COMM_WORLD_SIZE"]
        local, local_size = env["OMPI_COMM_WORLD_LOCAL_RANK"], env["OMPI_COMM_WORLD_LOCAL_SIZE"]
    except KeyError as e:
        die(f"--child runs under mpirun only ({e.args[0]} is not set); start jobs with tools/launch PROGRAM")
    env.update(RANK=rank, WORLD_SIZE=size, LOCAL_RANK=local, LOCAL_WORLD_SIZE=local_size)
    try:
        os.execvp(argv[0], argv)
    except OSError as e:
        die(f"rank {rank}: cannot run {argv[0]}: {e.strerror}", 1)


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def parse(argv):
    p = argparse.ArgumentParser(prog="tools/launch", description="torchrun's part, over Open MPI's mpirun.")
    p.add_argument("--nproc-per-node", type=int, default=1, metavar="N", help="processes per host (default 1)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--hosts", help="comma-separated hosts (default: this one); the first is MASTER_ADDR")
    g.add_argument("--hostfile", help="an Open MPI hostfile, one host per line (default: none, --hosts)")
    p.add_argument("--master-port", type=int, default=0, help="MASTER_PORT (default: a free port)")
    p.add_argument("--rsh-agent", help="how mpirun reaches other hosts (Open MPI's plm_rsh_agent; default ssh)")
    p.add_argument("--dry-run", action="store_true", help="print the mpirun command and exit")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("program", nargs=argparse.REMAINDER, help="the program and its arguments")
    a = p.parse_args(argv)
    if a.child:
        return a
    if not a.program:
        p.error("no PROGRAM given: tools/launch --nproc-per-node N PROGRAM [ARGS...]")
    if a.nproc_per_node < 1:
        p.error(f"--nproc-per-node must be >= 1, got {a.nproc_per_node}")
    if not 0 <= a.master_port <= 65535:
        p.error(f"--master-port must be a port (1-65535), got {a.master_port}")
    return a


def hosts_of(a):
    if a.hostfile:
        try:
            with open(a.hostfile) as f:
                hosts = [ln.split()[0] for ln in f if ln.strip() and not ln.lstrip().startswith("#")]
        except OSError as e:
            die(f"--hostfile {a.hostfile}: {e.strerror}")
    elif a.hosts:
        hosts = [h.strip() for h in a.hosts.split(",")]
    else:
        return []
    if not hosts or any(not h or ":" in h for h in hosts):
        die(f"expected a comma-separated list of host names, got {a.hosts or a.hostfile!r}")
    return hosts


def mpirun_command(a, mpirun, hosts, port):
    n = a.nproc_per_node * max(1, len(hosts))
    master = hosts[0] if hosts else "127.0.0.1"
    cmd = [mpirun, "-np", str(n), "--oversubscribe", "--bind-to", "none"]
    if os.geteuid() == 0:
        cmd.append("--allow-run-as-root")
    if hosts:
        cmd += ["--host", ",".join(f"{h}:{a.nproc_per_node}" for h in hosts)]
    if a.rsh_agent:
        cmd += ["--mca", "plm_rsh_agent", a.rsh_agent]
    if not os.environ.get("OMPI_MCA_mpi_yield_when_idle"):  # idle ranks yield their core (see above)
        cmd += ["--mca", "mpi_yield_when_idle", "1"]
    env = {"MASTER_ADDR": master, "MASTER_PORT": str(port)}
    share = str(max(1, len(os.sched_getaffinity(0)) // a.nproc_per_node))
    for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # BLAS pools of their own too
        if not os.environ.get(k):
            env[k] = os.environ.get("OMP_NUM_THREADS") or share
    for k in os.environ:
        if k.startswith(PASS_PREFIXES) or k in PASS_NAMES:
            env.setdefault(k, os.environ[k])
    for k in sorted(env):
        cmd += ["-x", k]
    program = a.program[1:] if a.program[0] == "--" else a.program
    cmd += [sys.executable, ENTRY, "--child", *program]
    return cmd, env


def run_forwarding_signals(cmd):
    """Runs mpirun and waits for it. SIGTERM or SIGINT sent to the launcher is passed on to mpirun,
    which sends SIGTERM to every rank (a chapter then stops after its step, as on Ctrl-C) and
    SIGKILL a few seconds later; if mpirun itself is not gone 20 s after the first signal, or a
    second one comes, it is killed, so nothing the launcher started outlives it."""
    proc = subprocess.Popen(cmd)
    state = {"signals": 0, "first": None}

    def forward(sig, frame):
        state["signals"] += 1
        state["first"] = state["first"] or time.monotonic()
        try:
            proc.send_signal(signal.SIGKILL if state["signals"] > 1 else signal.SIGTERM)
        except ProcessLookupError:
            pass

    old = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        while True:
            try:
                return proc.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                if state["first"] and time.monotonic() - state["first"] > 20:
                    proc.kill()
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def main(argv):
    a = parse(argv)
    if a.child:
        child(a.program[1:] if a.program and a.program[0] == "--" else a.program)
    mpirun = shutil.which("mpirun")
    if not mpirun:
        die("mpirun not found: install Open MPI (Debian: openmpi-bin libopenmpi-dev; tools/bootstrap does)")
    hosts = hosts_of(a)
    port = a.master_port or free_port()
    cmd, env = mpirun_command(a, mpirun, hosts, port)
    if a.dry_run:
        print(" ".join(f"{k}={v}" for k, v in env.items() if k.startswith("MASTER")), " ".join(cmd))
        return 0
    os.environ.update(env)
    rc = run_forwarding_signals(cmd)
    if rc != 0:
        print(f"launch: the job failed (mpirun exit {rc}): a rank exited non-zero or died, and mpirun stopped "
              "the others; its messages above name the rank", file=sys.stderr, flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
