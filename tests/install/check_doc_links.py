#!/usr/bin/env python3
"""Checks that every relative link in Markdown files resolves.

    check_doc_links.py FILE.md...

A link [text](path), [text](path#anchor) or [text](#anchor) must name a file
or directory that exists (relative to the file that links), and an anchor
must be a heading of the target Markdown file (GitHub's slugs: lower case,
punctuation dropped, spaces to '-', repeats suffixed -1, -2, ...). Links
with a scheme (https:, mailto:) are not checked. Exit 1 naming every broken
link, 0 when all resolve.
"""
import os
import re
import sys

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading):
    s = heading.strip().lower()
    s = s.replace("`", "")
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path):
    seen = {}
    out = set()
    in_fence = False
    with open(path, encoding="utf-8") as f:
        for line in f:
            if FENCE.match(line):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
            if not m:
                continue
            base = slug(m.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path):
    in_fence = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            # Inline code is not a link.
            text = re.sub(r"`[^`]*`", "", line)
            for m in LINK.finditer(text):
                yield number, m.group(1) or m.group(2)


def main(files):
    broken = []
    for md in files:
        for number, target in links(md):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):
                continue
            path, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(md), path)) if path else md
            if not os.path.exists(dest):
                broken.append(f"{md}:{number}: {target}: no such file {dest}")
                continue
            if anchor and dest.endswith(".md") and os.path.isfile(dest):
                if anchor not in anchors(dest):
                    broken.append(f"{md}:{number}: {target}: no heading '#{anchor}' in {dest}")
    for b in broken:
        print(b)
    print(f"check_doc_links: {len(files)} files, {len(broken)} broken links")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
