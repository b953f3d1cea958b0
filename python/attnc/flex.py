"""The FlexAttention route: `flex_attention` and `create_block_mask` with
the same argument meanings as torch.nn.attention.flex_attention, for
score_mod / mask_mod written as ordinary Python functions.

A modifier is traced once with symbolic values (operator overloading on the
score and the four indices, and torch's __torch_function__ protocol for
torch.where, torch.exp, ...). Tensors it closes over become captured tensors
(free dimensions, so new shapes do not recompile), Python numbers become
scalars (new values never recompile). The trace is written as a `.attn`
variant and compiled once per program text; a construct that cannot be
traced raises attnc.TraceError naming the function and the line.
"""
import hashlib
import math
import os
import sys
import threading
import types

from . import _attnc

__all__ = ["flex_attention", "create_block_mask", "BlockMask", "TraceError",
           "export_package", "precompile"]


class TraceError(_attnc.Error):
    """A score_mod or mask_mod uses something the tracer cannot express."""


def _user_line(fn):
    """'file:line' of the innermost frame in user code (not this file)."""
    here = os.path.abspath(__file__)
    f = sys._getframe(1)
    while f is not None:
        path = os.path.abspath(f.f_code.co_filename)
        if path != here and "/torch/" not in path:
            return "%s:%d" % (f.f_code.co_filename, f.f_lineno)
        f = f.f_back
    return getattr(fn, "__name__", "?")


# ---- symbolic values ------------------------------------------------------------

_TORCH_TYPES = {"float32": "f32", "float16": "f16", "bfloat16": "bf16",
                "int32": "i32", "int64": "i64", "bool": "bool"}


class _Trace:
    """The lets of one modifier being traced, and the variant's params."""

    def __init__(self, fn, params):
        self.fn = fn
        self.lets = []
        self.params = params  # shared by score_mod and mask_mod

    def let(self, text, t):
        name = "t%d" % len(self.lets)
        self.lets.append((name, text))
        return _Val(self, name, t)

    def fail(self, what):
        name = getattr(self.fn, "__name__", "a modifier")
        raise TraceError("%s: in %s: %s" % (_user_line(self.fn), name, what))


def _lit(x):
    if isinstance(x, bool):
        return ("true" if x else "false"), "bool"
    if isinstance(x, int):
        if not -2**31 <= x < 2**31:
            raise TraceError("integer constant %d does not fit in i32" % x)
        return ("(%d)" % x if x < 0 else str(x)), "i32"
    if isinstance(x, float):
        if math.isnan(x):
            return "(0.0 / 0.0)", "f32"
        if math.isinf(x):
            return ("inf" if x > 0 else "(-inf)"), "f32"
        return "(%r)" % x, "f32"
    return None, None


