"""FlexAttention closures shared by make_packages.py (which exports them
with the compiler) and test_runtime_only.py (which runs them without)."""


def with_bias(bias):
    def key_bias(score, b, h, q_idx, kv_idx):
        return score + bias[kv_idx % 7]
    return key_bias


def window(size):
    def sliding(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (q_idx - kv_idx < size)
    return sliding
