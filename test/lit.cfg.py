# lit configuration for attnc: one folder per compiler stage.
import os
import shutil
import lit.formats

config.name = "attnc"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".attn", ".test"]
config.excludes = ["lit.cfg.py", "lit.site.cfg.py", "unit", "Inputs",
                   "CMakeLists.txt"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.attnc_obj_root, "test")

config.environment["FILECHECK_OPTS"] = "--enable-var-scope"
path = os.path.pathsep.join([config.attnc_tools_dir, config.llvm_tools_dir,
                             config.environment.get("PATH", "")])
config.environment["PATH"] = path
config.substitutions.append(("%examples",
                             os.path.join(config.attnc_src_root, "examples")))
import sys
config.substitutions.append(("%python", sys.executable))
config.substitutions.append(("%bench",
                             os.path.join(config.attnc_src_root, "bench")))
config.substitutions.append(("%scripts",
                             os.path.join(config.attnc_src_root, "scripts")))
# ptxas from a CUDA toolkit, when this machine has one.
ptxas = shutil.which("ptxas") or next(
    (p for p in ["/usr/local/cuda/bin/ptxas"] if os.access(p, os.X_OK)), None)
if ptxas:
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", ptxas))
# The GPU emulator (emulator): a stand-in libcuda that executes the
# PTX with memcheck, so the CUDA path runs end to end without a GPU.
config.substitutions.append(("%emucuda",
                             os.path.join(config.attnc_obj_root, "lib",
                                          "libattnc-emucuda.so")))
# The sanitizer build (scripts/check-sanitizers.sh): its heaviest
# emulated matrices are marked UNSUPPORTED there (the host code they reach
# runs under the sanitizers in their lighter sibling files).
if getattr(config, "attnc_sanitize", ""):
    config.available_features.add("sanitized")
# The kernel cache of the tests lives in the build tree, not in ~/.cache.
config.environment["ATTNC_CACHE_DIR"] = os.path.join(config.attnc_obj_root,
                                                     "test", "kernel-cache")
