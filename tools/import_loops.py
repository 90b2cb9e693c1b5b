#!/usr/bin/env python3
"""Import loops between the modules of each crate (issue 19, item 4).

A crate's top-level modules (`src/saga.rs`, `src/instances/mod.rs`, ...)
are the nodes (loops inside one top-level module, between the files of a
directory module such as the gateway's `schema/`, are not seen yet); module A has an edge to module B when A's code names
`crate::B` (in a `use`, grouped `crate::{B, ...}`, or a path) or, from a
top-level file, `super::B`. The crate root (lib.rs, main.rs) is left out:
it re-exports, and `crate::Error` is not an import of every module. Test
modules at the end of a file (`#[cfg(test)] mod tests`) are left out too.

A loop is a strongly connected component of more than one module. The
loops that exist today are listed in tools/import_loops.baseline; this
check fails when a crate has a loop that is not inside one of them (a new
loop, or an old one that grew), and says which baseline loops are gone so
the baseline can shrink. `make lint` runs it.

    python3 tools/import_loops.py            # check
    python3 tools/import_loops.py --write    # rewrite the baseline
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / "tools" / "import_loops.baseline"
CRATE_DIRS = ["."] + [
    str(p.parent.relative_to(ROOT))
    for p in sorted(ROOT.glob("*/*/Cargo.toml"))
] + [str(p.parent.relative_to(ROOT)) for p in sorted(ROOT.glob("schema/Cargo.toml"))]

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"


def modules(src: Path) -> dict[str, list[Path]]:
    """Top-level module name -> its files (a directory module has many)."""
    found: dict[str, list[Path]] = {}
    for path in sorted(src.rglob("*.rs")):
        rel = path.relative_to(src)
        if rel.parts[0] in ("lib.rs", "main.rs") or rel.parts[0] == "bin":
            continue
        name = rel.parts[0].removesuffix(".rs")
        found.setdefault(name, []).append(path)
    return found


def without_tests(text: str) -> str:
    # Any test module (`mod tests`, `mod connection_tests`, with more
    # attributes between) up to the end of the file.
    m = re.search(r"#\[cfg\(test\)\]\s*(#\[[^\]]*\]\s*)*(pub\s+)?mod\s+\w+\s*\{", text)
    return text[: m.start()] if m else text


def without_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"//[^\n]*", "", text)


def named(text: str, prefix: str) -> set[str]:
    """First segments after `prefix::`, grouped imports included."""
    out: set[str] = set()
    for m in re.finditer(rf"\b{prefix}::(\{{|{IDENT})", text):
        if m.group(1) != "{":
            out.add(m.group(1))
            continue
        depth, i = 1, m.end()
        start = i
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        inner = text[start : i - 1]
        # Top-level items of the group: split at commas outside braces.
        depth, item = 0, ""
        for ch in inner + ",":
            if ch == "," and depth == 0:
                first = re.match(rf"\s*({IDENT})", item)
                if first:
                    out.add(first.group(1))
                item = ""
                continue
            depth += {"{": 1, "}": -1}.get(ch, 0)
            item += ch
    return out


def edges(src: Path) -> dict[str, set[str]]:
    mods = modules(src)
    graph: dict[str, set[str]] = {name: set() for name in mods}
    for name, files in mods.items():
        for path in files:
            text = without_comments(without_tests(path.read_text(encoding="utf-8")))
            targets = named(text, "crate")
            parts = path.relative_to(src).parts
            # In `src/x.rs` and `src/x/mod.rs`, `super` is the crate root.
            if len(parts) == 1 or (len(parts) == 2 and parts[1] == "mod.rs"):
                targets |= named(text, "super")
            graph[name] |= {t for t in targets if t in mods and t != name}
    return graph


def loops(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(out)


def current() -> list[tuple[str, list[str]]]:
    found = []
    for crate in CRATE_DIRS:
        src = ROOT / crate / "src"
        if src.is_dir():
            for component in loops(edges(src)):
                found.append((crate, component))
    return found


def read_baseline() -> list[tuple[str, set[str]]]:
    if not BASELINE.exists():
        return []
    out = []
    for line in BASELINE.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        crate, _, mods = line.partition(":")
        out.append((crate.strip(), set(mods.split())))
    return out


def main() -> int:
    found = current()
    if "--write" in sys.argv:
        lines = [
            "# Import loops that exist today (tools/import_loops.py): crate: modules.",
            "# `make lint` fails on any loop not inside one of these. Shrink it as",
            "# loops are untangled (issue 19); never grow it.",
        ]
        lines += [f"{crate}: {' '.join(mods)}" for crate, mods in found]
        BASELINE.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"wrote {len(found)} loops to {BASELINE.relative_to(ROOT)}")
        return 0
    baseline = read_baseline()
    new = [
        (crate, mods)
        for crate, mods in found
        if not any(crate == b_crate and set(mods) <= b_mods for b_crate, b_mods in baseline)
    ]
    gone = [
        (crate, mods)
        for crate, mods in baseline
        if not any(crate == c and set(m) & mods for c, m in found)
    ]
    for crate, mods in gone:
        print(f"import loops: {crate}: {' '.join(sorted(mods))} is gone; "
              "remove it from tools/import_loops.baseline")
    for crate, mods in new:
        print(f"import loops: NEW loop in {crate}: {' -> '.join(mods)} "
              "(modules that import one another; move what they share into a module of its own)")
    print(f"import loops: {len(found)} known, {len(new)} new")
    return 1 if new else 0


if __name__ == "__main__":
    sys.exit(main())
