#!/usr/bin/env python3
"""Compares the MPICH test-suite results of conformance/mpich-testsuite.sh.

    mpich-compare.py WORK_DIR

Reads WORK_DIR/{rmca,mpich,openmpi}.tsv (those present) and prints: the per-directory table
(passed / run for each implementation), the tests MPICH passes and rmca does not (with rmca's
status and the MPI function its output names), and those failures counted by MPI function.
"""
import collections
import pathlib
import re
import sys

IMPLS = ["rmca", "mpich", "openmpi"]
# rmca's messages name the call: "MPI_Foo is not implemented by rmca", "rmca MPI error
# (fatal): MPI_Foo: ...", "(last: MPI_Foo ...)"; MPICH's test programs print their own.
NAMED = [
    re.compile(r"(MPI_\w+) is not implemented"),
    re.compile(r"(a non-blocking collective) is not available on an intercommunicator"),
    re.compile(r"rmca MPI error[^:]*: (MPI_\w+)"),
    re.compile(r"\b(MPI_[A-Z][a-z]\w*)\b"),
]


def load(work, impl):
    """{(dir, label, np): (status, log file)}: mpich_run.py numbers the logs of one program at one
    rank count in the order of the runs."""
    p = work / f"{impl}.tsv"
    if not p.exists():
        return None
    rows = {}
    runs = collections.Counter()
    for line in p.read_text().splitlines():
        d, label, np, st, _secs = line.split("\t")
        log = None
        if not st.startswith("skip") and st != "nobuild":
            name = label.split()[0]
            log = work / impl / "runlogs" / f"{d.replace('/', '__')}__{name}.{np}.{runs[(d, name, np)]}.log"
            runs[(d, name, np)] += 1
        rows[(d, label, np)] = (st, log)
    return rows


def culprit(log):
    if log is None or not log.exists():
        return "(not built)", ""
    text = log.read_text(errors="replace").split("\n", 1)[-1]
    for pat in NAMED:
        m = pat.search(text)
        if m:
            line = next((l for l in text.splitlines() if m.group(1) in l), "")
            return m.group(1), line.strip()[:140]
    first = next((l.strip() for l in text.splitlines() if l.strip()), "(no output)")
    return "(unnamed)", first[:140]


def main():
    work = pathlib.Path(sys.argv[1])
    res = {i: load(work, i) for i in IMPLS}
    present = [i for i in IMPLS if res[i] is not None]
    dirs = sorted({k[0].split("/")[0] for i in present for k in res[i]})
    print("| dir | " + " | ".join(f"{i} passed / run" for i in present) + " |")
    print("|---|" + "---|" * len(present))
    tot = collections.defaultdict(lambda: [0, 0])
    for top in dirs:
        cells = []
        for i in present:
            sts = [s for k, (s, _l) in res[i].items() if k[0].split("/")[0] == top and not s.startswith("skip")]
            ok = sum(s == "pass" for s in sts)
            tot[i][0] += ok
            tot[i][1] += len(sts)
            cells.append(f"{ok} / {len(sts)}")
        print(f"| {top} | " + " | ".join(cells) + " |")
    print("| **total** | " + " | ".join(f"**{tot[i][0]} / {tot[i][1]}**" for i in present) + " |")
    if res["rmca"] is None or res["mpich"] is None:
        return
    print()
    print("Tests MPICH passes and rmca does not (rmca status; the MPI function rmca's output names):")
    print()
    print("| test | ranks | rmca | function | rmca's output |")
    print("|---|---|---|---|---|")
    by_fn = collections.Counter()
    for key, (st, _log) in sorted(res["mpich"].items()):
        if st != "pass":
            continue
        rst, rlog = res["rmca"].get(key, ("not run", None))
        if rst == "pass":
            continue
        d, label, np = key
        fn, line = culprit(rlog)
        by_fn[fn] += 1
        print(f"| {d}/{label} | {np} | {rst} | {fn} | {line.replace('|', '/')} |")
    print()
    print("Those failures by function named:")
    print()
    for fn, c in by_fn.most_common():
        print(f"- {fn}: {c}")


if __name__ == "__main__":
    main()