class _Val:
    """A traced value of type i32, f32 or bool."""

    def __init__(self, trace, text, t):
        self.trace, self.text, self.t = trace, text, t

    # Python control flow on a traced value cannot be traced.
    def __bool__(self):
        self.trace.fail("data-dependent Python control flow (`if`, `and`, "
                        "`or`, `not` on a traced value): use torch.where, "
                        "&, | or ~")

    def __index__(self):
        self.trace.fail("a traced value used as a Python integer")

    __int__ = __float__ = __index__

    def _other(self, x):
        if isinstance(x, _Val):
            return x
        if isinstance(x, _Capture):
            return x._scalar()
        text, t = _lit(x)
        if text is None:
            self.trace.fail("cannot combine a traced value with %r" % (x,))
        return _Val(self.trace, text, t)

    def _bin(self, op, x, rev=False):
        a, b = self._other(x), self
        if not rev:
            a, b = b, a
        if op == "/":  # Python's / is true division, also on integers
            return self.trace.let("f32(%s) / f32(%s)" % (a.text, b.text), "f32")
        if op in ("//", "%"):
            t = "i32" if a.t == b.t == "i32" else "f32"
            f = "floordiv" if op == "//" else "floormod"
            return self.trace.let("%s(%s, %s)" % (f, a.text, b.text), t)
        if op == "**":
            return self.trace.let("pow(%s, %s)" % (a.text, b.text), "f32")
        if op in ("<", "<=", ">", ">=", "==", "!="):
            if "bool" in (a.t, b.t) and a.t != b.t:
                a, b = _as_i32(a), _as_i32(b)
            return self.trace.let("%s %s %s" % (a.text, op, b.text), "bool")
        if op in ("&", "|", "^"):
            if a.t != b.t or a.t == "f32":
                self.trace.fail("operator %s needs two ints or two bools" % op)
            return self.trace.let("%s %s %s" % (a.text, op, b.text), a.t)
        if op in ("<<", ">>"):
            return self.trace.let("%s %s %s" % (a.text, op, b.text), "i32")
        if "bool" in (a.t, b.t):
            a, b = _as_i32(a), _as_i32(b)
        t = "f32" if "f32" in (a.t, b.t) else "i32"
        return self.trace.let("%s %s %s" % (a.text, op, b.text), t)

    __hash__ = object.__hash__

    def __neg__(self):
        return self.trace.let("-%s" % _as_num(self).text, "f32" if self.t == "f32" else "i32")

    def __pos__(self):
        return self

    def __abs__(self):
        return self.trace.let("abs(%s)" % _as_num(self).text, self.t)

    def __invert__(self):
        if self.t == "f32":
            self.trace.fail("~ on a float")
        return self.trace.let("~%s" % self.text, self.t)

    # Tensor-style methods FlexAttention code calls on the indices/score.
    def new_ones(self, *a, **kw):
        return _Val(self.trace, "true", "bool") if kw.get("dtype") is not None and \
            "bool" in str(kw["dtype"]) else _Val(self.trace, "1", "i32")

    def to(self, dtype=None, *a, **kw):
        return _cast(self, dtype)

    def float(self):
        return _cast(self, "float32")

    def int(self):
        return _cast(self, "int32")

    def abs(self):
        return abs(self)

    def exp(self):
        return _call(self.trace, "exp", [self])

    def sigmoid(self):
        return _call(self.trace, "sigmoid", [self])

    def tanh(self):
        return _call(self.trace, "tanh", [self])

    def clamp(self, min=None, max=None):
        return _torch_clamp(self, min, max)

    @classmethod
    def __torch_function__(cls, func, types_, args=(), kwargs=None):
        kwargs = kwargs or {}
        trace = next(a.trace for a in _flatten(args) if isinstance(a, _Val))
        name = getattr(func, "__name__", str(func))
        handler = _TORCH_FUNCS.get(name)
        if handler is None:
            trace.fail("torch.%s is not supported by the tracer (supported: %s)"
                       % (name, ", ".join(sorted(_TORCH_FUNCS))))
        return handler(trace, *args, **kwargs)


# Python's operators on traced values: (method, operator, reflected form).
_OPERATORS = [("add", "+", True), ("sub", "-", True), ("mul", "*", True),
              ("truediv", "/", True), ("floordiv", "//", True), ("mod", "%", True),
              ("pow", "**", True), ("and", "&", True), ("or", "|", True),
              ("xor", "^", True), ("lshift", "<<", False), ("rshift", ">>", False),
              ("lt", "<", False), ("le", "<=", False), ("gt", ">", False),
              ("ge", ">=", False), ("eq", "==", False), ("ne", "!=", False)]
for _name, _op, _reflected in _OPERATORS:
    setattr(_Val, "__%s__" % _name, lambda self, x, op=_op: self._bin(op, x))
    if _reflected:
        setattr(_Val, "__r%s__" % _name, lambda self, x, op=_op: self._bin(op, x, True))


def _flatten(xs):
    for x in xs:
        if isinstance(x, (list, tuple)):
            yield from _flatten(x)
        else:
            yield x


def _as_i32(v):
    return _Val(v.trace, "i32(%s)" % v.text, "i32") if v.t == "bool" else v


def _as_num(v):
    if v.t == "bool":
        v.trace.fail("arithmetic on a bool")
    return v


def _cast(v, dtype):
    s = str(dtype)
    if "float" in s:
        return v.trace.let("f32(%s)" % v.text, "f32")
    if "int" in s:
        return v.trace.let("i32(%s)" % v.text, "i32")
    if "bool" in s:
        return v.trace.let("%s != 0" % _as_i32(v).text, "bool") if v.t != "bool" else v
    v.trace.fail("cannot convert to %s" % s)


