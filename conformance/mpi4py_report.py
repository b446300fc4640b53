#!/usr/bin/env python3
"""Summarize the logs of conformance/mpi4py.sh: unittest counts per rank count, skip reasons,
and every failure or error triaged by the MPI function at fault.

    mpi4py_report.py LOGDIR

LOGDIR holds one file per (rank count, test module, rank): `np<N>/<module>.<rank>.log`, the
verbose (-v) output of mpi4py's test/main.py, and `np<N>/<module>.status` with the launcher's
exit status. Only rank 0's log is counted (every rank runs the same tests); a module whose job
crashed or timed out is listed with its status. Exit status 1 if any test failed or errored or
any module crashed, else 0.
"""
import collections
import pathlib
import re
import sys

RESULT = re.compile(r"^(\w+) \(([\w.]+)\) \.\.\. (.*)$")
HEADER = re.compile(r"^(ERROR|FAIL): (\w+) \(([\w.]+)\)")
RAN = re.compile(r"^Ran (\d+) tests? in")
UNSUPPORTED = re.compile(r"(MPI_\w+) is not implemented")
CALL = re.compile(r"\b(P?MPI_[A-Z][A-Za-z0-9_]*)\s*\(")
EXC = re.compile(r"^(mpi4py\.MPI\.Exception|\w+Error|\w+Exception): ?(.*)$")


def blocks(text):
    """The ERROR/FAIL blocks of a unittest log: (kind, test id, traceback lines)."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = HEADER.match(lines[i])
        if not m:
            i += 1
            continue
        kind, test = m.group(1), m.group(3)
        j = i + 2
        body = []
        while j < len(lines) and not lines[j].startswith("=" * 20) and not lines[j].startswith("-" * 60):
            body.append(lines[j])
            j += 1
        yield kind, test, body
        i = j


def triage(body):
    """(function at fault, symptom) of one traceback."""
    text = "\n".join(body)
    exc = [m for m in (EXC.match(l) for l in body) if m]
    symptom = f"{exc[-1].group(1)}: {exc[-1].group(2)}" if exc else (body[-1] if body else "?")
    symptom = re.sub(r"0x[0-9a-f]+", "0x..", symptom.replace("mpi4py.MPI.Exception", "MPI.Exception"))
    m = UNSUPPORTED.search(text)
    if m:
        return m.group(1), "unsupported (MPI_ERR_UNSUPPORTED_OPERATION)"
    # mpi4py's C helper for intercommunicator object collectives: MPI_Intercomm_merge, then
    # MPI_Comm_create with each side's own (disjoint) group, as MPI-2.2 allows.
    if "PyMPI_Commctx_inter" in text and "create" in symptom:
        return "MPI_Comm_create (disjoint groups, via PyMPI_Commctx_inter)", symptom[:160]
    # The innermost MPI call of the traceback: mpi4py's .pyx lines show `CHKERR( MPI_Foo(...) )`.
    calls = CALL.findall(text)
    if calls:
        return calls[-1].removeprefix("P"), symptom[:160]
    # An assertion in the test itself: name the mpi4py method on the failing line.
    src = [l.strip() for l in body if l.startswith("    ") and not l.strip().startswith("^")]
    where = src[-1] if src else "?"
    return f"(test) {where[:70]}", symptom[:160]


def main():
    logdir = pathlib.Path(sys.argv[1])
    bad = False
    by_function = collections.defaultdict(lambda: [set(), collections.Counter()])
    skips = collections.Counter()
    print("| ranks | modules | ran | ok | failures | errors | skipped | crashed/timed-out modules |")
    print("|---|---|---|---|---|---|---|---|")
    for npdir in sorted(logdir.glob("np*"), key=lambda p: int(p.name[2:])):
        n = int(npdir.name[2:])
        counts = collections.Counter()
        crashed = []
        modules = sorted(p.name[: -len(".status")] for p in npdir.glob("*.status"))
        for mod in modules:
            status = (npdir / f"{mod}.status").read_text().strip()
            log = npdir / f"{mod}.0.log"
            text = log.read_text(errors="replace") if log.exists() else ""
            ran = [int(m.group(1)) for m in map(RAN.match, text.splitlines()) if m]
            for line in text.splitlines():
                m = RESULT.match(line)
                if not m:
                    continue
                res = m.group(3)
                if res == "ok":
                    counts["ok"] += 1
                elif res.startswith("skipped"):
                    counts["skipped"] += 1
                    skips[res[len("skipped "):].strip("'\"")] += 1
                elif res == "ERROR":
                    counts["errors"] += 1
                elif res == "FAIL":
                    counts["failures"] += 1
                elif res in ("expected failure", "unexpected success"):
                    counts[res] += 1
            counts["ran"] += ran[-1] if ran else 0
            for kind, test, body in blocks(text):
                fn, symptom = triage(body)
                entry = by_function[fn]
                entry[0].add(test)
                entry[1][f"{kind.lower()}: {symptom}"] += 1
            if status != "0" and not ran:
                crashed.append(f"{mod} ({status})")
                by_function[f"(crash) {mod}"][0].add(f"{mod}@np{n}")
                by_function[f"(crash) {mod}"][1][f"job status {status} before the summary"] += 1
            elif status != "0" and counts["failures"] + counts["errors"] == 0:
                crashed.append(f"{mod} ({status}, after the summary)")
        bad |= bool(counts["failures"] or counts["errors"] or crashed)
        print(
            f"| {n} | {len(modules)} | {counts['ran']} | {counts['ok']} | {counts['failures']} "
            f"| {counts['errors']} | {counts['skipped']} | {', '.join(crashed) or '-'} |"
        )
    print()
    print("Failures and errors by MPI function at fault (tests: distinct test ids over all rank counts):")
    print()
    print("| function | tests | symptom (count) | e.g. |")
    print("|---|---|---|---|")
    for fn, (tests, symptoms) in sorted(by_function.items(), key=lambda kv: (-len(kv[1][0]), kv[0])):
        sym = "; ".join(f"{s} ({c})" for s, c in symptoms.most_common(2))
        print(f"| {fn} | {len(tests)} | {sym.replace('|', '/')} | {min(tests)} |")
    print()
    print("Skip reasons (mpi4py's own, summed over rank counts):")
    print()
    for reason, c in skips.most_common():
        print(f"- {c} x {reason}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
