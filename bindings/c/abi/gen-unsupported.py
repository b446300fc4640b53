#!/usr/bin/env python3
"""Write bindings/c/src/ffi/unsupported.rs: an entry point for every function that
include/mpi.h declares and the library does not implement yet.

The library must export every function of the standard ABI (a missing symbol stops a
program at load time). Each function rmca does not implement links and raises
MPI_ERR_UNSUPPORTED_OPERATION through the error handler, naming the call. When a function
gets implemented, its line in unsupported.rs is deleted (or this script rerun): a function
defined twice does not link, so the two cannot drift apart.

Usage: gen-unsupported.py LIB.so     (LIB.so: the library built with unsupported.rs emptied)
"""
import re
import subprocess
import sys

HEADER = "bindings/c/include/mpi.h"
OUT = "bindings/c/src/ffi/unsupported.rs"
HANDLES = {
    "MPI_Comm", "MPI_Datatype", "MPI_Group", "MPI_Win", "MPI_File", "MPI_Session",
    "MPI_Message", "MPI_Info", "MPI_Errhandler", "MPI_Request", "MPI_Op",
    "MPI_T_enum", "MPI_T_cvar_handle", "MPI_T_pvar_handle", "MPI_T_pvar_session",
    "MPI_T_event_registration", "MPI_T_event_instance",
}
SCALARS = {
    "int": "c_int", "double": "c_double", "MPI_Aint": "MPI_Aint", "MPI_Count": "MPI_Count",
    "MPI_Offset": "MPI_Offset", "MPI_T_cb_safety": "c_int", "MPI_T_source_order": "c_int",
}


def rust_type(ctype):
    ctype = ctype.replace("const ", "").strip()
    # A parameter of function type is a pointer to the function, as in C.
    if "*" in ctype or "[" in ctype or ctype.endswith(("_function", "_fn")):
        return "*mut c_void"
    if ctype in HANDLES:
        return "Handle"
    return SCALARS[ctype]


def parse(proto):
    m = re.match(r"(.+?)\b(MPI_\w+)\((.*)\);$", proto)
    ret, name, params = m.group(1).strip(), m.group(2), m.group(3)
    out = []
    if params.strip() not in ("", "void"):
        for p in params.split(","):
            p = p.strip()
            if p == "...":
                continue
            pm = re.match(r"(.*?)(\w+)((?:\[\w*\])*)$", p)
            ctype, pname = pm.group(1) + ("*" if pm.group(3) else ""), pm.group(2)
            out.append((pname, ctype.strip()))
    return ret, name, out


def main():
    have = set(
        l.split()[-1]
        for l in subprocess.run(["nm", "-D", "--defined-only", sys.argv[1]],
                                capture_output=True, text=True, check=True).stdout.splitlines()
    )
    protos = [l for l in open(HEADER) if re.match(r"^[\w ]+\*? ?MPI_\w+\(", l) and "PMPI_" not in l]
    entries = []
    for proto in protos:
        ret, name, params = parse(proto.strip())
        if name in have:
            continue
        assert ret == "int", f"{name} returns {ret}: implement it (only int functions get stubs)"
        args = ", ".join(f"{n}: {rust_type(t)}" for n, t in params)
        # The error goes to the handler of the call's communicator, when it has one.
        comm = next((n for n, t in params if t == "MPI_Comm"), None)
        assert not name.startswith("MPI_T_"), f"{name}: the tool interface calls no error handler"
        entries.append(f"    {name}({args}) on {comm or 'MPI_COMM_WORLD'};")
    with open(OUT, "w") as f:
        f.write(PREAMBLE)
        f.write("\n".join(entries))
        f.write("\n}\n")
    print(f"{OUT}: {len(entries)} functions not implemented")


PREAMBLE = '''//! The functions of the standard ABI that rmca does not implement yet: each links, and
//! raises `MPI_ERR_UNSUPPORTED_OPERATION` through the error handler of its communicator (of
//! `MPI_COMM_WORLD` when it has none) with a message naming the call.
//!
//! Written by `bindings/c/abi/gen-unsupported.py`. Implementing a function means deleting its
//! line here: a function defined twice does not link. The README lists the same functions
//! (checked by a test).

use std::ffi::{c_int, c_void};

use crate::abi::*;

not_implemented_fns! {
'''

if __name__ == "__main__":
    main()