def _val(trace, x):
    if isinstance(x, _Val):
        return x
    if isinstance(x, _Capture):
        return x._scalar()
    text, t = _lit(x)
    if text is None:
        trace.fail("unsupported argument %r" % (x,))
    return _Val(trace, text, t)


def _call(trace, fn, args, t=None):
    vals = [_val(trace, a) for a in args]
    if t is None:
        t = "f32"
    return trace.let("%s(%s)" % (fn, ", ".join(v.text for v in vals)), t)


def _num_type(vals):
    return "f32" if any(v.t == "f32" for v in vals) else "i32"


def _torch_where(trace, c, a, b):
    c, a, b = _val(trace, c), _val(trace, a), _val(trace, b)
    if a.t != b.t and "bool" not in (a.t, b.t):
        a, b = (a if a.t == "f32" else _cast(a, "float")), (b if b.t == "f32" else _cast(b, "float"))
    return trace.let("where(%s, %s, %s)" % (c.text, a.text, b.text), a.t)


def _torch_clamp(x, min=None, max=None):
    trace = x.trace
    r = x
    if min is not None:
        m = _val(trace, min)
        r = _call(trace, "max", [r, m], _num_type([r, m]))
    if max is not None:
        m = _val(trace, max)
        r = _call(trace, "min", [r, m], _num_type([r, m]))
    return r


def _minmax(fn):
    def h(trace, a, b):
        a, b = _val(trace, a), _val(trace, b)
        return _call(trace, fn, [a, b], _num_type([a, b]))
    return h


def _unary(fn, t=None):
    return lambda trace, x, **kw: _call(trace, fn, [x], t)


_TORCH_FUNCS = {
    "where": _torch_where,
    "exp": _unary("exp"), "exp2": _unary("exp2"), "log": _unary("log"),
    "log2": _unary("log2"), "sqrt": _unary("sqrt"), "rsqrt": _unary("rsqrt"),
    "tanh": _unary("tanh"), "sigmoid": _unary("sigmoid"), "sin": _unary("sin"),
    "cos": _unary("cos"), "tan": _unary("tan"), "log1p": _unary("log1p"),
    "expm1": _unary("expm1"), "erf": _unary("erf"),
    "floor": _unary("floor"), "ceil": _unary("ceil"),
    "abs": lambda trace, x: abs(_val(trace, x)),
    "sign": lambda trace, x: _call(trace, "sign", [x], _val(trace, x).t),
    "isnan": _unary("isnan", "bool"), "isinf": _unary("isinf", "bool"),
    "pow": lambda trace, a, b: _call(trace, "pow", [a, b]),
    "minimum": _minmax("min"), "maximum": _minmax("max"),
    "clamp": lambda trace, x, min=None, max=None: _torch_clamp(_val(trace, x), min, max),
    "logical_and": lambda trace, a, b: _val(trace, a) & _val(trace, b),
    "logical_or": lambda trace, a, b: _val(trace, a) | _val(trace, b),
    "logical_not": lambda trace, a: ~_val(trace, a),
}


# ---- captured tensors and numbers -------------------------------------------------

