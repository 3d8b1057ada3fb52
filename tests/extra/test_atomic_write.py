# SPDX-License-Identifier: MIT
"""unit.atomic_write: tools/fixtures/atomic.py, the one writer of the twins
and the fixtures. Checked against what the C writer promises (BADINPUT.md):
a link planted where a temporary could be named is never followed, a failed
write leaves the target and the folder as they were, an existing file keeps
its mode, a new one is the whole content."""
import glob
import os
import sys
import tempfile

sys.path.insert(0, os.path.join(sys.argv[1], "tools", "fixtures"))
from atomic import write_atomic  # noqa: E402

failures = 0


def check(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what)
    failures += 0 if ok else 1


with tempfile.TemporaryDirectory() as d:
    target = os.path.join(d, "m.json")
    victim = os.path.join(d, "victim")
    with open(victim, "w") as f:
        f.write("keep")
    # every name the old writers used, and a spread of likely ones, as links
    for name in [f"m.json.tmp.{os.getpid()}", f".m.json.tmp.{os.getpid()}"] + [f".m.json.tmp.{i}" for i in range(50)]:
        os.symlink(victim, os.path.join(d, name))
    write_atomic(target, lambda f: f.write(b"new"))
    check(open(victim).read() == "keep", "a planted link at a temporary name is not followed")
    check(open(target, "rb").read() == b"new" and not os.path.islink(target), "the target holds the whole content")
    os.chmod(target, 0o640)
    write_atomic(target, lambda f: f.write(b"newer"))
    check(os.stat(target).st_mode & 0o777 == 0o640, "an existing file of the user keeps its mode")
    before = sorted(os.listdir(d))

    def broken(f):
        f.write(b"half")
        raise OSError(28, "No space left on device")
    try:
        write_atomic(target, broken)
        check(False, "a failed write raises")
    except OSError:
        pass
    check(open(target, "rb").read() == b"newer", "a failed write leaves the target untouched")
    check(sorted(os.listdir(d)) == before, "a failed write leaves no temporary")
    new = os.path.join(d, "fresh.bin")
    old_mask = os.umask(0o027)
    write_atomic(new, lambda f: f.write(b"x"))
    os.umask(old_mask)
    check(os.stat(new).st_mode & 0o777 == 0o640, "a new file gets 0666 less the umask, as the C writer's")
    check(not glob.glob(os.path.join(d, ".fresh.bin.tmp.*")), "no temporary left after success")

sys.exit(1 if failures else 0)
