#!/usr/bin/env python3
"""Exits 0 when, in a kernel package, every kernel's PTX is the same for
every target but for its .target line (so one target's run covers the
others' arithmetic); 1 otherwise, naming the first kernel that differs.
   usage: ptx-same-but-target.py PACKAGE.json"""
import json
import sys

package = json.load(open(sys.argv[1]))
for variant in package["variants"]:
    bodies = {}
    for k in variant["kernels"]:
        body = "\n".join(l for l in k["ptx"].split("\n") if not l.startswith(".target"))
        key = (k["kernel"], k["dtype"], k["head_dim"], k["v_head_dim"])
        bodies.setdefault(key, set()).add(body)
    for key, seen in bodies.items():
        if len(seen) != 1:
            print("%s: its PTX differs between targets" % key[0])
            sys.exit(1)
sys.exit(0)
