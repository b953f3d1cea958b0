#!/usr/bin/env python3
"""One package: exits 0 when every kernel's PTX is the same for every
target but for its .target line (so one target's run covers the others'
arithmetic); 1 otherwise, naming the first kernel that differs.

Two packages (A, then B built for another target): prints, for each of
B's kernels, `same DTYPE:D:DV` when A's kernels of that name (one per
target) all have B's PTX but for .target, else `own DTYPE:D:DV` (a kernel of B's target
alone, e.g. sm_90a's wgmma form); exits 1 when a kernel of A's name has
other PTX.
   usage: ptx-same-but-target.py PACKAGE.json [OTHER.json]"""
import json
import sys


def body(k):
    return "\n".join(l for l in k["ptx"].split("\n") if not l.startswith(".target"))


package = json.load(open(sys.argv[1]))
if len(sys.argv) == 3:
    other = json.load(open(sys.argv[2]))
    mine = {}
    for v in package["variants"]:
        for k in v["kernels"]:
            mine.setdefault((v["name"], k["kernel"]), set()).add(body(k))
    for v in other["variants"]:
        for k in v["kernels"]:
            what = "%s:%d:%d" % (k["dtype"], k["head_dim"], k["v_head_dim"])
            theirs = mine.get((v["name"], k["kernel"]))
            if theirs is None:
                print("own", what)
            elif theirs == {body(k)}:
                print("same", what)
            else:
                print("%s: its PTX differs between the packages" % k["kernel"], file=sys.stderr)
                sys.exit(1)
    sys.exit(0)
for variant in package["variants"]:
    bodies = {}
    for k in variant["kernels"]:
        key = (k["kernel"], k["dtype"], k["head_dim"], k["v_head_dim"])
        bodies.setdefault(key, set()).add(body(k))
    for key, seen in bodies.items():
        if len(seen) != 1:
            print("%s: its PTX differs between targets" % key[0])
            sys.exit(1)
sys.exit(0)
