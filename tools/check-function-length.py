#!/usr/bin/env python3
"""No function longer than 60 lines in src/, cli/ and the Python package (its C++ module and python/fasa/), but
those the exceptions file names.

Lines as lizard (PyPI, pinned in python/requirements-test.txt) counts them: a function's first line to its
last, comments and the lambdas inside included. tools/function-length-exceptions.txt names each exception
with its reason: tables and data, and hot kernels kept one pass (the list may only shrink: an entry whose
function is gone or short again is reported too, so it is taken out). Run from the
repository root (the pytest in python/tests does); prints what it finds and exits 1 when there is any.
"""
import glob
import sys

import lizard

LIMIT = 60
SOURCES = ["src/**/*.cpp", "src/**/*.h", "cli/*.cpp", "cli/*.h", "python/fasa_module.cpp", "python/fasa/*.py"]
EXCEPTIONS = "tools/function-length-exceptions.txt"


def long_functions():
    """(path, name, lines) of every function over LIMIT lines."""
    for pattern in SOURCES:
        for path in sorted(glob.glob(pattern, recursive=True)):
            for f in lizard.analyze_file(path).function_list:
                if f.length > LIMIT:
                    yield path, f.name, f.length


def exceptions():
    """{(path, name): reason} from the exceptions file: `path name  # reason` per line."""
    out = {}
    for line in open(EXCEPTIONS, encoding="utf-8"):
        entry, _, reason = line.partition("#")
        if entry.strip():
            path, name = entry.split()
            out[(path, name)] = reason.strip()
    return out


def main():
    allowed = exceptions()
    found = {(path, name): lines for path, name, lines in long_functions()}
    problems = [f"{path}: {name} has {lines} lines (at most {LIMIT}; split it, or name it in {EXCEPTIONS} with why)"
                for (path, name), lines in sorted(found.items()) if (path, name) not in allowed]
    problems += [f"{EXCEPTIONS}: {path} {name} is no longer over {LIMIT} lines: take it out"
                 for (path, name) in sorted(allowed) if (path, name) not in found]
    for p in problems:
        print(p)
    print(f"{len(found)} functions over {LIMIT} lines, {len(allowed)} exceptions, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
