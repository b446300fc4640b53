#!/usr/bin/env python3
"""Generate rmca's MPI Fortran interface from one description of the calls.

Inputs (both checked in):
  bindings/c/include/mpi.h      the C library's prototypes and constants (what exists in C,
                                with the C types of every parameter)
  bindings/fortran/gen/api.json the MPI Forum's description of the calls (gen/extract.py):
                                each parameter's kind, direction, array length, optionality

Outputs (checked in; tests/tests/fortran.rs regenerates them and fails on any difference):
  bindings/fortran/src/wrappers.c   the Fortran-callable C functions (gfortran's names:
                                    mpi_send_, pmpi_send_, mpi_send_f08_, mpi_send_f08c_ ...)
  bindings/fortran/include/mpif.h   constants for `include 'mpif.h'` (fixed and free form)
  bindings/fortran/src/mpi.f90      the `mpi` module: constants and explicit interfaces
  bindings/fortran/src/mpi_f08.f90  the `mpi_f08` module: handle types, constants, interfaces

Everything the generic rules below cannot express (calls taking procedures, returning
values other than an error code, or with C-only arguments) is written by hand in
src/runtime.c and listed in HANDWRITTEN; the Fortran interfaces of those calls are still
generated here from the description.

Usage: bindings/fortran/gen/generate.py [--check]   (--check: compare, write nothing)
Standard library only.
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
MPI_H = os.path.join(ROOT, "bindings", "c", "include", "mpi.h")
API = os.path.join(HERE, "api.json")
OUT = os.path.normpath(os.path.join(HERE, ".."))

HANDLES = {
    "MPI_Comm": "Comm", "MPI_Datatype": "Type", "MPI_Group": "Group", "MPI_Win": "Win",
    "MPI_File": "File", "MPI_Session": "Session", "MPI_Message": "Message",
    "MPI_Info": "Info", "MPI_Errhandler": "Errhandler", "MPI_Request": "Request",
    "MPI_Op": "Op",
}
INTLIKE = {"int", "MPI_Aint", "MPI_Count", "MPI_Offset"}

# Calls whose C side is written by hand in src/runtime.c (procedure arguments, attribute
# values whose meaning depends on the keyval, C-only arguments, non-error results).
HANDWRITTEN = {
    "MPI_Init", "MPI_Init_thread", "MPI_Wtime", "MPI_Wtick", "MPI_Aint_add", "MPI_Aint_diff",
    "MPI_Pcontrol", "MPI_Op_create", "MPI_Comm_create_errhandler",
    "MPI_Win_create_errhandler", "MPI_File_create_errhandler",
    "MPI_Session_create_errhandler", "MPI_Comm_create_keyval", "MPI_Type_create_keyval",
    "MPI_Win_create_keyval", "MPI_Keyval_create", "MPI_Comm_get_attr", "MPI_Type_get_attr",
    "MPI_Win_get_attr", "MPI_Attr_get", "MPI_Attr_put", "MPI_Info_create_env",
    "MPI_Grequest_start", "MPI_Info_get_string", "MPI_Comm_set_attr", "MPI_Type_set_attr",
    "MPI_Win_set_attr",
}
# Procedures that are Fortran-only or C-only, or callbacks the user writes: no wrapper.
SKIP = re.compile(r"^MPI_(T_|.*_(c2f|f2c|c2f08|f082c|f082f|f2f08|toint|fromint)$|"
                  r"Status_(f2c|c2f)$|F_sync_reg$|Sizeof$|Abi_)")
# How many datatypes the alltoallw-shaped calls take (the description says '*').
# 0: the communicator's (remote) size; 1: the neighbourhood's out-degree (send types) and
# in-degree (receive types).
TYPE_COUNTS = {
    "MPI_Alltoallw": 0, "MPI_Ialltoallw": 0, "MPI_Alltoallw_init": 0,
    "MPI_Neighbor_alltoallw": 1, "MPI_Ineighbor_alltoallw": 1, "MPI_Neighbor_alltoallw_init": 1,
}
# Choice-buffer kinds (a Fortran variable of any type: its address is the buffer).
BUFFER_KINDS = {"BUFFER", "C_BUFFER2", "C_BUFFER3", "C_BUFFER4", "LOGICAL_VOID"}
# Sentinel-carrying integer arrays, by parameter name.
INT_SENTINELS = {"sourceweights": "RMCAF_WEIGHTS", "destweights": "RMCAF_WEIGHTS",
                 "weights": "RMCAF_WEIGHTS", "array_of_errcodes": "RMCAF_ERRCODES"}


# ---------------------------------------------------------------- reading the inputs

def parse_header(text):
    """Prototypes {name: (ret, [(ctype, name, is_array)])} and constants."""
    protos = {}
    for m in re.finditer(r"^(\w[\w ]*?\**) ?\b(MPI_\w+)\(([^)]*)\);", text, re.M):
        ret, name, params = m.group(1).strip(), m.group(2), m.group(3).strip()
        plist = []
        if params and params != "void":
            for p in params.split(","):
                p = p.strip()
                if p == "...":
                    plist.append(("...", "varargs", False))
                    continue
                arr = p.endswith("]")
                if p.endswith("[][3]"):
                    arr = "3"
                p = re.sub(r"(\[\w*\])+$", "", p)
                pm = re.match(r"(.*?)(\w+)$", p)
                if pm is None:
                    raise SystemExit(f"cannot parse parameter {p!r} of {name}")
                ctype = pm.group(1).replace(" ", "").replace("const", "const ")
                plist.append((ctype.strip(), pm.group(2), arr))
        protos[name] = (ret, plist)
    consts = {}
    for m in re.finditer(r"^#define (MPI_\w+) \(\((MPI_\w+)\)(0x[0-9a-fA-F]+)\)", text, re.M):
        if m.group(2) in HANDLES:
            consts[m.group(1)] = ("handle", m.group(2), int(m.group(3), 16))
    for m in re.finditer(r"^#define (MPI_\w+) (MPI_\w+)$", text, re.M):
        if m.group(2) in consts:
            consts[m.group(1)] = consts[m.group(2)]
    for m in re.finditer(r"^#define (MPI_\w+) (-?\d+)$", text, re.M):
        consts[m.group(1)] = ("int", None, int(m.group(2)))
    for body in re.findall(r"enum\s*(?:\w+\s*)?\{([^}]*)\}", text):
        for m in re.finditer(r"(MPI_\w+)\s*=\s*(-?(?:0x[0-9a-fA-F]+|\d+))", body):
            consts.setdefault(m.group(1), ("int", None, int(m.group(2), 0)))
    m = re.search(r"#define MPI_DISPLACEMENT_CURRENT \(\(MPI_Offset\)(-?\d+)\)", text)
    consts["MPI_DISPLACEMENT_CURRENT"] = ("offset", None, int(m.group(1)))
    consts = {k: v for k, v in consts.items()
              if not re.match(r"MPI_(T_|F_|ABI_)", k) and not k.startswith("MPI_MAX_STRINGTAG")}
    return protos, consts


class Param:
    """One parameter of a call, C and Fortran facts joined."""

    def __init__(self, ctype, name, arr, api):
        self.ctype, self.name, self.arr = ctype, name, arr
        self.api = api or {}
        self.kind = self.api.get("kind", "")
        self.dir = self.api.get("param_direction", "in")
        self.length = self.api.get("length")
        self.base = ctype.replace("const ", "").rstrip("*").strip()
        self.ptr = ctype.endswith("*")
        self.is_array = arr or (self.length not in (None, "") and self.kind not in (
            "STRING", "STATUS") and self.ptr) or (self.kind == "STATUS" and self.length)

    @property
    def fname(self):
        return "index" if self.name == "indx" else self.name


def load():
    text = open(MPI_H).read()
    protos, consts = parse_header(text)
    api = json.load(open(API))
    return protos, consts, api


def api_params(api_proc, large):
    out = []
    for p in api_proc["parameters"]:
        if p["large_only"] and not large:
            continue
        out.append(p)
    return out


def join(name, cproto, api_proc, large):
    """Parameters of `name`: (C params joined with their description, ierror optional?)."""
    ret, cparams = cproto
    by_name = {p["name"]: p for p in api_params(api_proc, large)}
    params = []
    for ctype, pname, arr in cparams:
        a = by_name.get("index" if pname == "indx" else pname)
        params.append(Param(ctype, pname, arr, a))
    return ret, params


# ---------------------------------------------------------------- the C wrappers

def f2c(ctype):
    """The conversion of a Fortran INTEGER handle of C type `ctype` (rmcaf.h): requests go
    through the library (their generation), other handles are their integers."""
    return "MPI_Request_fromint" if ctype == "MPI_Request" else f"RMCAF_F2C_{ctype[4:].upper()}"


def c2f(ctype):
    return "MPI_Request_toint" if ctype == "MPI_Request" else "RMCAF_C2F"


def c_wrapper(cname, sym, ret, params, large):
    """The C text of one Fortran-callable wrapper, or None if the rules cannot express it."""
    args, pre, call, post, strlens = [], [], [], [], []
    if ret != "int":
        return None
    for p in params:
        n = p.name
        if p.ctype == "...":
            return None
        if p.kind in ("FUNCTION", "POLYFUNCTION", "FUNCTION_SMALL", "EXTRA_STATE",
                      "ATTRIBUTE_VAL", "ATTRIBUTE_VAL_10", "STRING_ARRAY", "STRING_2DARRAY",
                      "ARGUMENT_LIST", "ARGUMENT_COUNT", "EVENT_CB_FUNCTION"):
            return None
        if p.base == "void" and p.ptr:
            args.append(f"void *{n}")
            call.append(f"RMCAF_BUF({n})" if p.kind in BUFFER_KINDS else n)
        elif p.base == "MPI_Status":
            args.append(f"MPI_Fint *{n}")
            call.append(f"RMCAF_STATUSES({n})" if p.is_array else f"RMCAF_STATUS({n})")
        elif p.base == "char" and (p.ctype.count("*") + bool(p.arr)) == 1:
            args.append(f"char *{n}")
            strlens.append(f"size_t {n}_len")
            if p.ctype.startswith("const") or p.dir == "in":
                pre.append(f"char *c_{n} = rmcaf_str_in({n}, {n}_len);")
                call.append(f"c_{n}")
                post.append(f"free(c_{n});")
            else:
                pre.append(f"char *c_{n} = rmcaf_str_tmp({n}_len);")
                call.append(f"c_{n}")
                # Only a string the library wrote: MPI_Info_get leaves the program's value
                # alone when the key is not there (flag false).
                cond = "rc == MPI_SUCCESS" + (" && *flag" if any(
                    q.name == "flag" for q in params) else "")
                post.append(f"if ({cond}) rmcaf_str_out({n}, {n}_len, c_{n});")
                post.append(f"free(c_{n});")
        elif p.base == "char":
            return None
        elif p.base in HANDLES:
            h = HANDLES[p.base]
            args.append(f"MPI_Fint *{n}")
            if not p.ptr and not p.arr:
                pre.append(f"{p.base} c_{n} = {f2c(p.base)}(*{n});")
                call.append(f"c_{n}")
            elif p.is_array:
                if p.length == "*":
                    which = TYPE_COUNTS.get(cname.removesuffix("_c"))
                    if which is None:
                        return None
                    which += 1 if which and n.startswith("recv") else 0
                    length = f"rmcaf_peer_count(MPI_Comm_fromint(*comm), {which})"
                else:
                    length = re.sub(r"\b([a-z_]+)\b", lambda m: f"(*{m.group(1)})", p.length)
                pre.append(f"int n_{n} = {length};")
                pre.append(f"{p.base} s_{n}[RMCAF_STACK], *c_{n} = "
                           f"n_{n} > RMCAF_STACK ? malloc(sizeof({p.base}) * (size_t)n_{n}) : s_{n};")
                pre.append(f"if (c_{n} == NULL) {{ if (ierr) *ierr = MPI_ERR_NO_MEM; return; }}")
                if p.dir in ("in", "inout"):
                    pre.append(f"for (int i = 0; i < n_{n}; i++) c_{n}[i] = {f2c(p.base)}({n}[i]);")
                call.append(f"c_{n}")
                if p.dir in ("out", "inout"):
                    post.append(f"for (int i = 0; i < n_{n}; i++) {n}[i] = {c2f(p.base)}(c_{n}[i]);")
                post.append(f"if (c_{n} != s_{n}) free(c_{n});")
            else:
                pre.append(f"{p.base} c_{n} = {f2c(p.base)}(*{n});")
                call.append(f"&c_{n}")
                post.append(f"*{n} = {c2f(p.base)}(c_{n});")
        elif p.base in INTLIKE:
            t = "MPI_Fint" if p.base == "int" else p.base
            args.append(f"{t} *{n}")
            if p.ptr or p.arr:
                if n in INT_SENTINELS:
                    call.append(f"{INT_SENTINELS[n]}({n})")
                elif p.arr == "3":
                    call.append(f"(int (*)[3]){n}")
                else:
                    call.append(n)
                # Request indices are 1-based in Fortran.
                if p.kind == "INDEX" and p.dir == "out" and re.search(r"(any|some)$", cname):
                    if p.is_array:
                        post.append(f"if (rc == MPI_SUCCESS && *outcount != MPI_UNDEFINED) "
                                    f"for (int i = 0; i < *outcount; i++) {n}[i] += 1;")
                    else:
                        post.append(f"if (rc == MPI_SUCCESS && *{n} >= 0) *{n} += 1;")
            else:
                call.append(f"*{n}")
        else:
            return None
    body = []
    sig = ", ".join(args + ["MPI_Fint *ierr"] + strlens)
    body.append(f"static void {sym}({sig})")
    body.append("{")
    body.extend("    " + s for s in pre)
    if not post:
        # Nothing to do after the call: without IERROR (optional in mpi_f08) the wrapper
        # ends in a tail call of the C function (RMCAF_RETURN, src/rmcaf.h).
        body.append(f"    RMCAF_RETURN(ierr, {cname}({', '.join(call)}));")
        body.append("}")
        return "\n".join(body)
    body.append(f"    int rc = {cname}({', '.join(call)});")
    body.extend("    " + s for s in post)
    body.append("    if (ierr) *ierr = rc;")
    body.append("}")
    return "\n".join(body)


def aliases(sym, fname, f08, f08c):
    """Exported names of one wrapper: mpi_x_, pmpi_x_, and the f08 specific names."""
    names = []
    if f08c:
        names += [f"mpi_{fname}_f08c_", f"pmpi_{fname}_f08c_"]
    else:
        names += [f"mpi_{fname}_", f"pmpi_{fname}_"]
        if f08:
            names += [f"mpi_{fname}_f08_", f"pmpi_{fname}_f08_"]
    return "\n".join(f'RMCAF_ALIAS({n}, {sym})' for n in names)


# ---------------------------------------------------------------- Fortran declarations

def ftype(p, lang, large, cptr=False):
    """The Fortran type of parameter p for `lang` ('f90' or 'f08'); `cptr`: the `use mpi`
    form of an address output that takes a TYPE(C_PTR)."""
    k = p["kind"]
    if k in BUFFER_KINDS:
        return "buffer"
    if k in ("FUNCTION", "POLYFUNCTION", "FUNCTION_SMALL"):
        return "external"
    if k == "C_BUFFER":
        return "type(c_ptr)" if lang == "f08" or cptr else "integer(kind=MPI_ADDRESS_KIND)"
    if k == "STATUS":
        return "status"
    if k in ("STRING", "STRING_ARRAY", "STRING_2DARRAY"):
        return "character(len=*)"
    kinds = API_KINDS[k]
    t = kinds["f08_large"] if (large and kinds.get("f08_large")) else kinds[lang if lang == "f08" else "f90"]
    if t is None:
        return None
    t = t.strip()
    if lang == "f90" and t.startswith("TYPE(MPI_"):
        t = "INTEGER"
    return t.lower().replace("mpi_address_kind", "MPI_ADDRESS_KIND").replace(
        "mpi_count_kind", "MPI_COUNT_KIND").replace("mpi_offset_kind", "MPI_OFFSET_KIND").replace(
        "type(mpi_", "type(MPI_").replace("double precision", "double precision")


def dims(p, lang):
    length = p["length"]
    if p["kind"] == "STATUS":
        if length:
            return "(MPI_STATUS_SIZE,*)" if lang == "f90" else "(*)"
        return "(MPI_STATUS_SIZE)" if lang == "f90" else ""
    if p["kind"] in ("STRING", "BUFFER") or p["kind"] in BUFFER_KINDS:
        return ""
    if isinstance(length, list):
        return "(3,*)"
    if p["kind"] == "STRING_2DARRAY":
        return "(count,*)"
    if length or p["name"].startswith("array_of_"):
        return "(*)"
    return ""


def fortran_interface(name, specific, api_proc, lang, large, ret_kind, cptr=False):
    """One interface body. lang f90: `use mpi`; f08: `use mpi_f08` (optional ierror)."""
    params = [p for p in api_params(api_proc, large)
              if "f90_parameter" not in (p.get("suppress") or "")
              or lang == "f08"]
    params = [p for p in params if "f08_parameter" not in (p.get("suppress") or "")
              or lang == "f90"]
    names = [p["name"] for p in params]
    lines = []
    fn = ret_kind not in ("ERROR_CODE", "NOTHING")
    if fn:
        rt = API_KINDS[ret_kind]["f08" if lang == "f08" else "f90"].lower()
        rt = rt.replace("mpi_address_kind", "MPI_ADDRESS_KIND")
        lines.append(f"function {specific}({', '.join(names)}) result(res)")
    else:
        lines.append(f"subroutine {specific}({', '.join(names)})")
    lines.append("  import")
    lines.append("  implicit none")
    for p in params:
        t = ftype(p, lang, large, cptr)
        if t is None:
            return None
        d = dims(p, lang)
        n = p["name"]
        intent = {"in": "intent(in)", "out": "intent(out)", "inout": "intent(inout)"}[
            p["param_direction"]]
        if t == "buffer":
            lines.append(f"  !GCC$ ATTRIBUTES NO_ARG_CHECK :: {n}")
            lines.append(f"  type(*), dimension(*) :: {n}")
            continue
        if t == "external":
            lines.append(f"  external :: {n}")
            continue
        if t == "status":
            t = "integer" if lang == "f90" else "type(MPI_Status)"
        if p["kind"] in ("STRING_ARRAY", "STRING_2DARRAY"):
            d = d or "(*)"
            intent = "intent(in)"
        if p["kind"] == "C_BUFFER":
            intent = ""
        if n == "ierror":
            opt = "optional, " if lang == "f08" else ""
            lines.append(f"  integer, {opt}intent(out) :: ierror")
            continue
        attrs = ", ".join(x for x in (t, intent) if x)
        lines.append(f"  {attrs} :: {n}{d}")
    if fn:
        lines.append(f"  {rt} :: res")
        lines.append(f"end function {specific}")
    else:
        lines.append(f"end subroutine {specific}")
    return lines


API_KINDS = {}


# ---------------------------------------------------------------- constants

SENTINELS = [
    # (Fortran name, common block, f90 declaration, f08 declaration). The buffer addresses
    # share one block, as do the two status ones (in this order, the same sizes in all three
    # interfaces): a wrapper tells them from a program's own addresses with one range check
    # (src/rmcaf.h).
    ("MPI_BOTTOM", "rmcaf_buf", "integer", "integer"),
    ("MPI_IN_PLACE", "rmcaf_buf", "integer", "integer"),
    ("MPI_BUFFER_AUTOMATIC", "rmcaf_buf", "integer", "integer"),
    ("MPI_STATUS_IGNORE", "rmcaf_status", "integer {}(MPI_STATUS_SIZE)",
     "type(MPI_Status) {}"),
    ("MPI_STATUSES_IGNORE", "rmcaf_status", "integer {}(MPI_STATUS_SIZE,1)",
     "type(MPI_Status) {}(1)"),
    ("MPI_ERRCODES_IGNORE", "rmcaf_errcodes_ignore", "integer {}(1)", "integer {}(1)"),
    ("MPI_UNWEIGHTED", "rmcaf_unweighted", "integer {}(1)", "integer {}(1)"),
    ("MPI_WEIGHTS_EMPTY", "rmcaf_weights_empty", "integer {}(1)", "integer {}(1)"),
    ("MPI_ARGV_NULL", "rmcaf_argv_null", "character*1 {}(1)", "character(len=1) {}(1)"),
    ("MPI_ARGVS_NULL", "rmcaf_argvs_null", "character*1 {}(1,1)", "character(len=1) {}(1,1)"),
]
PREDEFINED_FNS = [
    "MPI_NULL_COPY_FN", "MPI_DUP_FN", "MPI_NULL_DELETE_FN", "MPI_COMM_NULL_COPY_FN",
    "MPI_COMM_DUP_FN", "MPI_COMM_NULL_DELETE_FN", "MPI_TYPE_NULL_COPY_FN", "MPI_TYPE_DUP_FN",
    "MPI_TYPE_NULL_DELETE_FN", "MPI_WIN_NULL_COPY_FN", "MPI_WIN_DUP_FN",
    "MPI_WIN_NULL_DELETE_FN", "MPI_CONVERSION_FN_NULL",
]
FORTRAN_INTS = [
    ("MPI_STATUS_SIZE", 8), ("MPI_SOURCE", 1), ("MPI_TAG", 2), ("MPI_ERROR", 3),
    ("MPI_ADDRESS_KIND", 8), ("MPI_OFFSET_KIND", 8), ("MPI_COUNT_KIND", 8),
    ("MPI_INTEGER_KIND", 4),
]
FORTRAN_LOGICALS = [("MPI_SUBARRAYS_SUPPORTED", False), ("MPI_ASYNC_PROTECTS_NONBLOCKING", False)]


def const_items(consts):
    """(name, kind, handle type, value) in a stable order."""
    out = []
    for name in sorted(consts):
        kind, htype, value = consts[name]
        if name in dict(FORTRAN_INTS):
            continue
        out.append((name, kind, htype, value))
    return out


def mpif_h(consts, functions):
    lines = ["! mpif.h: rmca's MPI constants for Fortran (include 'mpif.h').",
             "! Generated by bindings/fortran/gen/generate.py from mpi.h: do not edit.",
             "! Valid in fixed and free source form."]
    for n, v in FORTRAN_INTS:
        lines += [f"      INTEGER {n}", f"      PARAMETER ({n}={v})"]
    for n, v in FORTRAN_LOGICALS:
        lines += [f"      LOGICAL {n}", f"      PARAMETER ({n}=.{str(v).upper()}.)"]
    for name, kind, _, value in const_items(consts):
        t = "INTEGER(KIND=MPI_OFFSET_KIND)" if kind == "offset" else "INTEGER"
        lines += [f"      {t} {name}", f"      PARAMETER ({name}={value})"]
    for name, common, f90, _ in SENTINELS:
        decl = f90.format(name) if "{}" in f90 else f"{f90} {name}"
        lines.append(f"      {decl.upper()}")
    for common, names in commons():
        lines.append(f"      COMMON /{common}/ {', '.join(names)}")
    for name in PREDEFINED_FNS:
        lines.append(f"      EXTERNAL {name}")
    for name, rtype in functions:
        lines += [f"      {rtype.upper()} {name.upper()}", f"      EXTERNAL {name.upper()}"]
        lines += [f"      {rtype.upper()} P{name.upper()}", f"      EXTERNAL P{name.upper()}"]
    for line in lines:
        assert len(line) <= 72, line
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- main

def generate():
    protos, consts, api = load()
    API_KINDS.update(api["kinds"])
    procs = api["procedures"]
    wrappers, exports, missing = [], [], []
    f90_ifaces, f08_ifaces, f90_generics = [], [], []
    functions = []  # (name, Fortran type) of calls that return a value
    f08_names = []
    for name in sorted(procs, key=str.lower):
        ap = procs[name]
        at = ap["attributes"]
        if at["callback"] or at["predefined_function"] or SKIP.match(name):
            continue
        if not (at["f90_expressible"] or at["f08_expressible"]):
            continue
        if name not in protos:
            missing.append(name)
            continue
        fname = name[4:].lower()
        # C wrappers: the normal form, and the large-count form for f08.
        forms = [(name, False)]
        large_name = name + "_c"
        if large_name in protos and distinguishable(ap):
            forms.append((large_name, True))
        f08_specifics = []
        for cname, large in forms:
            ret, params = join(cname, protos[cname], ap, large)
            sym = f"rmcaf_{fname}" + ("_c" if large else "")
            if not (name in HANDWRITTEN and not large):
                text = c_wrapper(cname, sym, ret, params, large)
                if text is None:
                    if large:
                        continue
                    text = unsupported_wrapper(cname, sym, params)
                    if text is None:
                        missing.append(name)
                        continue
                wrappers.append(text)
                exports.append(aliases(sym, fname, at["f08_expressible"], large))
            if at["f08_expressible"]:
                spec = name + ("_f08c" if large else "_f08")
                body = fortran_interface(name, spec, ap, "f08", large, ap["return_kind"])
                if body is not None:
                    f08_specifics.append(body)
        if at["f90_expressible"] and not at["not_with_mpif"]:
            body = fortran_interface(name, name, ap, "f90", False, ap["return_kind"])
            if body is not None:
                f90_ifaces.append(body)
            if any(p["kind"] == "C_BUFFER" for p in ap["parameters"]):
                # `use mpi` takes the address output as INTEGER(KIND=MPI_ADDRESS_KIND) or
                # TYPE(C_PTR) (MPI 5.0 section 19.1.2): a generic of two specifics.
                f90_generics.append((name, [body, fortran_interface(
                    name, name + "_cptr", ap, "f90", False, ap["return_kind"], cptr=True)]))
                f90_ifaces.pop()
                exports.append(f"RMCAF_ALIAS(mpi_{fname}_cptr_, rmcaf_{fname})")
            if ap["return_kind"] not in ("ERROR_CODE", "NOTHING"):
                functions.append((name, API_KINDS[ap["return_kind"]]["f90"]))
                # The profiling name too (PMPI_Wtime ...).
                f90_ifaces.append([line.replace(name, "P" + name) for line in body])
        if f08_specifics:
            f08_names.append(name)
            f08_ifaces.append((name, f08_specifics, ap["return_kind"]))
    c_text = C_HEAD + "\n\n".join(wrappers) + "\n\n/* Exported names. */\n" + \
        "\n".join(exports) + "\n"
    files = {
        os.path.join(OUT, "src", "wrappers.c"): c_text,
        os.path.join(OUT, "include", "mpif.h"): mpif_h(consts, functions),
        os.path.join(OUT, "src", "mpi.f90"): mpi_module(consts, f90_ifaces, f90_generics),
        os.path.join(OUT, "src", "mpi_f08.f90"): f08_module(consts, f08_ifaces),
    }
    return files, missing


def distinguishable(ap):
    """Whether the large-count form differs from the normal one in a Fortran kind (so both
    can be specifics of one generic)."""
    for p in ap["parameters"]:
        k = API_KINDS.get(p["kind"], {})
        small, large = k.get("f08"), k.get("f08_large")
        if large and small and small.strip() == "INTEGER" and "KIND" in large:
            return True
    return False


def unsupported_wrapper(cname, sym, params):
    """A call the C library refuses (MPI-IO, dynamic processes) whose arguments the rules
    cannot translate: the C function is called with its handles translated and every other
    pointer NULL, so it raises MPI_ERR_UNSUPPORTED_OPERATION on the same error handler."""
    if cname not in UNSUPPORTED:
        return None
    args, call, strlens = [], [], []
    for p in params:
        n = p.name
        if p.ctype == "...":
            return None
        if p.base in HANDLES and not p.ptr and not p.arr:
            args.append(f"MPI_Fint *{n}")
            call.append(f"{f2c(p.base)}(*{n})")
            continue
        if p.base == "char" and p.ctype.count("*") == 1 and not p.arr:
            strlens.append(f"size_t {n}_len")
        args.append(f"void *{n}")
        if p.ptr or p.arr:
            call.append("NULL")
        else:
            call.append("0")
    sig = ", ".join(args + ["MPI_Fint *ierr"] + strlens)
    return "\n".join([
        f"static void {sym}({sig})", "{",
        *[f"    (void){p.name};" for p in params if not (p.base in HANDLES and not p.ptr and not p.arr)],
        *[f"    (void){s.split()[1]};" for s in strlens],
        f"    int rc = {cname}({', '.join(call)});",
        "    if (ierr) *ierr = rc;", "}"])


UNSUPPORTED = set()


def read_unsupported():
    path = os.path.join(ROOT, "bindings", "c", "src", "ffi", "unsupported.rs")
    UNSUPPORTED.update(re.findall(r"\b(MPI_\w+)\b", open(path).read()))


C_HEAD = """/* The Fortran-callable wrappers of rmca's MPI library (libmpifort).
 * Generated by bindings/fortran/gen/generate.py from bindings/c/include/mpi.h and
 * gen/api.json: do not edit. Hand-written helpers and calls: runtime.c. */