class _Capture:
    """A tensor a modifier closes over: indexing it is a gather."""

    def __init__(self, trace, name, tensor, idx=()):
        self.trace, self.name, self.tensor, self.idx = trace, name, tensor, tuple(idx)

    def _rank(self):
        return len(self.tensor.shape)

    def __getitem__(self, key):
        keys = key if isinstance(key, tuple) else (key,)
        idx = list(self.idx)
        for k in keys:
            if isinstance(k, slice) or k is Ellipsis or k is None:
                self.trace.fail("slicing a captured tensor ('%s'): index one "
                                "element per dimension" % self.name)
            v = _val(self.trace, k)
            if v.t != "i32":
                self.trace.fail("index of '%s' must be an integer" % self.name)
            d = len(idx)
            if isinstance(k, int) and k < 0:  # Python's from-the-end index
                v = _Val(self.trace, "(%s + (%d))" % (self.params_dim(d), k), "i32")
            idx.append(v)
        if len(idx) > self._rank():
            self.trace.fail("too many indices for '%s' (rank %d)" % (self.name, self._rank()))
        if len(idx) < self._rank():
            return _Capture(self.trace, self.name, self.tensor, idx)
        t = _attn_type(self.tensor)
        t = "f32" if t in ("f32", "f16", "bf16") else "bool" if t == "bool" else "i32"
        return self.trace.let("%s[%s]" % (self.name, ", ".join(i.text for i in idx)), t)

    def params_dim(self, d):
        return "%s_d%d" % (self.name, d)

    def _scalar(self):
        if self._rank() != 0:
            self.trace.fail("'%s' is a tensor of rank %d used as a value; index it"
                            % (self.name, self._rank()))
        t = _attn_type(self.tensor)
        t = "f32" if t in ("f32", "f16", "bf16") else "bool" if t == "bool" else "i32"
        return _Val(self.trace, self.name, t)

    # A 0-d tensor in arithmetic reads its one element.
    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return getattr(self._scalar(), attr)

    @classmethod
    def __torch_function__(cls, func, types_, args=(), kwargs=None):
        args = [a._scalar() if isinstance(a, _Capture) else a for a in args]
        return _Val.__torch_function__(func, types_, args, kwargs)


def _binop(name):
    def f(self, *a):
        return getattr(self._scalar(), name)(*a)
    return f


for _op in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv",
            "floordiv", "rfloordiv", "mod", "rmod", "pow", "rpow", "and", "rand",
            "or", "ror", "xor", "rxor", "lt", "le", "gt", "ge", "eq", "ne",
            "neg", "abs", "invert", "lshift", "rshift"):
    setattr(_Capture, "__%s__" % _op, _binop("__%s__" % _op))
_Capture.__hash__ = object.__hash__


def _attn_type(t):
    """The .attn element type of a torch tensor, NumPy array or
    attnc.cuda.DeviceArray (None when the language has none)."""
    s = str(t.dtype).split(".")[-1]
    return _TORCH_TYPES.get(s, s if s in _TORCH_TYPES.values() else None)


def _is_tensor(x):
    return hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "__dlpack__")


class _Params:
    """The variant's parameters, gathered from both modifiers' closures:
    the same object closed over by both is one parameter."""

    def __init__(self):
        self.decls = []     # .attn declarations, in order
        self.values = {}    # name -> tensor or number
        self.by_id = {}     # id(object) -> name
        self.kinds = {}     # name -> "tensor" | "scalar"
        self.sources = {}   # name -> (modifier: 0 score_mod, 1 mask_mod,
                            #          "cell" or "global", cell index or name)

    def bind(self, obj, hint, source):
        key = id(obj)
        if key in self.by_id:
            return self.by_id[key]
        name = "%s_%d" % (hint if hint.isidentifier() else "p", len(self.decls))
        if _is_tensor(obj):
            dt = _attn_type(obj)
            if dt is None:
                raise TraceError("captured tensor '%s' has dtype %s; supported: %s"
                                 % (hint, obj.dtype, ", ".join(_TORCH_TYPES)))
            dims = ", ".join("%s_d%d" % (name, d) for d in range(len(obj.shape)))
            self.decls.append("%s: %s[%s]" % (name, dt, dims))
            self.kinds[name] = "tensor"
        else:
            t = "bool" if isinstance(obj, bool) else "i32" if isinstance(obj, int) else "f32"
            self.decls.append("%s: %s" % (name, t))
            self.kinds[name] = "scalar"
        self.values[name] = obj
        self.by_id[key] = name
        self.sources[name] = source
        return name


def _is_number(x):
    return isinstance(x, (bool, int, float))


class _Object:
    """An object a modifier reaches (a bound method's `self`, an nn.Module,
    a config object) while tracing: its attributes are traced stand-ins
    too, so `self.slopes[h]` is a gather from the parameter `slopes`."""

    def __init__(self, stand_in, obj, source):
        object.__setattr__(self, "_stand_in", stand_in)
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_source", source)  # (which, root, steps)

    def __getattr__(self, attr):
        value = getattr(self._obj, attr)
        if isinstance(value, types.MethodType) and value.__self__ is self._obj:
            return types.MethodType(value.__func__, self)  # self.helper(...)
        return self._stand_in(value, attr, _step(self._source, "attr", attr))

    def __call__(self, *args, **kwargs):
        return self._obj(*args, **kwargs)


