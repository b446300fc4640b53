#!/usr/bin/env python3
"""Extract the description of the MPI calls that the Fortran generator reads (gen/api.json).

Source of facts: the MPI Forum's machine-readable description of the standard, as shipped in
the `pympistandard` package (PyPI: `pip install pympistandard`), the same source as
bindings/c/abi/gen-prototypes.py uses for mpi.h. Only the facts the Fortran layer needs are
kept: each procedure's parameters (name, kind, direction, array length, optional) and, for
each kind, its Fortran 90 and Fortran 2008 spelling. The result is checked in, so that
generate.py needs nothing but the Python standard library.

Usage: bindings/fortran/gen/extract.py   (rewrites bindings/fortran/gen/api.json)
"""
import json
import os

import pympistandard as std
from pympistandard import _kinds

HERE = os.path.dirname(os.path.abspath(__file__))
# Only what gen/generate.py reads.
PARAM_KEYS = ("name", "kind", "param_direction", "length", "large_only", "suppress")
ATTR_KEYS = ("callback", "f90_expressible", "f08_expressible", "not_with_mpif",
             "predefined_function")


def main():
    path = os.path.join(os.path.dirname(std.__file__), "data", "apis.json")
    apis = json.load(open(path))
    kinds = {}
    for name in dir(_kinds):
        k = getattr(_kinds, name)
        if hasattr(k, "_f08_small") and isinstance(getattr(k, "name", None), str):
            kinds[k.name] = {
                "c": getattr(k, "_iso_c_small", None),
                "c_large": getattr(k, "_iso_c_large", None),
                "f90": getattr(k, "_f90_small", None),
                "f08": getattr(k, "_f08_small", None),
                "f08_large": getattr(k, "_f08_large", None),
            }
    procs = {}
    for key in sorted(apis):
        v = apis[key]
        procs[v["name"]] = {
            "return_kind": v["return_kind"],
            "attributes": {a: v["attributes"].get(a) for a in ATTR_KEYS},
            "parameters": [{a: p.get(a) for a in PARAM_KEYS} for p in v["parameters"]],
        }
    out = {"source": "pympistandard " + getattr(std, "__version__", "0.2.0") + " data/apis.json",
           "kinds": kinds, "procedures": procs}
    # One procedure (or kind) per line: small, and a change of the description is a readable
    # diff.
    with open(os.path.join(HERE, "api.json"), "w") as f:
        f.write('{"source": %s,\n"kinds": {\n' % json.dumps(out["source"]))
        f.write(",\n".join(f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}"
                            for k, v in sorted(kinds.items())))
        f.write('},\n"procedures": {\n')
        f.write(",\n".join(f"{json.dumps(k)}: {json.dumps(v, sort_keys=True)}"
                            for k, v in sorted(procs.items())))
        f.write("}}\n")
    print(f"api.json: {len(procs)} procedures, {len(kinds)} kinds")


if __name__ == "__main__":
    main()