#include "rmcaf.h"

"""


def iface_block(lines, indent):
    return [indent + line for line in lines]


def const_decls(consts, lang):
    out = []
    for n, v in FORTRAN_INTS:
        out.append(f"integer, parameter :: {n} = {v}")
    for n, v in FORTRAN_LOGICALS:
        out.append(f"logical, parameter :: {n} = .{str(v).lower()}.")
    for name, kind, htype, value in const_items(consts):
        if kind == "offset":
            out.append(f"integer(kind=MPI_OFFSET_KIND), parameter :: {name} = {value}")
        elif kind == "handle" and lang == "f08":
            out.append(f"type({htype}), parameter :: {name} = {htype}({value})")
        else:
            out.append(f"integer, parameter :: {name} = {value}")
    for name, common, f90, f08 in SENTINELS:
        decl = f90 if lang == "f90" else f08
        decl = decl.format(name) if "{}" in decl else f"{decl} {name}"
        out.append(decl.replace(" " + name, " :: " + name, 1))
    for common, names in commons():
        out.append(f"common /{common}/ {', '.join(names)}")
    return out


def commons():
    """The common blocks of SENTINELS, each with its members in order."""
    blocks = {}
    for name, common, _, _ in SENTINELS:
        blocks.setdefault(common, []).append(name)
    return list(blocks.items())


def mpi_module(consts, ifaces, generics):
    lines = ["! The `mpi` module of rmca's MPI library: constants and explicit interfaces.",
             "! Generated by bindings/fortran/gen/generate.py: do not edit.",
             "module mpi", "  use, intrinsic :: iso_c_binding, only : c_ptr",
             "  implicit none", "  public", "  private :: c_ptr"]
    lines += ["  " + s for s in const_decls(consts, "f90")]
    lines += ["  external :: " + ", ".join(PREDEFINED_FNS[i:i + 4])
              for i in range(0, len(PREDEFINED_FNS), 4)]
    lines.append("  interface")
    for body in ifaces:
        lines += iface_block(body, "    ")
    lines.append("  end interface")
    for name, bodies in generics:
        lines.append(f"  interface {name}")
        for body in bodies:
            lines += iface_block(body, "    ")
        lines.append(f"  end interface {name}")
    lines += ["  interface MPI_Sizeof"] + [
        f"    module procedure rmcaf_sizeof_{t}" for t, _ in SIZEOF_TYPES] + ["  end interface"]
    lines.append("contains")
    lines += sizeof_procs("")
    lines.append("end module mpi")
    return "\n".join(lines) + "\n"


SIZEOF_TYPES = [("i1", "integer(kind=1)"), ("i2", "integer(kind=2)"), ("i4", "integer(kind=4)"),
                ("i8", "integer(kind=8)"), ("r4", "real(kind=4)"), ("r8", "real(kind=8)"),
                ("c4", "complex(kind=4)"), ("c8", "complex(kind=8)"), ("l4", "logical(kind=4)"),
                ("l1", "logical(kind=1)"), ("ch", "character(len=*)")]


def sizeof_procs(suffix):
    out = []
    for t, decl in SIZEOF_TYPES:
        out += [f"  subroutine rmcaf_sizeof_{t}(x, size, ierror)",
                f"    {decl}, dimension(..), intent(in) :: x",
                "    integer, intent(out) :: size",
                "    integer, " + ("optional, " if suffix == "f08" else "") + "intent(out) :: ierror",
                "    size = int(storage_size(x) / 8)" if t != "ch" else "    size = len(x)",
                "    " + ("if (present(ierror)) " if suffix == "f08" else "") + "ierror = 0",
                f"  end subroutine rmcaf_sizeof_{t}"]
    return out


F08_CALLBACKS = """  abstract interface
    subroutine MPI_User_function(invec, inoutvec, len, datatype)
      use, intrinsic :: iso_c_binding, only : c_ptr
      import :: MPI_Datatype
      type(c_ptr), value :: invec, inoutvec
      integer :: len
      type(MPI_Datatype) :: datatype
    end subroutine
    subroutine MPI_Comm_errhandler_function(comm, error_code)
      import :: MPI_Comm
      type(MPI_Comm) :: comm
      integer :: error_code
    end subroutine
    subroutine MPI_Win_errhandler_function(win, error_code)
      import :: MPI_Win
      type(MPI_Win) :: win
      integer :: error_code
    end subroutine
    subroutine MPI_File_errhandler_function(file, error_code)
      import :: MPI_File
      type(MPI_File) :: file
      integer :: error_code
    end subroutine
    subroutine MPI_Session_errhandler_function(session, error_code)
      import :: MPI_Session
      type(MPI_Session) :: session
      integer :: error_code
    end subroutine
    subroutine MPI_Comm_copy_attr_function(oldcomm, comm_keyval, extra_state, &
        attribute_val_in, attribute_val_out, flag, ierror)
      import :: MPI_Comm, MPI_ADDRESS_KIND
      type(MPI_Comm) :: oldcomm
      integer :: comm_keyval, ierror
      integer(kind=MPI_ADDRESS_KIND) :: extra_state, attribute_val_in, attribute_val_out
      logical :: flag
    end subroutine
    subroutine MPI_Comm_delete_attr_function(comm, comm_keyval, attribute_val, &
        extra_state, ierror)
      import :: MPI_Comm, MPI_ADDRESS_KIND
      type(MPI_Comm) :: comm
      integer :: comm_keyval, ierror
      integer(kind=MPI_ADDRESS_KIND) :: attribute_val, extra_state
    end subroutine
    subroutine MPI_Type_copy_attr_function(oldtype, type_keyval, extra_state, &
        attribute_val_in, attribute_val_out, flag, ierror)
      import :: MPI_Datatype, MPI_ADDRESS_KIND
      type(MPI_Datatype) :: oldtype
      integer :: type_keyval, ierror
      integer(kind=MPI_ADDRESS_KIND) :: extra_state, attribute_val_in, attribute_val_out
      logical :: flag
    end subroutine
    subroutine MPI_Type_delete_attr_function(datatype, type_keyval, attribute_val, &
        extra_state, ierror)
      import :: MPI_Datatype, MPI_ADDRESS_KIND
      type(MPI_Datatype) :: datatype
      integer :: type_keyval, ierror
      integer(kind=MPI_ADDRESS_KIND) :: attribute_val, extra_state
    end subroutine
    subroutine MPI_Win_copy_attr_function(oldwin, win_keyval, extra_state, &
        attribute_val_in, attribute_val_out, flag, ierror)
      import :: MPI_Win, MPI_ADDRESS_KIND
      type(MPI_Win) :: oldwin
      integer :: win_keyval, ierror
      integer(kind=MPI_ADDRESS_KIND) :: extra_state, attribute_val_in, attribute_val_out
      logical :: flag
    end subroutine
    subroutine MPI_Win_delete_attr_function(win, win_keyval, attribute_val, &
        extra_state, ierror)
      import :: MPI_Win, MPI_ADDRESS_KIND
      type(MPI_Win) :: win
      integer :: win_keyval, ierror
      integer(kind=MPI_ADDRESS_KIND) :: attribute_val, extra_state
    end subroutine
  end interface
