# Runs a command and fails when it exceeds a memory or time budget:
#   bounded.py --max-mb M --max-seconds S -- COMMAND...
# (peak resident memory of the command, from getrusage).
import resource
import subprocess
import sys
import time

args = sys.argv[1:]
max_mb = float(args[args.index("--max-mb") + 1])
max_s = float(args[args.index("--max-seconds") + 1])
cmd = args[args.index("--") + 1:]
start = time.monotonic()
r = subprocess.run(cmd, stdout=subprocess.DEVNULL)
seconds = time.monotonic() - start
mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
print("%s: exit %d, %.1f s, %.0f MB" % (cmd[0], r.returncode, seconds, mb))
if r.returncode != 0:
    sys.exit("the command failed")
if mb > max_mb:
    sys.exit("peak memory %.0f MB is over the %.0f MB budget" % (mb, max_mb))
if seconds > max_s:
    sys.exit("%.1f s is over the %.0f s budget" % (seconds, max_s))
