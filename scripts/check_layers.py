#!/usr/bin/env python3
"""The dependency rule of docs/DESIGN.md: a library includes headers of its
own layer or of layers below it, never above.

    scripts/check_layers.py [ROOT]

Reads every file under ROOT/src, ROOT/include/weft, ROOT/bench, ROOT/apps
and ROOT/python, maps it and each `#include "weft/<module>/<file>"` to its
library, and prints each include of a higher layer (exit 1), or a line
saying all is well (exit 0). A module this script does not know is an error
too: add it to LAYERS (and to DESIGN.md's table).
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
        print(f"{len(problems)} includes break the dependency rule of docs/DESIGN.md: move the "
              "code to the right layer, or the header to a lower one")
        return 1
    print(f"dependency rule holds: {files} files, every include at its own layer or below")
    return 0


if __name__ == "__main__":
    sys.exit(main())
