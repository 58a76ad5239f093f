#!/usr/bin/env python3
"""The dependency rule and the namespace rule of docs/DESIGN.md: a library
includes headers of its own layer or of layers below it, never above; a
module's code lives in its own namespaces.

    scripts/check_layers.py [ROOT]

Reads every file under ROOT/src, ROOT/include/weft, ROOT/bench, ROOT/apps
and ROOT/python, maps it and each `#include "weft/<module>/<file>"` to its
library, and prints each include of a higher layer and each namespace the
module does not own (exit 1), or a line saying all is well (exit 0). A
module this script does not know is an error too: add it to LAYERS and
NAMESPACES (and to DESIGN.md's tables).
"""
import pathlib
import re
import sys

# Lowest first, as in docs/DESIGN.md's "Modules" table.
LAYERS = [
    ("base", {"base"}),
    ("compute", {"kernels"}),
    ("devices", {"runtime-devices"}),
    ("core IR", {"hlo", "sharding"}),
    ("compile", {"compiler", "spmd", "autodiff"}),
    ("execute", {"runtime-executor"}),
    ("analysis", {"analysis"}),
    ("run", {"runtime-run"}),
    ("model", {"train", "models", "data"}),
    ("front", {"apps", "bench", "python"}),
]
RANK = {lib: i for i, (_, libs) in enumerate(LAYERS) for lib in libs}

# src/runtime (and include/weft/runtime) holds three libraries.
DEVICE_FILES = {"comm_mpi", "comm_threads", "communicator", "config", "hybrid_mesh", "reduce",
                "topology", "mpi_util"}
INCLUDE = re.compile(r'^\s*#\s*include\s+"weft/([a-z_]+)/([^"]+)"', re.M)

# The namespace rule: a module declares its interface in the first namespace
# and keeps everything else (its internals, compiled variants) in the second
# or below it; file-local code is in an anonymous namespace within those.
_VOCABULARY = ("base", "hlo", "sharding", "autodiff", "spmd", "models", "data", "train")
NAMESPACES = {m: ("weft", f"weft::{m}") for m in _VOCABULARY}
NAMESPACES.update({m: (f"weft::{m}", f"weft::{m}") for m in ("compiler", "analysis", "runtime",
                                                             "kernels")})
NAMESPACES.update({"apps": ("weft::cli", "weft::cli"), "bench": ("weft::bench", "weft::bench"),
                   "python": ("weft::python", "weft::python")})
# Namespaces DESIGN.md names as exceptions: a public family of pure functions.
EXTRA_NAMESPACES = {"sharding": {"weft::sharding_util"}}
NAMESPACE_OPEN = re.compile(r"\b(?:inline\s+)?namespace\s*([A-Za-z_][\w:]*)?\s*\{")
FORWARD_DECLARATION = re.compile(r"^(?:class|struct)\s+\w+\s*;$")
# What braces in a file mean nothing for: comments, and string and character literals.
RAW_STRING = re.compile(r'R"([^(\s]*)\(.*?\)\1"', re.S)
NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'', re.S)


def defined_namespaces(text):
    """The named namespaces a file defines something in, as full paths
    ("weft::runtime"; anonymous ones and what they hold are their parent's);
    a namespace holding forward declarations only is not counted."""
    text = NOISE.sub(" ", RAW_STRING.sub('""', text))
    defines = {}  # path -> whether it holds more than forward declarations
    stack = []  # (name or None, the brace depth just inside it)
    depth = 0
    pos = 0
    for token in re.finditer(r"[{};]|" + NAMESPACE_OPEN.pattern, text):
        chunk = " ".join(text[pos:token.start()].split())
        pos = token.end()
        path = "::".join(name for name, _ in stack if name)
        if token.group(0) not in "{};":  # a namespace opens
            depth += 1
            stack.append((token.group(1), depth))
            if token.group(1):
                defines.setdefault("::".join(name for name, _ in stack if name), False)
            continue
        if token.group(0) == "}":
            if stack and stack[-1][1] == depth:
                stack.pop()
            depth -= 1
            continue
        if token.group(0) == "{":
            depth += 1
        if path and (token.group(0) == "{" or
                     (chunk and not FORWARD_DECLARATION.match(chunk + ";"))):
            defines[path] = True
    return {path for path, d in defines.items() if d}


def namespace_problems(root, path, module):
    rel = path.relative_to(root).as_posix()
    if module not in NAMESPACES:
        return []
    interface, own = NAMESPACES[module]
    allowed = {interface} | EXTRA_NAMESPACES.get(module, set())
    problems = []
    for ns in sorted(defined_namespaces(path.read_text(errors="replace"))):
        if ns in allowed or ns == own or ns.startswith(own + "::"):
            continue
        owned = f"{own} and below" if own == interface else f"{interface}, or {own} and below"
        problems.append(f"{rel}: namespace {ns} is not {module}'s ({owned}: see docs/DESIGN.md, "
                        "Conventions)")
    return problems


def library(module, filename):
    if module != "runtime":
        return module
    stem = pathlib.PurePath(filename).name.split(".")[0]
    if stem in ("run_command", "run_inputs", "run_memory"):
        return "runtime-run"
    return "runtime-devices" if stem in DEVICE_FILES else "runtime-executor"


def owner(root, path):
    rel = path.relative_to(root).parts
    if rel[0] in ("src",) or rel[:2] == ("include", "weft"):
        module = rel[1] if rel[0] == "src" else rel[2]
        return library(module, path.name)
    return {"apps": "apps", "bench": "bench", "python": "python"}[rel[0]]


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    problems = []
    files = 0
    for top in ("src", "include/weft", "bench", "apps", "python"):
        for path in sorted((root / top).rglob("*")):
            if path.suffix not in (".h", ".cc", ".inc") or not path.is_file():
                continue
            files += 1
            lib = owner(root, path)
            problems += namespace_problems(root, path, lib.split("-")[0])
            if lib not in RANK:
                problems.append(f"{path.relative_to(root)}: module '{lib}' has no layer")
                continue
            for match in INCLUDE.finditer(path.read_text(errors="replace")):
                target = library(match.group(1), match.group(2))
                if target not in RANK:
                    problems.append(f"{path.relative_to(root)}: includes weft/{match.group(1)}/"
                                    f"{match.group(2)}, of a module with no layer")
                elif RANK[target] > RANK[lib]:
                    problems.append(
                        f"{path.relative_to(root)} ({lib}, layer {LAYERS[RANK[lib]][0]}) includes "
                        f"weft/{match.group(1)}/{match.group(2)} ({target}, layer "
                        f"{LAYERS[RANK[target]][0]}), a higher layer")
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} includes or namespaces break the dependency or namespace rule of "
              "docs/DESIGN.md: move the code to the right layer or namespace, or the header to a "
              "lower layer")
        return 1
    print(f"dependency and namespace rules hold: {files} files, every include at its own layer "
          "or below, every namespace its module's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
