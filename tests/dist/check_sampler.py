#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""ct's DistributedSampler against PyTorch's torch.utils.data.DistributedSampler.

    check_sampler.py SAMPLER_DUMP

For lengths, world sizes, every rank, epochs, shuffle on/off and drop_last
on/off, the shard sampler_dump prints must equal list(DistributedSampler(...))
after set_epoch, index for index. Exits 77 where torch cannot be imported.
"""
import subprocess
import sys


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        from torch.utils.data import DistributedSampler
    except ImportError as e:
        print(f"SKIP: no torch here ({e})")
        return 77
    queries, wants = [], []
    for length in (1, 5, 10, 17, 100, 1000):
        for world in (1, 2, 3, 4, 7):
            for shuffle in (False, True):
                for drop_last in (False, True):
                    for epoch in (0, 1, 5):
                        for seed in (0, 42):
                            if not shuffle and (epoch, seed) != (0, 0):
                                continue
                            for rank in range(world):
                                s = DistributedSampler(range(length), num_replicas=world, rank=rank, shuffle=shuffle,
                                                       seed=seed, drop_last=drop_last)
                                s.set_epoch(epoch)
                                wants.append(list(s))
                                queries.append(f"{length} {world} {rank} {int(shuffle)} {seed} {epoch} {int(drop_last)}")
    r = subprocess.run([argv[1]], input="\n".join(queries) + "\n", capture_output=True, text=True)
    lines = r.stdout.splitlines()
    if r.returncode != 0 or len(lines) != len(queries):
        print(f"FAIL: sampler_dump exit {r.returncode}, {len(lines)} lines for {len(queries)} queries: {r.stderr}")
        return 1
    for q, line, want in zip(queries, lines, wants):
        got = None if line.startswith("error") else [int(v) for v in line.split()]
        if got != want:
            print(f"FAIL: LEN WORLD RANK SHUFFLE SEED EPOCH DROP = {q}: ct {line[:120]}, torch {want[:20]}")
            return 1
    cases = len(queries)
    print(f"PASSED: {cases} shards equal PyTorch's")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