class _Container:
    """A dict, list or tuple a modifier reaches: a constant key reads the
    entry (a stand-in in turn); a traced one is refused."""

    def __init__(self, stand_in, obj, source):
        self._stand_in, self._obj, self._source = stand_in, obj, source

    def __getitem__(self, key):
        if isinstance(key, (_Val, _Capture)):
            raise TraceError("a %s is indexed by a traced value; put the values "
                             "in a tensor and index that" % type(self._obj).__name__)
        return self._stand_in(self._obj[key], str(key), _step(self._source, "item", key))

    def __len__(self):
        return len(self._obj)

    def get(self, key, default=None):
        return self[key] if key in self._obj else default


def _step(source, kind, key):
    """A parameter's source (which, root, steps) one attribute or key on."""
    which, root, steps = source
    return which, root, steps + ((kind, key),)


_PASS_THROUGH = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                 types.MethodType, type, str, bytes, type(None))


def _rebind(fn, trace, params, which):
    """`fn` with every tensor and number it reaches replaced by a traced
    stand-in: closure cells, the globals it names and (for a bound method)
    its `self`, through attributes and constant keys of the objects, dicts,
    lists and tuples on the way. `which` (0: score_mod, 1: mask_mod) and
    the path to each are recorded, so _read finds the current value on
    every call."""
    def stand_in(obj, hint, source):
        if _is_tensor(obj):
            name = params.bind(obj, hint, source)
            return _Capture(trace, name, obj)
        if _is_number(obj):
            if isinstance(obj, int) and not isinstance(obj, bool) and not -2**31 <= obj < 2**31:
                return obj
            name = params.bind(obj, hint, source)
            return _Val(trace, name, "bool" if isinstance(obj, bool) else
                        "i32" if isinstance(obj, int) else "f32")
        if isinstance(obj, (dict, list, tuple)):
            return _Container(stand_in, obj, source)
        if isinstance(obj, _PASS_THROUGH) or not hasattr(obj, "__dict__"):
            return obj
        return _Object(stand_in, obj, source)

    func, owner = _split_method(fn)
    cells = None
    if func.__closure__:
        cells = tuple(types.CellType(stand_in(c.cell_contents, n, (which, ("cell", i), ())))
                      for i, (n, c) in enumerate(zip(func.__code__.co_freevars,
                                                     func.__closure__)))
    g = dict(func.__globals__)
    for n in func.__code__.co_names:
        if n in g:
            g[n] = stand_in(g[n], n, (which, ("global", n), ()))
    f = types.FunctionType(func.__code__, g, func.__name__, func.__defaults__, cells)
    if owner is not None:
        return types.MethodType(f, _Object(stand_in, owner, (which, ("self",), ())))
    return f


def _split_method(fn):
    """(function, self) of a bound method; (fn, None) otherwise."""
    if isinstance(fn, types.MethodType):
        return fn.__func__, fn.__self__
    return fn, None


def _read(fns, which, root, steps):
    """A parameter's current value, from where _rebind found it."""
    fn = fns[which]
    if root[0] == "self":
        x = fn.__self__
    elif root[0] == "cell":
        x = fn.__closure__[root[1]].cell_contents
    else:
        x = fn.__globals__[root[1]]
    for kind, key in steps:
        x = getattr(x, key) if kind == "attr" else x[key]
    return x


def _trace_mod(fn, params, is_score):
    trace = _Trace(fn, params)
    f = _rebind(fn, trace, params, 0 if is_score else 1)
    names = ["score", "b", "h", "q_idx", "kv_idx"] if is_score else ["b", "h", "q_idx", "kv_idx"]
    types_ = ["f32", "i32", "i32", "i32", "i32"] if is_score else ["i32"] * 4
    args = [_Val(trace, n, t) for n, t in zip(names, types_)]
    try:
        r = f(*args)
    except TraceError:
        raise
    except Exception as e:  # torch or Python refused a traced value
        raise TraceError("%s: in %s: cannot trace: %s: %s"
                         % (_user_line(fn), getattr(fn, "__name__", "?"),
                            type(e).__name__, e)) from e
    if isinstance(r, _Capture):
        r = r._scalar()
    r = _val(trace, r)
    want = "f32" if is_score else "bool"
    if is_score and r.t == "i32":
        r = _cast(r, "float")
    if r.t != want:
        trace.fail("%s must return a %s, got %s" % ("score_mod" if is_score else "mask_mod",
                                                      "float" if is_score else "bool", r.t))
    lines = ["    let %s = %s" % l for l in trace.lets]
    lines.append("    return %s" % r.text)
    head = "%s(%s)" % ("score_mod" if is_score else "mask_mod", ", ".join(names))
    return "  %s {\n%s\n  }" % (head, "\n".join(lines))