"""


def f08_module(consts, ifaces):
    htypes = sorted(HANDLES)
    lines = ["! The `mpi_f08` module of rmca's MPI library: handle types, constants, interfaces.",
             "! Generated by bindings/fortran/gen/generate.py: do not edit.",
             "module mpi_f08", "  use, intrinsic :: iso_c_binding, only : c_ptr",
             "  implicit none", "  public", "  private :: c_ptr"]
    for t in htypes:
        lines += [f"  type, bind(C) :: {t}", "    integer :: MPI_VAL", f"  end type {t}"]
    lines += ["  type, bind(C) :: MPI_Status",
              "    integer :: MPI_SOURCE, MPI_TAG, MPI_ERROR",
              "    integer :: MPI_internal(5)", "  end type MPI_Status"]
    lines += ["  " + s for s in const_decls(consts, "f08")]
    lines.append(F08_CALLBACKS.rstrip("\n"))
    lines += ["  external :: " + ", ".join(PREDEFINED_FNS[i:i + 4])
              for i in range(0, len(PREDEFINED_FNS), 4)]
    lines.append("  interface operator(==)")
    lines += [f"    module procedure rmcaf_eq_{t[4:].lower()}" for t in htypes]
    lines.append("  end interface")
    lines.append("  interface operator(/=)")
    lines += [f"    module procedure rmcaf_ne_{t[4:].lower()}" for t in htypes]
    lines.append("  end interface")
    for name, specifics, ret_kind in ifaces:
        if ret_kind not in ("ERROR_CODE", "NOTHING"):
            # A function: one specific, not generic, under the standard's name.
            lines.append("  interface")
            body = [l.replace(name + "_f08", name) for l in specifics[0]]
            lines += iface_block(body, "    ")
            lines += iface_block([l.replace(name, "P" + name) for l in body], "    ")
            lines.append("  end interface")
            continue
        lines.append(f"  interface {name}")
        for body in specifics:
            lines += iface_block(body, "    ")
        lines.append(f"  end interface {name}")
    lines += ["  interface MPI_Sizeof"] + [
        f"    module procedure rmcaf_sizeof_{t}" for t, _ in SIZEOF_TYPES] + ["  end interface"]
    lines += ["  interface MPI_Status_f2f08", "    module procedure rmcaf_status_f2f08",
              "  end interface", "  interface MPI_Status_f082f",
              "    module procedure rmcaf_status_f082f", "  end interface"]
    lines.append("contains")
    for t in htypes:
        s = t[4:].lower()
        for op, sym in (("eq", "=="), ("ne", "/=")):
            lines += [f"  elemental logical function rmcaf_{op}_{s}(a, b)",
                      f"    type({t}), intent(in) :: a, b",
                      f"    rmcaf_{op}_{s} = a%MPI_VAL {sym} b%MPI_VAL",
                      f"  end function rmcaf_{op}_{s}"]
    lines += sizeof_procs("f08")
    lines += ["  subroutine rmcaf_status_f2f08(f_status, f08_status, ierror)",
              "    integer, intent(in) :: f_status(MPI_STATUS_SIZE)",
              "    type(MPI_Status), intent(out) :: f08_status",
              "    integer, optional, intent(out) :: ierror",
              "    f08_status%MPI_SOURCE = f_status(1)",
              "    f08_status%MPI_TAG = f_status(2)",
              "    f08_status%MPI_ERROR = f_status(3)",
              "    f08_status%MPI_internal = f_status(4:8)",
              "    if (present(ierror)) ierror = 0",
              "  end subroutine rmcaf_status_f2f08",
              "  subroutine rmcaf_status_f082f(f08_status, f_status, ierror)",
              "    type(MPI_Status), intent(in) :: f08_status",
              "    integer, intent(out) :: f_status(MPI_STATUS_SIZE)",
              "    integer, optional, intent(out) :: ierror",
              "    f_status(1) = f08_status%MPI_SOURCE",
              "    f_status(2) = f08_status%MPI_TAG",
              "    f_status(3) = f08_status%MPI_ERROR",
              "    f_status(4:8) = f08_status%MPI_internal",
              "    if (present(ierror)) ierror = 0",
              "  end subroutine rmcaf_status_f082f"]
    lines.append("end module mpi_f08")
    return "\n".join(wrap_long(l) for l in lines) + "\n"


def wrap_long(line):
    """Free-form lines stay under 132 characters: break argument lists with '&'."""
    if len(line) <= 120:
        return line
    indent = len(line) - len(line.lstrip())
    parts, cur = [], line
    while len(cur) > 120:
        cut = cur.rfind(", ", 0, 110) + 1
        if cut <= indent + 4:
            break
        parts.append(cur[:cut] + " &")
        cur = " " * (indent + 4) + cur[cut:].lstrip()
    parts.append(cur)
    return "\n".join(parts)


def main():
    read_unsupported()
    files, missing = generate()
    # mpi.f90 lines can be long too.
    path = os.path.join(OUT, "src", "mpi.f90")
    files[path] = "\n".join(wrap_long(l) for l in files[path].split("\n"))
    check = "--check" in sys.argv
    stale = []
    for path, text in files.items():
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            stale.append(os.path.relpath(path, ROOT))
            if not check:
                os.makedirs(os.path.dirname(path), exist_ok=True)
                open(path, "w").write(text)
    if missing:
        print("not reachable from Fortran (no C wrapper): " + ", ".join(missing),
              file=sys.stderr)
    if check and stale:
        print("stale generated files (run bindings/fortran/gen/generate.py): "
              + ", ".join(stale), file=sys.stderr)
        sys.exit(1)
    if not check:
        print(f"generated: {len(files)} files ({len(stale)} changed)")


if __name__ == "__main__":
    main()
