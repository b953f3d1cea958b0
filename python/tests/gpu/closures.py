"""FlexAttention closures the GPU tests run: exported ahead of time by
scripts/device-bundle.sh (make_packages.py, with the compiler) so that the
runtime-only package on the GPU machine finds their kernels."""


def causal(b, h, q_idx, kv_idx):
    return q_idx >= kv_idx


def tilt(score, b, h, q_idx, kv_idx):
    return score - 0.01 * (q_idx - kv_idx)
