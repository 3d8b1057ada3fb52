#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Two "machines" on one: ranks in two network namespaces, over Open MPI's TCP transport.

    check_netns.py LAUNCH NETNS_RSH TEST_DIST

Makes two network namespaces joined by a veth pair (10.231.N.1 and .2), runs
tools/launch --hosts with one rank per "host" from the first namespace, and
mpirun reaches the second through NETNS_RSH (an ssh stand-in: `ip netns
exec`). Only TCP may carry MPI's messages (btl tcp,self), on the veth's
subnet. Checks: each rank reports its own namespace as its hostname, and
test_dist's collectives and DDP-equivalence checks pass across the pair.
Exits 77 where it cannot build the namespaces (not root, no `ip netns`).
The namespaces are removed afterwards, whatever happened.
"""
import os
import shutil
import subprocess
import sys
import tempfile


def sh(*args, check=True):
    return subprocess.run(list(args), capture_output=True, text=True, check=check)


def main(argv):
    if len(argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    launch, rsh, test = argv[1:]
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare"):
        print("SKIP: needs root, ip (iproute2) and unshare")
        return 77
    n = 100 + os.getpid() % 150
    a, b = f"cta{os.getpid()}", f"ctb{os.getpid()}"
    if sh("ip", "netns", "add", a, check=False).returncode != 0:
        print("SKIP: ip netns add failed here (no CAP_SYS_ADMIN?)")
        return 77
    tmp = tempfile.mkdtemp(prefix="ct-netns-")
    try:
        sh("ip", "netns", "add", b)
        sh("ip", "link", "add", f"va{n}", "type", "veth", "peer", "name", f"vb{n}")
        for ns, dev, ip in ((a, f"va{n}", f"10.231.{n}.1"), (b, f"vb{n}", f"10.231.{n}.2")):
            sh("ip", "link", "set", dev, "netns", ns)
            sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "link", "set", dev, "up")
        hosts = os.path.join(tmp, "hosts")
        with open(hosts, "w") as f:
            f.write(f"10.231.{n}.1 {a}\n10.231.{n}.2 {b}\n")
        subnet = f"10.231.{n}.0/24"
        env = dict(os.environ, CT_NETNS_HOSTS=hosts, OMPI_MCA_btl="tcp,self", OMPI_MCA_btl_tcp_if_include=subnet,
                   OMPI_MCA_oob_tcp_if_include=subnet, OMP_NUM_THREADS="1")

        def job(*program):
            cmd = ["ip", "netns", "exec", a, "unshare", "--uts", "sh", "-c",
                   f"hostname {a}; exec \"$@\"", "sh", launch, "--hosts", f"10.231.{n}.1,10.231.{n}.2",
                   "--nproc-per-node", "1", "--rsh-agent", rsh, *program]
            print("$", " ".join(cmd), flush=True)
            return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)

        r = job("/bin/sh", "-c", "echo rank $RANK of $WORLD_SIZE on $(hostname), MASTER_ADDR $MASTER_ADDR")
        print(r.stdout, r.stderr)
        lines = sorted(r.stdout.split("\n"))
        want = [f"rank 0 of 2 on {a}, MASTER_ADDR 10.231.{n}.1", f"rank 1 of 2 on {b}, MASTER_ADDR 10.231.{n}.1"]
        if r.returncode != 0 or [ln for ln in lines if ln] != want:
            print(f"FAIL: the ranks did not run one per namespace: {lines}")
            return 1
        r = job(test, "mpi")
        print(r.stdout[-2000:], r.stderr[-2000:])
        if r.returncode != 0 or "PASSED: 2 ranks, 0 failures" not in r.stdout:
            print("FAIL: test_dist across the namespaces")
            return 1
        print("PASSED: two namespaces, TCP between them")
        return 0
    finally:
        sh("ip", "netns", "del", a, check=False)
        sh("ip", "netns", "del", b, check=False)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
