# Writes a variant whose mask is a chain of N lets (x_i = x_{i-1} + 1 from
# q), the shape that once made canonicalization quadratic.
import sys

n = int(sys.argv[1])
print("variant chain() {")
print("  mask_mod(b, h, q, kv) {")
print("    let x0 = q")
for i in range(1, n):
    print("    let x%d = x%d + 1" % (i, i - 1))
print("    return x%d - %d >= kv" % (n - 1, n - 1))
print("  }")
print("}")
