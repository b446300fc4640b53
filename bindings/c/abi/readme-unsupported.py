#!/usr/bin/env python3
"""Rewrite the README's list of the functions rmca does not implement yet (between the
`<!-- unsupported:start -->` and `<!-- unsupported:end -->` markers) from
bindings/c/src/ffi/unsupported.rs, grouped by chapter. tests/tests/c_abi.rs checks the two agree.
Usage (from the repository root): bindings/c/abi/readme-unsupported.py
"""
import re

GROUPS = [
    ("One-sided communication (issue 29)", r"^MPI_(Win_|Put|Get$|Get_c|Get_accumulate|Accumulate|Raccumulate|Rget|Rput|Fetch_and_op|Compare_and_swap)"),
    ("MPI-IO", r"^MPI_(File_|Register_datarep)"),
    ("Dynamic processes", r"^MPI_(Comm_spawn|Comm_accept|Comm_connect|Comm_disconnect|Comm_join|Comm_get_parent|Open_port|Close_port|Publish_name|Unpublish_name|Lookup_name)"),
    ("Tool interface", r"^MPI_T_"),
    ("Other", r"."),
]


def main():
    names = re.findall(r"^    (MPI_\w+)\(", open("bindings/c/src/ffi/unsupported.rs").read(), re.M)
    # The window calls a program makes first are refused by hand in info.rs (they also set
    # the window handle to MPI_WIN_NULL).
    names += re.findall(r'(?:on_window|refuse_window)\("(MPI_\w+)"', open("bindings/c/src/ffi/info.rs").read())
    names = sorted(set(names), key=str.lower)
    left, lines = list(names), []
    for title, pattern in GROUPS:
        mine = [n for n in left if re.search(pattern, n)]
        left = [n for n in left if n not in mine]
        if mine:
            lines.append(f"- {title} ({len(mine)}): " + ", ".join(f"`{n}`" for n in mine))
    readme = open("README.md").read()
    start = readme.index("<!-- unsupported:start -->") + len("<!-- unsupported:start -->")
    end = readme.index("<!-- unsupported:end -->")
    body = f"\n{len(names)} of the standard ABI's functions return `MPI_ERR_UNSUPPORTED_OPERATION`:\n\n" + "\n".join(lines) + "\n"
    open("README.md", "w").write(readme[:start] + body + readme[end:])
    print(f"README.md: {len(names)} functions listed")


if __name__ == "__main__":
    main()