def _trace_variant(score_mod, mask_mod):
    """(.attn source, params, variant name): the variant is named by a hash
    of what was traced, so a package exported from one machine
    (export_package) is found by the same closures on another."""
    params = _Params()
    bodies = []
    if score_mod is not None:
        bodies.append(_trace_mod(score_mod, params, True))
    if mask_mod is not None:
        bodies.append(_trace_mod(mask_mod, params, False))
    text = "(%s) {\n%s\n}\n" % (", ".join(params.decls), "\n".join(bodies))
    name = "flex_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    return "variant %s%s" % (name, text), params, name


# ---- the API ------------------------------------------------------------------------

class BlockMask:
    """What create_block_mask records: the mask_mod and the sizes it was made
    for (no O(Q_LEN * KV_LEN) work: attnc classifies tiles itself)."""

    def __init__(self, mask_mod, B, H, Q_LEN, KV_LEN):
        self.mask_mod, self.B, self.H = mask_mod, B, H
        self.Q_LEN, self.KV_LEN = Q_LEN, KV_LEN
        self.shape = (B, H, Q_LEN, KV_LEN)


def create_block_mask(mask_mod, B, H, Q_LEN, KV_LEN, device=None, **_ignored):
    return BlockMask(mask_mod, B, H, Q_LEN, KV_LEN)


_kernels = {}
_kernels_lock = threading.Lock()  # a traced program compiles once


def _is_torch_default(fn, name):
    """Whether fn is torch's default modifier `name` (which a caller can
    only have if torch's flex_attention module is loaded: not imported
    here, which costs a second)."""
    fa = sys.modules.get("torch.nn.attention.flex_attention")
    return fa is not None and fn is getattr(fa, name, None)


