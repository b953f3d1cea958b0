#!/usr/bin/env python3
"""Merges kernel packages of the same source into one: each variant's
forward and backward kernels side by side (e.g. kernels without key
offsets and a few with them, which the runtime picks by what a call
needs). The runtime checks the result when it loads it (two kernels of
one kind for one target, dtype and head dims are refused there).

  scripts/merge-packages.py OUT.json IN.json [IN.json ...]
"""
import json
import sys


def merge(paths):
    out = None
    for path in paths:
        with open(path) as f:
            pkg = json.load(f)
        if out is None:
            out = pkg
            continue
        for key in ("format", "version", "source", "tile_candidates"):
            if pkg.get(key) != out.get(key):
                sys.exit("merge-packages: %s: '%s' is %r, the first package's "
                         "%r" % (path, key, pkg.get(key), out.get(key)))
        by_name = {v["name"]: v for v in out["variants"]}
        for v in pkg["variants"]:
            mine = by_name.get(v["name"])
            if mine is None:
                out["variants"].append(v)
                continue
            if mine.get("program") != v.get("program"):
                sys.exit("merge-packages: %s: variant '%s' has another program"
                         % (path, v["name"]))
            mine["kernels"] += v.get("kernels", [])
            if v.get("backward"):
                mine.setdefault("backward", []).extend(v["backward"])
    return out


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip())
    merged = merge(sys.argv[2:])
    with open(sys.argv[1], "w") as f:
        json.dump(merged, f, indent=1)
        f.write("\n")
