"""The raw output of the OSU drivers (bench/osu-peers.sh, bench/osu-coll-nodes.sh), read back.

Each job's output is OUT/raw/BENCH.RANKS.RUNTIME.ROUND: OSU's table, a size then the figure per
line (osu_mbw_mr prints MB/s then messages/s: the first is taken), or the latency alone
(osu_barrier, read as size 0).
"""
import os


def read_raw(out, bench, ranks, runtimes, rounds):
    """{(runtime, size): [figure of each round that has one]} for one benchmark and rank count."""
    vals = {}
    for rt in runtimes:
        for r in range(1, rounds + 1):
            try:
                with open(os.path.join(out, "raw", f"{bench}.{ranks}.{rt}.{r}")) as f:
                    lines = f.read().splitlines()
            except FileNotFoundError:
                continue
            for line in lines:
                f = line.split()
                # A figure is parsed before its key is made: a line that is not one (a
                # launcher's banner of '=' signs) leaves no empty row behind.
                try:
                    if len(f) == 1:
                        size, value = 0, float(f[0])
                    elif len(f) >= 2 and f[0].isdigit():
                        size, value = int(f[0]), float(f[1])
                    else:
                        continue
                except ValueError:
                    continue
                vals.setdefault((rt, size), []).append(value)
    return vals


def figure(x):
    """A figure with 4 significant digits, never in exponent form (columns stay apart)."""
    return f"{x:.0f}" if x >= 1000 else f"{x:.4g}"
