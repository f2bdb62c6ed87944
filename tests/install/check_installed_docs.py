#!/usr/bin/env python3
"""Every file the installed docs cite is installed.

    check_installed_docs.py PREFIX

PREFIX is an install (cmake --install BUILD --prefix PREFIX). The installed
docs are share/doc/conveyor/** and the headers under include/. A reader who
has only the install must find what they point at:
  * relative Markdown links and their anchors (check_doc_links.py's rules);
  * repository docs named in the text, docs/X.md or docs/design/X.md, which
    the install keeps as share/doc/conveyor/X.md and .../design/X.md;
  * bare Markdown file names (reference.md, conformance.md, ...), looked up
    in share/doc/conveyor and its subfolders;
  * install paths written out (bin/..., include/..., lib/..., share/...),
    with placeholders in capitals (NAME, PREFIX) skipped;
  * no test sources: tests/... and sdk/conformance/tests/... are not
    installed. (Source files named as where something lives in the source
    tree, core/src/..., are not citations of a document.)
Exit 1 naming each citation with its file and line, 0 when all resolve.
"""
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DOC_MENTION = re.compile(r"(?<![\w/.-])docs/([\w./-]+\.md)")
MD_NAME = re.compile(r"(?<![\w/.-])([\w-]+\.md)\b")
INSTALL_PATH = re.compile(r"(?<![\w/.-])((?:bin|include|lib|share)/[\w./+*-]*[\w+*-])")
TEST_SOURCE = re.compile(r"(?<![\w/.-])((?:tests|sdk/conformance/tests)/[\w./-]+)")


def installed_docs(prefix):
    out = []
    for root in ("share/doc/conveyor", "include"):
        for dirpath, _, names in os.walk(os.path.join(prefix, root)):
            for n in names:
                if n.endswith((".md", ".h", ".hpp", ".c", ".cc", ".txt")):
                    out.append(os.path.join(dirpath, n))
    return sorted(out)


def main(prefix):
    docdir = os.path.join(prefix, "share/doc/conveyor")
    files = installed_docs(prefix)
    if not any(f.endswith("writing-a-storage-plugin.md") for f in files):
        print(f"no writing-a-storage-plugin.md under {docdir}: is {prefix} an install?")
        return 1
    md_names = {}
    for dirpath, _, names in os.walk(docdir):
        for n in names:
            md_names.setdefault(n, os.path.join(dirpath, n))
    problems = []
    for path in files:
        rel = os.path.relpath(path, prefix)
        with open(path, encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                where = f"{rel}:{number}"
                for m in DOC_MENTION.finditer(line):
                    if not os.path.exists(os.path.join(docdir, m.group(1))):
                        problems.append(f"{where}: cites docs/{m.group(1)}, not installed "
                                        f"(share/doc/conveyor/{m.group(1)})")
                for m in MD_NAME.finditer(line):
                    name = m.group(1)
                    if name.isupper() or name in ("README.md",):
                        continue
                    if name not in md_names:
                        problems.append(f"{where}: names {name}, not installed in share/doc/conveyor")
                optional = "when built" in line  # e.g. conveyor-bench, not in every build
                for m in INSTALL_PATH.finditer(line):
                    p = m.group(1)
                    if re.search(r"[A-Z]{3,}|\*|\.\.\.", p) or "myqueue" in p:
                        continue  # a placeholder: NAME, PREFIX, a glob, the reader's own
                    if not optional and not os.path.exists(os.path.join(prefix, p)):
                        problems.append(f"{where}: names {p}, not in the install")
                for m in TEST_SOURCE.finditer(line):
                    problems.append(f"{where}: cites the source tree's {m.group(1)}, not installed")
    md_files = [f for f in files if f.endswith(".md")]
    links = subprocess.run([sys.executable, os.path.join(HERE, "check_doc_links.py"), *md_files],
                           capture_output=True, text=True)
    for line in links.stdout.splitlines():
        if not line.startswith("check_doc_links:"):
            problems.append(os.path.relpath(line, prefix) if line.startswith(prefix) else line)
    for p in problems:
        print(p)
    print(f"check_installed_docs: {len(files)} installed docs and headers, "
          f"{len(problems)} citation(s) of what is not installed")
    return 1 if problems else 0


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print(__doc__)
        sys.exit(2)
    sys.exit(main(os.path.abspath(sys.argv[1])))
