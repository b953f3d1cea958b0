# Writes a float32 .npy file without NumPy:
#   write_npy.py [--inf | --fill X] OUT D0 D1 ...   (no dims: a 0-d array)
# element i is sin(i) (deterministic, in [-1, 1]), +inf with --inf, or X.
import math
import struct
import sys

args = sys.argv[1:]
inf = args[0] == "--inf"
fill = None
if inf:
    args = args[1:]
elif args[0] == "--fill":
    fill = float(args[1])
    args = args[2:]
out, dims = args[0], [int(d) for d in args[1:]]
n = 1
for d in dims:
    n *= d
shape = "(" + ", ".join(str(d) for d in dims) + ("," if len(dims) == 1 else "") + ")"
header = "{'descr': '<f4', 'fortran_order': False, 'shape': %s, }" % shape
header += " " * ((64 - (10 + len(header) + 1) % 64) % 64) + "\n"
with open(out, "wb") as f:
    f.write(b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode())
    f.write(struct.pack("<%df" % n, *[math.inf if inf else fill if fill is not None else math.sin(i)
                                     for i in range(n)]))