def flex_attention(query, key, value, score_mod=None, block_mask=None, scale=None,
                   enable_gqa=False, return_lse=False, kernel_options=None,
                   return_aux=None, *, dropout_p=0.0, dropout_seed=None,
                   dropout_offset=0):
    """torch.nn.attention.flex_attention's meaning, run by attnc: query
    [B, Hq, L, E], key [B, Hkv, S, E], value [B, Hkv, S, Ev]; query i sits
    at position i (FlexAttention's convention). `return_aux=AuxRequest(
    lse=True)` (torch's current spelling) returns (out, AuxOutput(lse=...)),
    `return_lse=True` (its older one) (out, lse).

    attnc's extension: attention dropout (torch's flex_attention has none),
    as Kernel.__call__ takes it (docs/dropout.md): dropout_p in [0, 1),
    dropout_seed (None: drawn from torch's generator) and dropout_offset.
    Pass dropout_p=0.0 at evaluation time, as with SDPA."""
    for x, what in ((query, "query"), (key, "key"), (value, "value")):
        shape = getattr(x, "shape", None)
        if shape is None or len(shape) != 4:
            raise ValueError("'%s' must be 4-d [B, H, %s, E], got %s" % (
                what, "L" if what == "query" else "S",
                "shape %s" % (tuple(int(s) for s in shape),) if shape is not None
                else type(x).__name__))
    sharded = _context_parallel()
    if sharded is not None:
        return _flex_sharded(sharded, query, key, value, score_mod, block_mask,
                             scale, enable_gqa, return_lse or return_aux,
                             dropout_p, dropout_seed, dropout_offset)
    aux = None
    if return_aux is not None:
        if getattr(return_aux, "max_scores", False):
            raise NotImplementedError("attnc.flex_attention returns the LSE, not "
                                      "max_scores: pass AuxRequest(lse=True)")
        aux = bool(getattr(return_aux, "lse", False))
        return_lse = return_lse or aux
    B, Hq, L = int(query.shape[0]), int(query.shape[1]), int(query.shape[2])
    Hkv, S = int(key.shape[1]), int(key.shape[2])
    if Hq != Hkv and not enable_gqa:
        raise _attnc.Error("query has %d heads and key %d: pass enable_gqa=True "
                           "for grouped-query attention" % (Hq, Hkv))
    mask_mod = None
    if block_mask is not None:
        if not isinstance(block_mask, BlockMask):
            raise _attnc.Error("block_mask must come from attnc.create_block_mask")
        if (block_mask.Q_LEN, block_mask.KV_LEN) != (L, S):
            raise _attnc.Error("block_mask was made for Q_LEN=%d, KV_LEN=%d, but the "
                               "query has %d positions and the key %d"
                               % (block_mask.Q_LEN, block_mask.KV_LEN, L, S))
        mask_mod = block_mask.mask_mod
    # A bound method goes in as (function, self): Dynamo passes both to the
    # constant-result trace (it cannot pass a bound method).
    src, name, sources = _traced(*_split_method(score_mod), *_split_method(mask_mod))
    fns = (score_mod, mask_mod)
    params = {p: _read(fns, which, root, steps) for p, which, root, steps in sources}
    import attnc
    if attnc._is_torch_tensor(query) and attnc._needs_operator(
            (query, key, value), params):  # the operator: torch.compile follows
        from . import torch_op
        dropout_p = attnc._dropout_p(dropout_p)
        if dropout_seed is not None and not attnc._is_torch_tensor(dropout_seed):
            dropout_seed = attnc._int(dropout_seed, "dropout_seed", 0, attnc._U64_MAX)
        dropout_offset = attnc._int(dropout_offset, "dropout_offset", 0,
                                    attnc._U64_MAX)
        result = torch_op.call(_kernel_id(src, name, bool(query.is_cuda)), query, key,
                               value, scale, None, [0] * B, return_lse, params,
                               None, 0, dropout_p, dropout_seed, dropout_offset)
    else:
        kernel = _kernel_for(src, name, attnc._device_of(query)[0] == attnc._CUDA)
        result = kernel(query, key, value, scale=scale, q_offsets=[0] * B,
                        return_lse=return_lse, dropout_p=dropout_p,
                        dropout_seed=dropout_seed, dropout_offset=dropout_offset,
                        **params)
    if return_aux is None:
        return result
    out, lse = result if return_lse else (result, None)
    return out, _aux_output(lse if aux else None)


def _context_parallel():
    """attnc.distributed.context_parallel's state when one is active (the
    module is only looked up, never imported here)."""
    cp = sys.modules.get("attnc.distributed")
    return cp._active() if cp is not None else None


def _flex_sharded(ctx, query, key, value, score_mod, block_mask, scale,
                  enable_gqa, wants_lse, dropout_p, dropout_seed,
                  dropout_offset):
    """flex_attention inside attnc.distributed.context_parallel: the
    shards of this rank, attended over the group."""
    from . import distributed as cp
    group, scheme, load_balance = ctx
    if wants_lse:
        raise NotImplementedError(
            "attnc.flex_attention under attnc.distributed.context_parallel "
            "returns the output only: the LSE is not gathered")
    mask_mod = None
    if block_mask is not None:
        if not isinstance(block_mask, BlockMask):
            raise _attnc.Error("block_mask must come from attnc.create_block_mask")
        world = cp._world(group)[0]
        L, S = int(query.shape[2]) * world, int(key.shape[2]) * world
        if (block_mask.Q_LEN, block_mask.KV_LEN) != (L, S):
            raise _attnc.Error("block_mask was made for Q_LEN=%d, KV_LEN=%d, but "
                               "the sharded sequence has %d query and %d key "
                               "positions (%d ranks)" % (
                                   block_mask.Q_LEN, block_mask.KV_LEN, L, S,
                                   world))
        mask_mod = block_mask.mask_mod
    return cp.flex_attention(query, key, value, score_mod, mask_mod, group,
                             scheme=scheme, load_balance=load_balance,
                             scale=scale, enable_gqa=enable_gqa,
                             dropout_p=dropout_p, dropout_seed=dropout_seed,
                             dropout_offset=dropout_offset)


