#!/usr/bin/env python3
"""Runs the tests of MPICH's test/mpi directories listed in their `testlist` files, as MPICH's
own `runtests` does, and records one line per test run.

    mpich_run.py BUILD_DIR RESULTS.tsv MPIEXEC DIR...

BUILD_DIR is a configured and built copy of test/mpi. MPIEXEC is the launcher command (it is
given `-n N program args`). Each testlist line `name np [key=value...]` is run with
min(np, MAXNP) ranks and a time limit (TIMEOUT seconds, or the line's timeLimit= if larger,
at most 3 x TIMEOUT); it passes when the output has a line "No Errors" or "No errors"
(runtests' criterion). As runtests with -strict, lines with strict=false are skipped; lines
with xfail= (MPICH's known failures) are skipped; lines that differ from an earlier one only
in MPICH's MPIR_CVAR_* environment (its algorithm selections, meaningless to other
implementations) are run once. A program that did not build counts as a failure
("nobuild").

Environment: MAXNP (default 4), TIMEOUT (default 60), MPICH_RUN_ONLY (a regex: run only the
tests whose dir/name matches it).
"""
import os
import pathlib
import re
import shlex
import signal
import subprocess
import sys
import time

MAXNP = int(os.environ.get("MAXNP", "4"))
TIMEOUT = int(os.environ.get("TIMEOUT", "60"))
ONLY = re.compile(os.environ.get("MPICH_RUN_ONLY", "."))
# runtests' pass criterion: a line " No Errors" (MTest_Finalize prints it with a leading space,
# some tests without; runtests takes "No errors" too, which datatype/longdouble prints).
NO_ERRORS = re.compile(r"^\s*No [Ee]rrors\s*$", re.MULTILINE)


def entries(build, d):
    """The testlist lines of directory d (relative to build), subdirectories included."""
    tl = build / d / "testlist"
    if not tl.exists():
        return
    for raw in tl.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        fields = line.split()
        name = fields[0]
        if (build / d / name).is_dir():
            yield from entries(build, f"{d}/{name}")
            continue
        if len(fields) < 2 or not fields[1].isdigit():
            continue
        opts = {"arg": [], "env": [], "mpiexecarg": []}
        for kv in fields[2:]:
            k, _, v = kv.partition("=")
            if k in opts:
                opts[k].append(v)
            else:
                opts[k] = v
        yield d, name, int(fields[1]), opts


def main():
    build = pathlib.Path(sys.argv[1]).resolve()
    out = open(sys.argv[2], "a", buffering=1)
    mpiexec = shlex.split(sys.argv[3])
    seen = set()
    for top in sys.argv[4:]:
        for d, name, np, opts in entries(build, top):
            if not ONLY.search(f"{d}/{name}"):
                continue
            np = min(np, MAXNP)
            env = [e for e in opts["env"] if not e.startswith("MPIR_CVAR_")]
            key = (d, name, np, tuple(opts["arg"]), tuple(env), tuple(opts["mpiexecarg"]))
            label = " ".join([name, *opts["arg"], *env])
            if key in seen:
                continue
            seen.add(key)
            if opts.get("strict", "").lower() == "false":
                out.write(f"{d}\t{label}\t{np}\tskip-nonstrict\t0\n")
                continue
            if "xfail" in opts:
                out.write(f"{d}\t{label}\t{np}\tskip-xfail\t0\n")
                continue
            prog = build / d / name
            if not os.access(prog, os.X_OK):
                out.write(f"{d}\t{label}\t{np}\tnobuild\t0\n")
                continue
            # A testlist timeLimit= raises the limit, up to 3 x TIMEOUT (a few ask for 300 s).
            limit = min(max(TIMEOUT, int(opts.get("timeLimit", "0") or 0)), 3 * TIMEOUT)
            runenv = dict(os.environ)
            for e in env:
                k, _, v = e.partition("=")
                runenv[k] = v
            cmd = [*mpiexec, "-n", str(np), *opts["mpiexecarg"], f"./{name}", *opts["arg"]]
            t0 = time.time()
            # Its own session: on timeout the launcher and every rank are killed together.
            p = subprocess.Popen(
                cmd, cwd=build / d, env=runenv, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, start_new_session=True,
            )
            try:
                raw, _ = p.communicate(timeout=limit)
                text = raw.decode(errors="replace")
                status = "pass" if NO_ERRORS.search(text) else f"fail({p.returncode})"
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                raw, _ = p.communicate()
                text = raw.decode(errors="replace")
                status = "timeout"
            dt = time.time() - t0
            logs = build / "runlogs"
            logs.mkdir(exist_ok=True)
            n = len(list(logs.glob(f"{d.replace('/', '__')}__{name}.{np}.*")))
            (logs / f"{d.replace('/', '__')}__{name}.{np}.{n}.log").write_text(" ".join(cmd) + "\n" + text)
            out.write(f"{d}\t{label}\t{np}\t{status}\t{dt:.1f}\n")
            print(f"{status:10} {d}/{label} (np={np}, {dt:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
