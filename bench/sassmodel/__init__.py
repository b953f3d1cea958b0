"""The static SASS model: kernel efficiency as numbers, without a GPU.

ptxas assembles attnc's PTX, nvdisasm disassembles it, and this package
finds each kernel's tile loop and the path a full tile takes through it
(the steady state), then counts what that path issues: instructions per
MMA, MMA-FLOP per instruction, copies and their overhead, 64-bit integer
work, loads on the fast path, loop-invariant registers. Its figures are
predictions; a GPU measures (docs/kernels.md).
"""