def _aux_output(lse):
    """torch's AuxOutput(lse, max_scores=None), or a namedtuple like it
    where torch has none (return_aux then came from an older spelling)."""
    try:
        from torch.nn.attention.flex_attention import AuxOutput
    except ImportError:
        import collections
        AuxOutput = collections.namedtuple("AuxOutput", "lse max_scores")
    return AuxOutput(lse=lse, max_scores=None)


def _traced(score_fn, score_self, mask_fn, mask_self):
    """(.attn source, variant name, where each parameter comes from): the
    trace, which Dynamo (torch.compile) runs at its own trace time and
    keeps as a constant (it cannot follow the tracer); the parameters'
    values are read afresh (_read) on every call. A modifier is a function
    and, for a bound method, its self."""
    score_mod, mask_mod = (fn if owner is None else types.MethodType(fn, owner)
                           for fn, owner in ((score_fn, score_self), (mask_fn, mask_self)))
    if score_mod is not None and _is_torch_default(score_mod, "_identity"):
        score_mod = None
    if mask_mod is not None and _is_torch_default(mask_mod, "noop_mask"):
        mask_mod = None
    src, params, name = _trace_variant(score_mod, mask_mod)
    return src, name, tuple((p,) + params.sources[p] for p in params.values)


_traced._dynamo_marked_constant = True  # torch._dynamo.assume_constant_result


def traced_kernel(score_mod, mask_mod, on_cuda=False):
    """The compiled kernel of the closures (traced and compiled once, as
    flex_attention does) and the parameters they capture now, by name:
    what attnc.distributed calls with its own query offsets."""
    src, name, sources = _traced(*_split_method(score_mod), *_split_method(mask_mod))
    fns = (score_mod, mask_mod)
    params = {p: _read(fns, which, root, steps) for p, which, root, steps in sources}
    return _kernel_for(src, name, on_cuda), params


def _kernel_id(src, name, on_cuda):
    """The traced variant's kernel, as torch_op's registry number (a
    constant for Dynamo, like _traced)."""
    return _kernel_for(src, name, on_cuda)._op_id


_kernel_id._dynamo_marked_constant = True


def _kernel_for(src, name, on_cuda):
    """The traced variant's kernel: from a loaded package (CUDA arrays),
    else compiled (once per traced program)."""
    kernel = _kernels.get((src, on_cuda))
    if kernel is not None:
        return kernel
    with _kernels_lock:
        kernel = _kernels.get((src, on_cuda))
        if kernel is None:
            kernel = _find_or_compile(src, name, on_cuda)
            _kernels[(src, on_cuda)] = kernel
    return kernel


def _find_or_compile(src, name, on_cuda):
    import attnc
    kernel = None
    if on_cuda:
        for p in reversed(attnc._packages):
            if name in p.variants:
                kernel = p.kernel(name)
                break
    if kernel is None:
        if not attnc.has_compiler:
            raise _attnc.Error(
                "no loaded package has the traced variant %s, and this attnc has no "
                "compiler: export it where the compiler is (attnc.flex.export_package) "
                "and attnc.load_package the file here" % name)
        kernel = attnc.compile(src, name="<flex_attention>")
    return kernel


def precompile(score_mod=None, mask_mod=None, **options):
    """Traces score_mod / mask_mod and compiles their kernel ahead of the
    first flex_attention call with them (options as Kernel.precompile:
    dtypes, head_dims, device, backward). Returns the Kernel."""
    device = str(options.get("device", "cpu"))
    src, name, _ = _traced(*_split_method(score_mod), *_split_method(mask_mod))
    return _kernel_for(src, name, device.startswith("cuda")).precompile(**options)


def export_package(path, score_mod=None, mask_mod=None, **options):
    """Traces score_mod / mask_mod and compiles them ahead of time into a
    kernel package at `path` (options as attnc.compile_package: targets,
    dtypes, head_dims). Where attnc.load_package has read it, the
    runtime-only package runs flex_attention with the same closures.
    Returns the variant's name."""
    from . import compile_package
    src, _, name = _trace_variant(score_mod, mask_mod)
    compile_package(src, path, name="<flex_attention>", **options)
    return name
