#!/usr/bin/env python3
"""Every path the docs name exists: README.md, docs/*.md and the READMEs under tools/ and examples/.

Checked: markdown links to files of the repository (relative to the page), and code spans that start
with one of the repository's folders (`tools/...`, `src/...`; relative to the root). Not checked: spans
with a placeholder (`*`, `{}`, `<>`, `$`, a last name in capitals such as NAME.cpp) and what follows `:` or `(`
(`src/x.cpp:42`, `f(...)`). Run from the repository root (ctest does); prints each missing path with its
page and exits 1 when there is one.
"""
import glob
import os
import re
import sys

FOLDERS = ("src/", "cli/", "tests/", "tools/", "scripts/", "docs/", "examples/", "python/", "include/", "fuzz/",
           "cmake/", ".ci/")


def pages():
    return ["README.md"] + sorted(glob.glob("docs/*.md")) + sorted(glob.glob("tools/**/README.md", recursive=True)) + \
        sorted(glob.glob("examples/**/README.md", recursive=True))


def missing(page):
    text = open(page, encoding="utf-8").read()
    for m in re.finditer(r"\]\(([^)\s#]+)(#[^)]*)?\)", text):  # [text](path#anchor)
        target = m.group(1)
        if "://" not in target and not target.startswith("mailto:"):
            if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(page), target))):
                yield target
    for m in re.finditer(r"`([^`\s]+)`", text):
        span = re.sub(r"[:(].*$", "", m.group(1).rstrip(".,;"))
        if not span.startswith(FOLDERS) or os.path.exists(span):
            continue
        if not (re.search(r"[*{}<>$]", span) or re.fullmatch(r"[A-Z_]{3,}(\.\w+)?", span.rstrip("/").split("/")[-1])):
            yield span  # (a placeholder: a glob, or a name in capitals such as NAME.cpp)


def main():
    bad = [(page, path) for page in pages() for path in missing(page)]
    for page, path in bad:
        print(f"{page}: names {path}, which does not exist")
    print(f"{len(pages())} pages checked, {len(bad)} missing paths")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
