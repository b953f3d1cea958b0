# Fails when a command's CPU time grows faster than linearly with the size
# of its generated input:
#   growth.py --gen GEN.py --form FORM --small N --factor F --max-ratio R -- COMMAND... {}
# runs COMMAND on GEN's program of N and of F x N terms ({} is the file)
# and compares the children's CPU time (user + sys, less sensitive to other
# jobs than wall time): linear work gives a ratio near F (less, with the
# fixed start-up cost); quadratic work near F^2.
import os
import resource
import subprocess
import sys
import tempfile

args = sys.argv[1:]
opt = lambda name: args[args.index(name) + 1]  # noqa: E731
gen, form = opt("--gen"), opt("--form")
small, factor, max_ratio = int(opt("--small")), int(opt("--factor")), float(opt("--max-ratio"))
cmd = args[args.index("--") + 1:]


def cpu_seconds(n):
    with tempfile.NamedTemporaryFile("w", suffix=".attn", delete=False) as f:
        f.write(subprocess.run([sys.executable, gen, str(n), form], check=True,
                               capture_output=True, text=True).stdout)
    try:
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        r = subprocess.run([f.name if c == "{}" else c for c in cmd],
                           stdout=subprocess.DEVNULL)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
    finally:
        os.unlink(f.name)
    if r.returncode != 0:
        sys.exit("the command failed on %d terms" % n)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


t1, t2 = cpu_seconds(small), cpu_seconds(small * factor)
ratio = t2 / max(t1, 1e-3)
print("%s: %d terms %.2f s, %d terms %.2f s, ratio %.1f" %
      (form, small, t1, small * factor, t2, ratio))
if ratio > max_ratio:
    sys.exit("compile time grew %.1fx for %dx the terms (at most %.1fx allowed)"
             % (ratio, factor, max_ratio))
