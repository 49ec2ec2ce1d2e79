#!/usr/bin/python3
"""Golden values for tests/golden_spec.lua, computed by PyTorch.

Run from the repository root with Debian's python3, which has torch 1.13:

    /usr/bin/python3 tests/golden/make.py

It writes tests/golden/cases.lua, a Lua table literal (both files are
committed).  Every case names its inputs (made here with fixed seeds), a Lua
expression over them, the PyTorch expression that gives the expected
outputs, and the tolerance the comparison may use.  The output is
deterministic: each section reseeds the generator from its own name, so
adding a case changes only its section.

Values round-trip exactly: floats are written with repr() (17 significant
digits at most), infinities as inf/-inf and NaN as nan (locals of the
generated file), int64 beyond 2^53 as LuaJIT int64 literals (123LL).

Left out on purpose (ddplua differs by design, or PyTorch's result is
undefined behaviour):
  * a Lua number with an integral value is an integer scalar (Lua cannot tell
    2.0 from 2), so no case passes 2.0 where PyTorch would see a float;
  * float -> int32/int64 conversions of out-of-range values and NaN (C leaves
    them undefined; PyTorch gives INT_MIN on x86, ddplua saturates);
  * random numbers (ddplua uses its own Philox stream, not PyTorch's);
  * ddp.where(cond) with one argument returns nonzero()'s matrix, not a tuple.
"""
import math
import os
import zlib

import torch
import torch.nn.functional as F

assert torch.__version__.startswith("1.13"), torch.__version__
torch.set_num_threads(1)  # reductions then sum in one fixed order

# -- Tolerances (rtol, atol): |got - want| <= atol + rtol * |want| -----------
EXACT = (0, 0)            # integers, bools, copies, views, exactly rounded ops
F32 = (1e-6, 0)           # float32 arithmetic (+ - * / sqrt: 1 ulp is 6e-8..1.2e-7)
F32T = (1e-5, 1e-7)       # float32 transcendental functions (libm vs SLEEF)
F32R = (1e-5, 1e-6)       # float32 reductions over tens of elements, matmul
F32L = (1e-4, 1e-5)       # float32 reductions over 1000+ elements
F64 = (1e-14, 0)          # float64 arithmetic
F64T = (1e-12, 1e-15)     # float64 transcendental functions, reductions
HALF = (0, 0)             # bfloat16/float16 results are exact roundings of float32
# PyTorch computes float32 linspace in float32: an element near zero in the
# middle of [-1, 1] carries the range's rounding error (~2^-25), not its own.
LIN32 = (1e-6, 1e-7)
# gelu in float32: 1 + erf(x / sqrt 2) cancels for x < -2, so both libraries
# carry an absolute error of about |x| * 2^-25 there.
GELU32 = (1e-5, 5e-7)

inf, nan = math.inf, math.nan

DTYPES = {
    torch.float32: "float32", torch.float64: "float64", torch.int32: "int32",
    torch.int64: "int64", torch.uint8: "uint8", torch.bool: "bool",
    torch.bfloat16: "bfloat16", torch.float16: "float16",
}

CASES = []
NAMES = set()


def section(name):
    """Reseeds the generator so each section's inputs depend on it alone."""
    torch.manual_seed(zlib.crc32(name.encode()))


# -- Input makers ----------------------------------------------------------

def rn(*shape, dtype=torch.float32, scale=1.0, digits=None):
    """Normal values, optionally rounded to `digits` decimals."""
    x = torch.randn(*shape, dtype=torch.float64) * scale
    if digits is not None:
        x = torch.round(x * 10 ** digits) / 10 ** digits
    return x.to(dtype)


def ru(lo, hi, *shape, dtype=torch.float32):
    """Uniform values in [lo, hi)."""
    return (torch.rand(*shape, dtype=torch.float64) * (hi - lo) + lo).to(dtype)


def ri(lo, hi, *shape, dtype=torch.int64):
    return torch.randint(lo, hi, shape, dtype=torch.int64).to(dtype)


def t(values, dtype=torch.float32):
    return torch.tensor(values, dtype=dtype)


def ar(*shape, dtype=torch.float32):
    n = 1
    for s in shape:
        n *= s
    return torch.arange(n, dtype=torch.float64).reshape(*shape).to(dtype)


# special floats: every sign, zero, infinity, NaN, half-way points
SPECIAL = [-inf, -10.0, -3.7, -2.5, -1.5, -1.0, -0.5, -0.0, 0.0, 0.5, 1.0,
           1.5, 2.5, 3.7, 10.0, inf, nan]
PAIR = [-inf, -3.5, -2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 2.0, 3.5, inf, nan]


# -- Cases -----------------------------------------------------------------

def setitem(x, idx, v):
    x[idx] = v
    return x


PY_ENV = {"torch": torch, "F": F, "math": math, "inf": inf, "nan": nan,
          "setitem": setitem}


def case(name, lua, py, tol, **inputs):
    """One golden case: lua is evaluated by the spec with `inputs` bound by
    name; py is the same computation in PyTorch (on copies of the inputs)."""
    assert name not in NAMES, name
    NAMES.add(name)
    env = dict(PY_ENV)
    env.update({k: v.clone() for k, v in inputs.items()})
    out = eval(py, env)
    if isinstance(out, torch.Tensor):
        outs = [out]
    else:
        outs = list(out)
    for o in outs:
        assert isinstance(o, torch.Tensor), (name, type(o))
        assert o.dtype in DTYPES, (name, o.dtype)
    CASES.append((name, lua, py, inputs, outs, tol))


# -- Lua writer -------------------------------------------------------------

def lua_str(s):
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def lua_num(v, dtype):
    if dtype == torch.bool:
        return "true" if v else "false"
    if dtype in (torch.int32, torch.int64, torch.uint8):
        v = int(v)
        return "%dLL" % v if abs(v) > 2 ** 53 else "%d" % v
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    if v == int(v) and abs(v) < 2 ** 53:
        return ("-0.0" if math.copysign(1, v) < 0 else "%d" % v) if v == 0 else "%d" % v
    r = repr(v)
    assert float(r) == v
    return r


def lua_tensor(x):
    vals = x.detach().flatten().tolist()
    return "{dtype=%s, shape={%s}, values={%s}}" % (
        lua_str(DTYPES[x.dtype]), ", ".join(str(s) for s in x.shape),
        ", ".join(lua_num(v, x.dtype) for v in vals))


def write(path):
    lines = [
        "-- Generated by tests/golden/make.py from PyTorch %s; do not edit." % torch.__version__,
        "-- Each case: inputs, a Lua expression over them, PyTorch's outputs, (rtol, atol).",
        "local inf, nan = math.huge, 0 / 0",
        "return {",
    ]
    for name, lua, py, inputs, outs, (rtol, atol) in CASES:
        lines.append("{name=%s, lua=%s, torch=%s, rtol=%r, atol=%r," % (
            lua_str(name), lua_str(lua), lua_str(py), rtol, atol))
        lines.append(" inputs={%s}," % ", ".join(
            "%s=%s" % (k, lua_tensor(v)) for k, v in sorted(inputs.items())))
        lines.append(" outputs={%s}}," % ", ".join(lua_tensor(o) for o in outs))
    lines.append("}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


# ===========================================================================
# Creation
# ===========================================================================
section("creation")
case("arange_end", "ddp.arange(5)", "torch.arange(5)", EXACT)
case("arange_start_end_step", "ddp.arange(2, 11, 3)", "torch.arange(2, 11, 3)", EXACT)
case("arange_negative_step_int", "ddp.arange(10, 0, -3)", "torch.arange(10, 0, -3)", EXACT)
case("arange_float_step", "ddp.arange(0, 1, 0.1)", "torch.arange(0, 1, 0.1)", F32)
case("arange_float_negative_step", "ddp.arange(1, -1, -0.25)", "torch.arange(1, -1, -0.25)", F32)
case("arange_float_start", "ddp.arange(0.5, 3)", "torch.arange(0.5, 3)", F32)
case("arange_float_step_uneven", "ddp.arange(-1, 1, 0.3)", "torch.arange(-1, 1, 0.3)", F32)
case("arange_float64", "ddp.arange(-1, 1, 0.3, {dtype='float64'})",
     "torch.arange(-1, 1, 0.3, dtype=torch.float64)", F64)
case("arange_dtype_float32", "ddp.arange(0, 5, {dtype='float32'})",
     "torch.arange(0, 5, dtype=torch.float32)", EXACT)
case("arange_dtype_int32", "ddp.arange(3, {dtype='int32'})",
     "torch.arange(3, dtype=torch.int32)", EXACT)
case("arange_empty", "ddp.arange(3, 3)", "torch.arange(3, 3)", EXACT)
case("linspace_0_1_5", "ddp.linspace(0, 1, 5)", "torch.linspace(0, 1, 5)", LIN32)
case("linspace_neg_7", "ddp.linspace(-1, 1, 7)", "torch.linspace(-1, 1, 7)", LIN32)
case("linspace_0_1_10", "ddp.linspace(0, 1, 10)", "torch.linspace(0, 1, 10)", LIN32)
case("linspace_one_step", "ddp.linspace(3, 10, 1)", "torch.linspace(3, 10, 1)", EXACT)
case("linspace_zero_steps", "ddp.linspace(0, 1, 0)", "torch.linspace(0, 1, 0)", EXACT)
case("linspace_float64_desc", "ddp.linspace(2, -3, 11, {dtype='float64'})",
     "torch.linspace(2, -3, 11, dtype=torch.float64)", F64)
case("linspace_int64", "ddp.linspace(0, 10, 4, {dtype='int64'})",
     "torch.linspace(0, 10, 4, dtype=torch.int64)", EXACT)
case("eye_3", "ddp.eye(3)", "torch.eye(3)", EXACT)
case("eye_2x4", "ddp.eye(2, 4)", "torch.eye(2, 4)", EXACT)
case("eye_4x2_bool", "ddp.eye(4, 2, {dtype='bool'})", "torch.eye(4, 2, dtype=torch.bool)", EXACT)
case("eye_int64", "ddp.eye(3, {dtype='int64'})", "torch.eye(3, dtype=torch.int64)", EXACT)
case("full_int", "ddp.full({2, 3}, 7)", "torch.full((2, 3), 7)", EXACT)
case("full_float", "ddp.full({2, 2}, 2.5)", "torch.full((2, 2), 2.5)", EXACT)
case("full_bool", "ddp.full({3}, true)", "torch.full((3,), True)", EXACT)
case("full_float64", "ddp.full({2}, 0.1, {dtype='float64'})",
     "torch.full((2,), 0.1, dtype=torch.float64)", EXACT)
case("full_0dim", "ddp.full({}, -4)", "torch.full((), -4)", EXACT)
case("full_bfloat16_rounds", "ddp.full({2}, 1.0078125 + 2^-9, {dtype='bfloat16'})",
     "torch.full((2,), 1.0078125 + 2 ** -9, dtype=torch.bfloat16)", EXACT)
case("zeros_default", "ddp.zeros(2, 3)", "torch.zeros(2, 3)", EXACT)
case("zeros_table_shape", "ddp.zeros({3, 1})", "torch.zeros(3, 1)", EXACT)
case("zeros_bool", "ddp.zeros(4, {dtype='bool'})", "torch.zeros(4, dtype=torch.bool)", EXACT)
case("zeros_empty", "ddp.zeros(0, 3)", "torch.zeros(0, 3)", EXACT)
case("zeros_float64", "ddp.zeros({2}, {dtype='float64'})", "torch.zeros(2, dtype=torch.float64)", EXACT)
case("ones_int32", "ddp.ones({2, 3}, {dtype='int32'})", "torch.ones(2, 3, dtype=torch.int32)", EXACT)
case("ones_uint8", "ddp.ones(3, {dtype='uint8'})", "torch.ones(3, dtype=torch.uint8)", EXACT)
case("ones_bfloat16", "ddp.ones(2, {dtype='bfloat16'})", "torch.ones(2, dtype=torch.bfloat16)", EXACT)
case("ones_float16", "ddp.ones(2, {dtype='float16'})", "torch.ones(2, dtype=torch.float16)", EXACT)
case("ones_0dim", "ddp.ones({})", "torch.ones(())", EXACT)
case("zeros_like", "ddp.zeros_like(a)", "torch.zeros_like(a)", EXACT, a=ri(0, 9, 2, 3, dtype=torch.int32))
case("ones_like_dtype", "ddp.ones_like(a, {dtype='float64'})",
     "torch.ones_like(a, dtype=torch.float64)", EXACT, a=ri(0, 9, 2, 3))
case("full_like", "ddp.full_like(a, 3)", "torch.full_like(a, 3)", EXACT, a=rn(2, 2))
case("tensor_ints", "ddp.tensor({{1, 2}, {3, 4}})", "torch.tensor([[1, 2], [3, 4]])", EXACT)
case("tensor_fractions", "ddp.tensor({1.5, -2, 0.25})", "torch.tensor([1.5, -2.0, 0.25])", EXACT)
case("tensor_bools", "ddp.tensor({true, false, true})", "torch.tensor([True, False, True])", EXACT)
case("tensor_scalar", "ddp.tensor(3)", "torch.tensor(3)", EXACT)
case("tensor_scalar_float", "ddp.tensor(0.1)", "torch.tensor(0.1)", EXACT)
case("tensor_dtype_float64", "ddp.tensor({0.1, 0.2}, {dtype='float64'})",
     "torch.tensor([0.1, 0.2], dtype=torch.float64)", EXACT)
case("tensor_dtype_float32_rounds", "ddp.tensor({0.1, 1/3})", "torch.tensor([0.1, 1/3])", EXACT)
case("tensor_from_tensor", "ddp.tensor(a, {dtype='int32'})",
     "a.to(torch.int32)", EXACT, a=ri(-5, 5, 4))
case("clone", "a:clone()", "a.clone()", EXACT, a=rn(2, 3))

# ===========================================================================
# Binary elementwise ops
# ===========================================================================
BINOPS = ["add", "sub", "mul", "div", "pow", "maximum", "minimum", "eq", "ne",
          "lt", "le", "gt", "ge", "logical_and", "logical_or", "fmod",
          "remainder", "atan2"]
CMP = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or"}
TRANS_BIN = {"pow", "atan2"}


def tol_for(op, dtype):
    if op in CMP or dtype not in (torch.float32, torch.float64):
        return EXACT
    if dtype == torch.float64:
        return F64T if op in TRANS_BIN else F64
    return F32T if op in TRANS_BIN else F32


section("binary")
for op in BINOPS:
    # every pair of special values (inf, nan, signed zeros) by broadcasting
    for dt, sfx in ((torch.float32, "f32"), (torch.float64, "f64")):
        case("%s_special_%s" % (op, sfx), "a:%s(b)" % op, "torch.%s(a, b)" % op,
             tol_for(op, dt), a=t(PAIR, dt).reshape(-1, 1), b=t(PAIR, dt).reshape(1, -1))
    # random float32, broadcast (3,4) with (4)
    a = rn(3, 4, scale=2)
    b = rn(4, scale=2)
    if op in ("pow",):
        a = a.abs() + 0.1
    if op in ("div", "fmod", "remainder"):
        b = torch.where(b.abs() < 0.2, torch.full_like(b, 0.75), b)
    case("%s_f32_broadcast" % op, "a:%s(b)" % op, "torch.%s(a, b)" % op, tol_for(op, torch.float32), a=a, b=b)
    # broadcast both ways: (3,1) with (1,4), float64
    case("%s_f64_outer_broadcast" % op, "ddp.%s(a, b)" % op, "torch.%s(a, b)" % op,
         tol_for(op, torch.float64), a=rn(3, 1, dtype=torch.float64) + 2.5,
         b=rn(1, 4, dtype=torch.float64).abs() + 0.5)

# integer kernels
for op in ["add", "sub", "mul", "maximum", "minimum", "eq", "ne", "lt", "le", "gt", "ge",
           "logical_and", "logical_or"]:
    case("%s_int64" % op, "a:%s(b)" % op, "torch.%s(a, b)" % op, EXACT,
         a=ri(-6, 7, 3, 4), b=ri(-6, 7, 4))
    case("%s_int32_0dim" % op, "a:%s(b)" % op, "torch.%s(a, b)" % op, EXACT,
         a=ri(-6, 7, 2, 3, dtype=torch.int32), b=t(2, torch.int32))
    case("%s_uint8" % op, "a:%s(b)" % op, "torch.%s(a, b)" % op, EXACT,
         a=ri(0, 256, 2, 4, dtype=torch.uint8), b=ri(0, 256, 2, 4, dtype=torch.uint8))
    if op != "sub":  # bool - bool is an error in PyTorch
        case("%s_bool" % op, "a:%s(b)" % op, "torch.%s(a, b)" % op, EXACT,
             a=t([True, True, False, False], torch.bool), b=t([True, False, True, False], torch.bool))
case("fmod_int64_signs", "a:fmod(b)", "torch.fmod(a, b)", EXACT,
     a=t([7, -7, 7, -7, 0, 5, -6], torch.int64), b=t([3, 3, -3, -3, 4, -1, 4], torch.int64))
case("remainder_int64_signs", "a:remainder(b)", "torch.remainder(a, b)", EXACT,
     a=t([7, -7, 7, -7, 0, 5, -6], torch.int64), b=t([3, 3, -3, -3, 4, -1, 4], torch.int64))
case("remainder_int32_broadcast", "a:remainder(b)", "torch.remainder(a, b)", EXACT,
     a=ri(-20, 20, 3, 4, dtype=torch.int32), b=t([3, -5, 7, -2], torch.int32))
case("fmod_uint8", "a:fmod(b)", "torch.fmod(a, b)", EXACT,
     a=ri(0, 256, 6, dtype=torch.uint8), b=ri(1, 20, 6, dtype=torch.uint8))
case("pow_int64", "a:pow(b)", "torch.pow(a, b)", EXACT,
     a=t([2, -3, 0, 1, -1, 7, 10], torch.int64), b=t([10, 3, 0, 5, 7, 2, 18], torch.int64))
case("pow_int64_wraps", "a:pow(b)", "torch.pow(a, b)", EXACT,
     a=t([3, -3, 10], torch.int64), b=t([41, 41, 20], torch.int64))
case("pow_int32", "a:pow(b)", "torch.pow(a, b)", EXACT,
     a=t([2, -3, 5], torch.int32), b=t([20, 5, 3], torch.int32))
case("pow_neg_one_negative_exp", "a:pow(b)", "torch.pow(a, b)", EXACT,
     a=t([1, -1, -1], torch.int64), b=t([-3, -3, -2], torch.int64))
case("pow_uint8", "a:pow(2)", "torch.pow(a, 2)", EXACT, a=t([3, 15, 16, 200], torch.uint8))
case("div_int64_true_division", "a:div(b)", "torch.div(a, b)", F32,
     a=ri(-20, 20, 3, 4), b=t([3, -7, 2, 6], torch.int64))
case("div_int_by_zero", "a:div(b)", "torch.div(a, b)", EXACT,
     a=t([1, -1, 0], torch.int64), b=t([0, 0, 0], torch.int64))
case("div_int32_by_int32", "a / b", "a / b", F32,
     a=t([7, -7, 1, 100], torch.int32), b=t([2, 2, 3, 7], torch.int32))
case("atan2_int", "a:atan2(b)", "torch.atan2(a, b)", F32T,
     a=t([1, -1, 0, 3], torch.int64), b=t([1, 1, -1, 0], torch.int64))
case("add_int64_large", "a:add(b)", "torch.add(a, b)", EXACT,
     a=t([2 ** 60 + 1, -2 ** 62, 2 ** 63 - 1], torch.int64), b=t([3, -5, 1], torch.int64))
case("mul_int32_wraps", "a:mul(b)", "torch.mul(a, b)", EXACT,
     a=t([65536, 123456, -70000], torch.int32), b=t([65536, 54321, 70000], torch.int32))
case("add_uint8_wraps", "a:add(b)", "torch.add(a, b)", EXACT,
     a=t([200, 255, 0], torch.uint8), b=t([100, 1, 0], torch.uint8))
case("sub_uint8_wraps", "a:sub(b)", "torch.sub(a, b)", EXACT,
     a=t([3, 0, 255], torch.uint8), b=t([5, 1, 255], torch.uint8))
case("logical_and_mixed", "a:logical_and(b)", "torch.logical_and(a, b)", EXACT,
     a=t([0.0, 0.5, nan, -0.0, 2.0]), b=t([1, 1, 1, 1, 0], torch.int64))
case("logical_or_mixed", "a:logical_or(b)", "torch.logical_or(a, b)", EXACT,
     a=t([0.0, 0.5, nan, -0.0, 0.0]), b=t([0, 0, 0, 0, 3], torch.uint8))
case("eq_int_float", "a:eq(b)", "torch.eq(a, b)", EXACT,
     a=t([1, 2, 3, 16777217], torch.int64), b=t([1.0, 2.5, 3.0, 16777216.0]))

section("binary_alpha_scalars")
case("add_alpha", "a:add(b, 2)", "torch.add(a, b, alpha=2)", F32, a=rn(2, 3), b=rn(3))
case("add_alpha_fraction", "a:add(b, 0.5)", "torch.add(a, b, alpha=0.5)", F32, a=rn(2, 3), b=rn(2, 3))
case("sub_alpha", "a:sub(b, 3)", "torch.sub(a, b, alpha=3)", EXACT, a=ri(-9, 9, 4), b=ri(-9, 9, 4))
case("add_scalar_f32", "a:add(0.1)", "a + 0.1", F32, a=rn(5))
case("mul_scalar_f32", "a * 3", "a * 3", F32, a=rn(5))
case("rsub_scalar", "2 - a", "2 - a", F32, a=rn(5))
case("rdiv_scalar", "1 / a", "1 / a", F32, a=rn(5))
case("div_scalar_int", "a / 4", "a / 4", F32, a=ri(-9, 9, 5))
case("pow_scalar_2", "a ^ 2", "a ** 2", F32, a=rn(5))
case("pow_scalar_half", "a:pow(0.5)", "a ** 0.5", F32T, a=rn(5).abs())
case("pow_scalar_neg1", "a:pow(-1)", "a ** -1", F32, a=rn(5))
case("pow_scalar_3_int", "a:pow(3)", "a ** 3", EXACT, a=ri(-9, 9, 5))
case("pow_scalar_fraction_int", "a:pow(1.5)", "a ** 1.5", F32T, a=ri(0, 9, 5))
case("rpow_scalar_base", "ddp.pow(2, a)", "torch.pow(2, a)", EXACT, a=ri(0, 20, 5))
case("rpow_scalar_base_float", "ddp.pow(2.5, a)", "torch.pow(2.5, a)", F32T, a=rn(5))
case("mod_operator", "a % 3", "a % 3", EXACT, a=ri(-9, 9, 6))
case("mod_operator_negative_divisor", "a % -3", "a % -3", EXACT, a=ri(-9, 9, 6))
case("div_int_by_fraction", "a / 0.5", "a / 0.5", F32, a=ri(-9, 9, 5))
case("pow_float_int_tensor", "a:pow(b)", "torch.pow(a, b)", F32T, a=rn(4), b=t([0, 1, 2, -3], torch.int64))
case("cmp_0dim_f64_int_tensor", "a:lt(b)", "a < b", EXACT, a=t([1, 2, 3], torch.int32), b=t(2.5, torch.float64))
case("mod_operator_float", "a % 1.5", "a % 1.5", F32, a=rn(6, scale=3))
case("unm_operator", "-a", "-a", EXACT, a=rn(5))
case("operators_chain", "(a + b) * a - b / 2", "(a + b) * a - b / 2", F32, a=rn(3, 2), b=rn(2))
case("maximum_scalar", "a:maximum(0)", "torch.maximum(a, torch.tensor(0))", EXACT, a=rn(5))
case("gt_scalar_fraction", "a:gt(0.5)", "a > 0.5", EXACT, a=rn(6))
case("lt_int_fraction", "a:lt(2.5)", "a < 2.5", EXACT, a=t([1, 2, 3, 4], torch.int64))
case("eq_int_scalar", "a:eq(2)", "a == 2", EXACT, a=t([1, 2, 3, 2], torch.int32))
case("ne_bool_scalar", "a:ne(true)", "a != True", EXACT, a=t([True, False], torch.bool))
case("uint8_lt_negative_scalar", "a:lt(-1)", "a < -1", EXACT, a=t([0, 1, 200], torch.uint8))
case("uint8_add_scalar_wraps", "a:add(300)", "a + 300", EXACT, a=t([1, 200], torch.uint8))
case("greater_alias", "a:greater(b)", "torch.greater(a, b)", EXACT, a=ri(0, 3, 5), b=ri(0, 3, 5))
case("multiply_alias", "ddp.multiply(a, b)", "torch.multiply(a, b)", F32, a=rn(4), b=rn(4))
case("true_divide_alias", "a:true_divide(b)", "torch.true_divide(a, b)", F32,
     a=ri(1, 9, 4), b=ri(1, 9, 4))
case("fmax_nan", "a:fmax(b)", "torch.fmax(a, b)", EXACT,
     a=t([1.0, nan, nan, 3.0, -inf]), b=t([nan, 2.0, nan, 4.0, 0.0]))
case("fmax_int_float", "a:fmax(b)", "torch.fmax(a, b)", EXACT,
     a=t([1, 2, 3], torch.int64), b=t([nan, 1.5, 4.0]))
case("fmin_broadcast", "ddp.fmin(a, b)", "torch.fmin(a, b)", EXACT,
     a=t([[nan], [1.0]], torch.float64), b=t([nan, 0.5, 2.0], torch.float64))
case("fmin_nan", "a:fmin(b)", "torch.fmin(a, b)", EXACT,
     a=t([1.0, nan, nan, 3.0, -inf]), b=t([nan, 2.0, nan, 4.0, 0.0]))
case("broadcast_empty", "a:add(b)", "a + b", EXACT, a=torch.zeros(0, 3), b=rn(3))
case("broadcast_3d", "a:mul(b)", "a * b", F32, a=rn(2, 1, 4), b=rn(3, 1))
case("broadcast_0dim_both", "a:sub(b)", "a - b", F32, a=t(2.5), b=t(-1.25))
case("add_noncontiguous", "a:t():add(b)", "a.t() + b", F32, a=rn(4, 3), b=rn(3, 4))

section("promotion")
case("promote_int32_int64", "a:add(b)", "a + b", EXACT,
     a=ri(-9, 9, 4, dtype=torch.int32), b=ri(-9, 9, 4))
case("promote_int64_float32", "a:add(b)", "a + b", F32, a=ri(-9, 9, 4), b=rn(4))
case("promote_int32_float64", "a:mul(b)", "a * b", F64, a=ri(-9, 9, 4, dtype=torch.int32),
     b=rn(4, dtype=torch.float64))
case("promote_float32_float64", "a:add(b)", "a + b", F64, a=rn(4), b=rn(4, dtype=torch.float64))
case("promote_bool_int64", "a:add(b)", "a + b", EXACT,
     a=t([True, False, True], torch.bool), b=t([5, 6, 7], torch.int64))
case("promote_bool_bool_add", "a:add(b)", "a + b", EXACT,
     a=t([True, False, True, False], torch.bool), b=t([True, True, False, False], torch.bool))
case("promote_bool_bool_mul", "a:mul(b)", "a * b", EXACT,
     a=t([True, False, True, False], torch.bool), b=t([True, True, False, False], torch.bool))
case("promote_uint8_int32", "a:add(b)", "a + b", EXACT,
     a=t([250, 3, 0], torch.uint8), b=t([10, -5, -1], torch.int32))
case("promote_uint8_bool", "a:add(b)", "a + b", EXACT,
     a=t([255, 3], torch.uint8), b=t([True, True], torch.bool))
case("promote_int32_lua_int", "a:add(3)", "a + 3", EXACT, a=ri(-9, 9, 4, dtype=torch.int32))
case("promote_int32_lua_fraction", "a:add(2.5)", "a + 2.5", F32, a=ri(-9, 9, 4, dtype=torch.int32))
case("promote_int64_lua_fraction_mul", "a * 0.1", "a * 0.1", F32, a=ri(-9, 9, 4))
case("promote_uint8_lua_fraction", "a:mul(1.5)", "a * 1.5", F32, a=t([1, 3, 255], torch.uint8))
case("promote_bool_lua_int", "a:add(1)", "a + 1", EXACT, a=t([True, False], torch.bool))
case("promote_bool_lua_fraction", "a:mul(2.5)", "a * 2.5", EXACT, a=t([True, False], torch.bool))
case("promote_float32_f64_0dim", "a:add(b)", "a + b", F32, a=rn(4), b=t(0.1, torch.float64))
case("promote_float32_f64_0dim_exact", "a:mul(b)", "a * b", EXACT,
     a=t([1.0, 3.0, 1.0 / 3.0]), b=t(0.1, torch.float64))
case("promote_int32_int64_0dim", "a:add(b)", "a + b", EXACT,
     a=ri(-9, 9, 4, dtype=torch.int32), b=t(100, torch.int64))
case("promote_int32_f64_0dim", "a:add(b)", "a + b", F64,
     a=ri(-9, 9, 4, dtype=torch.int32), b=t(0.5, torch.float64))
case("promote_0dim_f64_0dim_f32", "a:add(b)", "a + b", F64,
     a=t(1.5, torch.float64), b=t(0.1, torch.float32))
case("promote_0dim_int_1d_float16", "a:add(b)", "a + b", HALF,
     a=t(3, torch.int64), b=t([0.5, 1.0, 1000.0], torch.float16))
case("promote_float16_float32", "a:add(b)", "a + b", F32,
     a=t([0.1, 2.0, 3.0], torch.float16), b=rn(3))
case("promote_bfloat16_float16", "a:add(b)", "a + b", F32,
     a=t([0.1, 2.0, 3.0], torch.bfloat16), b=t([0.1, 2.0, 3.0], torch.float16))
case("promote_int64_bfloat16", "a:mul(b)", "a * b", HALF,
     a=t([3, 5, 7], torch.int64), b=t([0.1, 0.7, 1.3], torch.bfloat16))
case("bfloat16_add_rounds", "a:add(b)", "a + b", HALF, a=rn(8, dtype=torch.bfloat16),
     b=rn(8, dtype=torch.bfloat16))
case("float16_mul_rounds", "a:mul(b)", "a * b", HALF, a=rn(8, dtype=torch.float16),
     b=rn(8, dtype=torch.float16))
case("float16_overflow", "a:mul(b)", "a * b", HALF, a=t([300.0, -300.0], torch.float16),
     b=t([300.0, 300.0], torch.float16))
case("bfloat16_div_scalar", "a / 3", "a / 3", HALF, a=rn(6, dtype=torch.bfloat16))
case("cmp_int_float_promotion", "a:ge(b)", "a >= b", EXACT,
     a=t([1, 2, 3], torch.int32), b=t([1.5, 2.0, 2.5], torch.float64))
case("maximum_int_float", "a:maximum(b)", "torch.maximum(a, b)", EXACT,
     a=t([1, 5, -3], torch.int32), b=t([1.5, 2.0, nan]))
case("pow_int_float_tensor", "a:pow(b)", "torch.pow(a, b)", F32T,
     a=t([2, 3, 4], torch.int64), b=t([0.5, -1.0, 1.5]))
case("where_promotes", "ddp.where(c, a, b)", "torch.where(c, a, b)", EXACT,
     c=t([True, False, True], torch.bool), a=t([1, 2, 3], torch.int64), b=t([0.5, 1.5, 2.5]))

section("inplace")
case("add_inplace", "a:add_(b)", "a.add_(b)", F32, a=rn(3, 4), b=rn(4))
case("sub_inplace_alpha", "a:sub_(b, 2)", "a.sub_(b, alpha=2)", F32, a=rn(3, 4), b=rn(3, 4))
case("mul_inplace_scalar", "a:mul_(2.5)", "a.mul_(2.5)", F32, a=rn(5))
case("div_inplace_int_into_float", "a:div_(b)", "a.div_(b)", F32, a=rn(4), b=ri(1, 5, 4))
case("add_inplace_int_scalar", "a:add_(3)", "a.add_(3)", EXACT, a=ri(0, 9, 4, dtype=torch.int32))
case("add_inplace_int64_into_int32", "a:add_(b)", "a.add_(b)", EXACT,
     a=ri(0, 9, 4, dtype=torch.int32), b=ri(0, 9, 4))
case("add_inplace_float64_into_float32", "a:add_(b)", "a.add_(b)", F32, a=rn(4), b=rn(4, dtype=torch.float64))
case("mul_inplace_into_bfloat16", "a:mul_(b)", "a.mul_(b)", HALF, a=rn(4, dtype=torch.bfloat16), b=rn(4))
case("pow_inplace", "a:pow_(2)", "a.pow_(2)", F32, a=rn(4))
case("maximum_inplace", "a:maximum_(b)", "a.copy_(torch.maximum(a, b))", EXACT, a=rn(4), b=rn(4))
case("remainder_inplace", "a:remainder_(3)", "a.remainder_(3)", EXACT, a=ri(-9, 9, 5))
case("atan2_inplace", "a:atan2_(b)", "a.atan2_(b)", F32T, a=rn(5), b=rn(5))
case("eq_inplace_float", "a:eq_(b)", "a.eq_(b)", EXACT, a=t([1.0, 2.0, 3.0]), b=t([1.0, 0.0, 3.0]))
case("inplace_on_view", "a:narrow(1, 1, 2):mul_(10) and a",
     "(a.narrow(1, 1, 2).mul_(10), a)[1]", F32, a=rn(3, 4))
case("add_inplace_noncontiguous_dst", "a:t():add_(b) and a", "(a.t().add_(b), a)[1]", F32, a=rn(3, 4), b=rn(4, 3))
case("exp_inplace_on_view", "a:narrow(0, 0, 2):exp_() and a", "(a.narrow(0, 0, 2).exp_(), a)[1]", F32T, a=rn(3, 4))
case("copy_into_transposed_view", "a:t():copy_(b) and a", "(a.t().copy_(b), a)[1]", EXACT, a=rn(3, 4), b=ri(-5, 5, 4, 3))
case("fill_on_view", "a:narrow(1, 1, 2):fill_(0) and a", "(a.narrow(1, 1, 2).fill_(0), a)[1]", EXACT, a=rn(3, 4))
case("clamp_inplace_on_view", "a:select(1, 2):clamp_(-0.1, 0.1) and a", "(a.select(1, 2).clamp_(-0.1, 0.1), a)[1]",
     EXACT, a=rn(3, 4))
case("inplace_chain", "a:mul_(2):add_(b)", "a.mul_(2).add_(b)", F32, a=rn(4), b=rn(4))
case("copy_broadcast_cast", "a:copy_(b)", "a.copy_(b)", EXACT, a=rn(2, 3), b=ri(-5, 5, 3))
case("copy_float_to_int", "a:copy_(b)", "a.copy_(b)", EXACT, a=ri(0, 2, 4),
     b=t([1.7, -1.7, 2.5, -0.5]))
case("fill_", "a:fill_(2.5)", "a.fill_(2.5)", EXACT, a=rn(2, 2))
case("fill_int", "a:fill_(7)", "a.fill_(7)", EXACT, a=ri(0, 2, 3, dtype=torch.int32))
case("zero_", "a:zero_()", "a.zero_()", EXACT, a=rn(2, 2))
case("set_element", "a:clone():set(1, 2, 9.5)", "setitem(a.clone(), (1, 2), 9.5)", EXACT, a=rn(2, 3))
case("set_negative_index", "a:clone():set(-1, 0, 4)", "setitem(a.clone(), (-1, 0), 4)", EXACT,
     a=ri(0, 3, 2, 3))

# ===========================================================================
# Unary ops
# ===========================================================================
UNOPS = ["neg", "abs", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh",
         "sigmoid", "relu", "silu", "sign", "floor", "ceil", "round", "trunc",
         "reciprocal", "square", "log1p", "expm1", "log2", "logical_not",
         "isnan", "isinf", "isfinite"]
UN_EXACT = {"neg", "abs", "relu", "sign", "floor", "ceil", "round", "trunc",
            "logical_not", "isnan", "isinf", "isfinite"}
UN_ARITH = {"sqrt", "reciprocal", "square"}
UN_PY = {"relu": "torch.relu(a)", "silu": "F.silu(a)"}


def un_tol(op, dtype):
    if op in UN_EXACT:
        return EXACT
    if dtype == torch.float64:
        return F64 if op in UN_ARITH else F64T
    return F32 if op in UN_ARITH else F32T


section("unary")
for op in UNOPS:
    py = UN_PY.get(op, "torch.%s(a)" % op)
    case("%s_special_f32" % op, "a:%s()" % op, py, un_tol(op, torch.float32),
         a=t(SPECIAL + [1e-8, -1e-8, 100.0, -100.0, 0.7853981633974483]))
    case("%s_special_f64" % op, "a:%s()" % op, py, un_tol(op, torch.float64),
         a=t(SPECIAL + [1e-300, -1e-300, 800.0, -800.0], torch.float64))
    case("%s_random_f32" % op, "ddp.%s(a)" % op, py, un_tol(op, torch.float32),
         a=rn(3, 5, scale=3))
    case("%s_noncontiguous" % op, "a:t():%s()" % op, py.replace("(a)", "(a.t())"),
         un_tol(op, torch.float64), a=rn(4, 3, dtype=torch.float64, scale=2))
    if op not in ("isnan", "isinf", "isfinite"):  # in place: same values, same dtype
        inplace = op + "_"
        pyi = ("a.%s()" % inplace) if op not in ("silu",) else "F.silu(a, inplace=True)"
        case("%s_inplace" % op, "a:%s()" % inplace, pyi, un_tol(op, torch.float32),
             a=rn(2, 3, scale=2).abs() + 0.25 if op in ("log", "sqrt", "rsqrt", "log2", "log1p") else rn(2, 3, scale=2))

# integer and bool inputs: int ops keep the dtype, float-only ops give float32
INT_IN = t([-7, -3, -1, 0, 1, 2, 5, 100], torch.int64)
for op in ["neg", "abs", "relu", "sign", "floor", "ceil", "round", "trunc", "square",
           "logical_not", "isnan", "isinf", "isfinite"]:
    case("%s_int64" % op, "a:%s()" % op, UN_PY.get(op, "torch.%s(a)" % op), EXACT, a=INT_IN)
    case("%s_int32" % op, "a:%s()" % op, UN_PY.get(op, "torch.%s(a)" % op), EXACT,
         a=INT_IN.to(torch.int32))
for op in ["exp", "log", "sqrt", "rsqrt", "sin", "cos", "tanh", "sigmoid",
           "reciprocal", "log1p", "expm1", "log2"]:
    py = UN_PY.get(op, "torch.%s(a)" % op)
    case("%s_int64_to_float32" % op, "a:%s()" % op, py, un_tol(op, torch.float32), a=INT_IN)
case("neg_uint8_wraps", "a:neg()", "torch.neg(a)", EXACT, a=t([0, 1, 200], torch.uint8))
case("abs_uint8", "a:abs()", "torch.abs(a)", EXACT, a=t([0, 1, 200], torch.uint8))
case("square_uint8_wraps", "a:square()", "torch.square(a)", EXACT, a=t([3, 16, 17], torch.uint8))
case("sqrt_uint8", "a:sqrt()", "torch.sqrt(a)", F32, a=t([0, 4, 200], torch.uint8))
case("logical_not_bool", "a:logical_not()", "torch.logical_not(a)", EXACT, a=t([True, False], torch.bool))
case("logical_not_uint8", "a:logical_not()", "torch.logical_not(a)", EXACT, a=t([0, 3], torch.uint8))
case("isnan_bool", "a:isnan()", "torch.isnan(a)", EXACT, a=t([True, False], torch.bool))
case("square_bool_to_int64", "a:square()", "torch.square(a)", EXACT, a=t([True, False], torch.bool))
case("sign_bool", "a:sign()", "torch.sign(a)", EXACT, a=t([True, False], torch.bool))
case("abs_int64_min", "a:abs()", "torch.abs(a)", EXACT, a=t([-2 ** 63, 2 ** 63 - 1], torch.int64))
case("round_half_even", "a:round()", "torch.round(a)", EXACT,
     a=t([-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 0.49999997, 4.5000005, 8388609.0]))
case("round_half_even_f64", "a:round()", "torch.round(a)", EXACT,
     a=t([-2.5, -0.5, 0.5, 2.5, 0.49999999999999994, 4503599627370497.0], torch.float64))
case("floor_ceil_trunc_neg", "a:floor(), a:ceil(), a:trunc()",
     "(torch.floor(a), torch.ceil(a), torch.trunc(a))", EXACT, a=t([-1.5, -0.2, 0.2, 1.5, -2.0]))
case("unary_bfloat16_exp", "a:exp()", "torch.exp(a)", (2 ** -7, 0), a=rn(8, dtype=torch.bfloat16))
case("unary_bfloat16_sqrt", "a:sqrt()", "torch.sqrt(a)", HALF, a=rn(8, dtype=torch.bfloat16).abs())
case("unary_float16_neg", "a:neg()", "torch.neg(a)", EXACT, a=rn(8, dtype=torch.float16))
case("unary_bfloat16_sigmoid", "a:sigmoid()", "torch.sigmoid(a)", (2 ** -7, 0), a=rn(8, dtype=torch.bfloat16))
case("fix_alias", "a:fix()", "torch.fix(a)", EXACT, a=rn(5, scale=3))
case("negative_alias", "a:negative()", "torch.negative(a)", EXACT, a=rn(5))
case("absolute_alias", "a:absolute()", "torch.absolute(a)", EXACT, a=rn(5))

section("gelu")
GELU_IN = t(SPECIAL + [-6.0, -4.0, -0.1, 0.1, 4.0, 6.0, 1e-8])
case("gelu_none_special", "a:gelu()", "F.gelu(a)", GELU32, a=GELU_IN)
case("gelu_none_explicit", "a:gelu('none')", "F.gelu(a, approximate='none')", GELU32, a=rn(3, 4, scale=3))
case("gelu_tanh_special", "a:gelu('tanh')", "F.gelu(a, approximate='tanh')", F32T, a=GELU_IN)
case("gelu_tanh_random", "a:gelu('tanh')", "F.gelu(a, approximate='tanh')", F32T, a=rn(3, 4, scale=3))
case("gelu_f64", "a:gelu()", "F.gelu(a)", F64T, a=rn(3, 4, dtype=torch.float64, scale=3))
case("gelu_tanh_f64", "a:gelu('tanh')", "F.gelu(a, approximate='tanh')", F64T,
     a=rn(3, 4, dtype=torch.float64, scale=3))
case("gelu_inplace", "a:gelu_()", "a.copy_(F.gelu(a))", GELU32, a=rn(5))
case("gelu_tanh_inplace", "a:gelu_('tanh')", "a.copy_(F.gelu(a, approximate='tanh'))", F32T, a=rn(5))

section("clamp")
CL = t([-inf, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, inf, nan])
case("clamp_min_only", "a:clamp(-0.5)", "torch.clamp(a, min=-0.5)", EXACT, a=CL)
case("clamp_max_only", "a:clamp(nil, 0.5)", "torch.clamp(a, max=0.5)", EXACT, a=CL)
case("clamp_both", "a:clamp(-1, 1)", "torch.clamp(a, -1, 1)", EXACT, a=CL)
case("clamp_min_gt_max", "a:clamp(1, -1)", "torch.clamp(a, 1, -1)", EXACT, a=CL)
case("clamp_int", "a:clamp(0, 5)", "torch.clamp(a, 0, 5)", EXACT, a=ri(-10, 10, 8))
case("clamp_int32_min", "a:clamp(-3)", "torch.clamp(a, min=-3)", EXACT, a=ri(-10, 10, 8, dtype=torch.int32))
case("clamp_uint8", "a:clamp(10, 200)", "torch.clamp(a, 10, 200)", EXACT, a=ri(0, 256, 8, dtype=torch.uint8))
case("clamp_int_fractional_bound", "a:clamp(0.5)", "torch.clamp(a, min=0.5)", EXACT,
     a=t([-1, 0, 1, 2], torch.int64))
case("clamp_int_fractional_both", "a:clamp(-1.5, 1.5)", "torch.clamp(a, -1.5, 1.5)", EXACT,
     a=t([-3, -1, 0, 1, 3], torch.int32))
case("clamp_bool_to_int64", "a:clamp(0, 1)", "torch.clamp(a, 0, 1)", EXACT, a=t([True, False], torch.bool))
case("clamp_bool_fractional", "a:clamp(0.5)", "torch.clamp(a, 0.5)", EXACT, a=t([True, False], torch.bool))
case("clamp_uint8_inf_bound", "a:clamp(nil, math.huge)", "torch.clamp(a, max=inf)", EXACT, a=t([1, 5], torch.uint8))
case("clamp_f64", "a:clamp(-0.3, 0.3)", "torch.clamp(a, -0.3, 0.3)", EXACT, a=rn(6, dtype=torch.float64))
case("clamp_f32_rounds_bound", "a:clamp(0.1)", "torch.clamp(a, min=0.1)", EXACT, a=t([0.0, 0.1, 0.2]))
case("clamp_bfloat16", "a:clamp(-0.3, 0.3)", "torch.clamp(a, -0.3, 0.3)", EXACT, a=rn(6, dtype=torch.bfloat16))
case("clamp_noncontiguous", "a:t():clamp(-0.5, 0.5)", "torch.clamp(a.t(), -0.5, 0.5)", EXACT, a=rn(3, 4))
case("clamp_inplace", "a:clamp_(0, 1)", "a.clamp_(0, 1)", EXACT, a=rn(6))
case("clamp_min_fn", "a:clamp_min(0)", "torch.clamp_min(a, 0)", EXACT, a=rn(6))
case("clamp_max_fn", "a:clamp_max(0)", "torch.clamp_max(a, 0)", EXACT, a=rn(6))
case("clip_alias", "a:clip(-0.5, 0.5)", "torch.clip(a, -0.5, 0.5)", EXACT, a=rn(6))

section("where")
case("where_same", "ddp.where(c, a, b)", "torch.where(c, a, b)", EXACT,
     c=ri(0, 2, 3, 4).bool(), a=rn(3, 4), b=rn(3, 4))
case("where_broadcast", "ddp.where(c, a, b)", "torch.where(c, a, b)", EXACT,
     c=ri(0, 2, 3, 1).bool(), a=rn(1, 4), b=rn(3, 4))
case("where_scalar_other", "ddp.where(c, a, 0)", "torch.where(c, a, 0)", EXACT,
     c=ri(0, 2, 5).bool(), a=rn(5))
case("where_scalar_fraction_int", "ddp.where(c, a, 0.5)", "torch.where(c, a, 0.5)", EXACT,
     c=ri(0, 2, 5).bool(), a=ri(-9, 9, 5))
case("where_uint8_cond", "ddp.where(c, a, b)", "torch.where(c.bool(), a, b)", EXACT,
     c=t([0, 1, 2], torch.uint8), a=t([1, 2, 3], torch.int32), b=t([-1, -2, -3], torch.int32))
case("where_int32_int64", "ddp.where(c, a, b)", "torch.where(c, a, b)", EXACT,
     c=t([True, False], torch.bool), a=t([1, 2], torch.int32), b=t([-1, -2], torch.int64))
case("where_method", "a:where(c, b)", "a.where(c, b)", EXACT,
     c=ri(0, 2, 2, 3).bool(), a=rn(2, 3), b=rn(3))
case("where_bool_values", "ddp.where(c, a, b)", "torch.where(c, a, b)", EXACT,
     c=t([True, False, True], torch.bool), a=t([True, True, False], torch.bool), b=t([False, True, True], torch.bool))
case("where_noncontiguous", "ddp.where(c:t(), a:t(), b)", "torch.where(c.t(), a.t(), b)", EXACT,
     c=ri(0, 2, 4, 3).bool(), a=rn(4, 3, dtype=torch.float64), b=rn(3, 4, dtype=torch.float64))
case("where_both_scalars_int", "ddp.where(c, 1, 0)", "torch.where(c, 1, 0)", EXACT,
     c=t([True, False, True], torch.bool))
case("where_both_scalars_float", "ddp.where(c, 1.5, 0)", "torch.where(c, 1.5, 0)", EXACT,
     c=t([True, False, True], torch.bool))
case("where_0dim", "ddp.where(c, a, b)", "torch.where(c, a, b)", EXACT,
     c=t(True, torch.bool), a=t(1.5), b=rn(3))

# Big enough (> 65536 elements) for the thread pool; inputs made in Lua by
# arange so the file stays small, outputs reduced to a few hundred values.
section("threaded")
case("threaded_binary_broadcast_noncontiguous",
     "ddp.arange(120000, {dtype='float64'}):view(300, 400):t():mul(ddp.arange(300, {dtype='float64'}):add(1)):sum(0)",
     "torch.arange(120000, dtype=torch.float64).view(300, 400).t().mul(torch.arange(300, dtype=torch.float64) + 1).sum(0)",
     F64T)
case("threaded_unary_f32", "ddp.arange(70000):float():mul(0.001):sin():view(70, 1000):sum(1)",
     "torch.arange(70000).float().mul(0.001).sin().view(70, 1000).sum(1)", F32L)
case("threaded_unary_strided", "ddp.arange(80000, {dtype='float64'}):view(200, 400):t():mul(1e-4):exp():select(1, 7)",
     "torch.arange(80000, dtype=torch.float64).view(200, 400).t().mul(1e-4).exp().select(1, 7)", F64T)
case("threaded_cast_noncontiguous", "ddp.arange(80000):view(200, 400):t():to('int32'):sum(1)",
     "torch.arange(80000).view(200, 400).t().to(torch.int32).sum(1)", EXACT)
case("threaded_cast_to_bfloat16", "ddp.arange(70000):float():mul(0.01):bfloat16():float():narrow(0, 65000, 300)",
     "torch.arange(70000).float().mul(0.01).bfloat16().float().narrow(0, 65000, 300)", EXACT)
case("threaded_where", "ddp.where(ddp.arange(70000):remainder(3):eq(0), ddp.arange(70000), -1):sum()",
     "torch.where(torch.arange(70000).remainder(3).eq(0), torch.arange(70000), -1).sum()", EXACT)
case("threaded_clamp", "ddp.arange(-40000, 40000):clamp(-100, 100):view(400, 200):sum(0)",
     "torch.arange(-40000, 40000).clamp(-100, 100).view(400, 200).sum(0)", EXACT)
case("threaded_inplace_broadcast", "ddp.zeros(300, 300):add_(ddp.arange(300):float()):t():mul_(2):sum(1)",
     "torch.zeros(300, 300).add_(torch.arange(300).float()).t().mul_(2).sum(1)", F32R)
case("threaded_compare", "ddp.arange(70000):float():mul(0.37):floor():lt(ddp.arange(70000):mul(0.37)):sum()",
     "torch.arange(70000).float().mul(0.37).floor().lt(torch.arange(70000).mul(0.37)).sum()", EXACT)
case("threaded_reduce_noncontiguous", "ddp.arange(100000, {dtype='float64'}):view(100, 1000):t():sum(1)",
     "torch.arange(100000, dtype=torch.float64).view(100, 1000).t().sum(1)", F64T)
case("threaded_reduce_all", "ddp.arange(100000):float():mul(0.001):cos():sum()",
     "torch.arange(100000).float().mul(0.001).cos().sum()", F32L)
case("threaded_max_dim", "ddp.arange(100000):mul(7919):remainder(100003):float():view(250, 400):max(0)",
     "torch.arange(100000).mul(7919).remainder(100003).float().view(250, 400).max(0)", EXACT)
case("threaded_argmin_noncontiguous", "ddp.arange(100000):mul(7919):remainder(100003):view(250, 400):t():argmin(1)",
     "torch.arange(100000).mul(7919).remainder(100003).view(250, 400).t().argmin(1)", EXACT)
case("threaded_softmax", "ddp.arange(100000):float():mul(1e-4):cos():view(100, 1000):log_softmax(1):select(1, 0)",
     "torch.arange(100000).float().mul(1e-4).cos().view(100, 1000).log_softmax(1).select(1, 0)", F32T)
case("threaded_matmul", "ddp.arange(8192):float():view(64, 128):mul(1e-3):matmul(ddp.arange(4096):float():view(128, 32):mul(1e-3)):sum(0)",
     "torch.arange(8192).float().view(64, 128).mul(1e-3).matmul(torch.arange(4096).float().view(128, 32).mul(1e-3)).sum(0)",
     F32R)

# ===========================================================================
# Dtype conversions
# ===========================================================================
section("conversion")
FRAC = t([-2.7, -1.5, -0.5, -0.0, 0.0, 0.5, 0.99, 1.5, 2.5, 3.99, 100.25, 1e6 + 0.5,
          123456789.0, 16777217.0, -2147483520.0, 2147483520.0])
for dst, nm in [(torch.float64, "float64"), (torch.int32, "int32"), (torch.int64, "int64"),
                (torch.bool, "bool"), (torch.bfloat16, "bfloat16"), (torch.float16, "float16")]:
    case("f32_to_%s" % nm, "a:to('%s')" % nm, "a.to(torch.%s)" % nm, EXACT, a=FRAC)
case("f32_to_uint8", "a:to('uint8')", "a.to(torch.uint8)", EXACT,
     a=t([0.0, 0.5, 1.5, 2.7, 200.9, 255.0, 255.99]))
case("f32_to_uint8_negative_wraps", "a:to('uint8')", "a.to(torch.uint8)", EXACT,
     a=t([-3.7, -1.0, 300.7, -300.2]))
case("f32_special_to_bool", "a:to('bool')", "a.to(torch.bool)", EXACT, a=t(SPECIAL))
case("f32_special_to_float16", "a:to('float16')", "a.to(torch.float16)", EXACT,
     a=t(SPECIAL + [65504.0, 65520.0, 70000.0, -1e5, 1e-5, 6e-8, 2e-8, 3e-8, 1e-4 + 1e-8]))
case("f32_special_to_bfloat16", "a:to('bfloat16')", "a.to(torch.bfloat16)", EXACT,
     a=t(SPECIAL + [3.4e38, -3.4e38, 1e-39, 1e-45]))
BF_TIES = [1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 1.0 + 2 ** -8 + 2 ** -20, -(1.0 + 2 ** -8),
           2.0 + 2 ** -7, 2.0 + 3 * 2 ** -7, 1.0 + 2 ** -9, 255.5, 256.5, 257.0, 259.0]
case("bfloat16_round_to_even", "a:to('bfloat16'):to('float32')", "a.to(torch.bfloat16).to(torch.float32)",
     EXACT, a=t(BF_TIES))
case("bfloat16_roundtrip_random", "a:bfloat16():float()", "a.bfloat16().float()", EXACT, a=rn(40, scale=10))
case("float16_roundtrip_random", "a:half():float()", "a.half().float()", EXACT, a=rn(40, scale=10))
case("float16_ties", "a:to('float16')", "a.to(torch.float16)", EXACT,
     a=t([1.0 + 2 ** -11, 1.0 + 3 * 2 ** -11, 2048.0 + 1.0, 2048.0 + 3.0, 6.1035156e-05 * 1.5]))
case("f64_to_f32", "a:to('float32')", "a.to(torch.float32)", EXACT,
     a=t([0.1, 1 / 3, 1e40, -1e40, 1e-46, 3.4028235677973366e38, 16777217.0, nan, -inf],
         torch.float64))
case("f64_to_bfloat16", "a:to('bfloat16')", "a.to(torch.bfloat16)", EXACT,
     a=t([0.1, 1 / 3, 1.00390625, 1.0039062500000002], torch.float64))
case("f64_to_int64", "a:to('int64')", "a.to(torch.int64)", EXACT,
     a=t([-2.9, 2.9, 1e15 + 0.5, -9007199254740993.0, 4611686018427387904.0], torch.float64))
case("int64_to_f32", "a:to('float32')", "a.to(torch.float32)", EXACT,
     a=t([16777217, 16777219, -16777217, 2 ** 40 + 1, 2 ** 62 + 2 ** 38 + 1], torch.int64))
case("int64_to_f64_large", "a:to('float64')", "a.to(torch.float64)", EXACT,
     a=t([2 ** 53 + 1, 2 ** 53 + 3, -2 ** 63], torch.int64))
case("int64_to_int32_wraps", "a:to('int32')", "a.to(torch.int32)", EXACT,
     a=t([2 ** 32 + 5, 2 ** 31, -2 ** 31 - 1, -1, 7], torch.int64))
case("int64_to_uint8_wraps", "a:to('uint8')", "a.to(torch.uint8)", EXACT,
     a=t([-1, 255, 256, 257, -256, 1000], torch.int64))
case("int64_to_bool", "a:to('bool')", "a.to(torch.bool)", EXACT, a=t([-1, 0, 2, 2 ** 40], torch.int64))
case("int64_to_bfloat16", "a:to('bfloat16')", "a.to(torch.bfloat16)", EXACT,
     a=t([257, 258, 259, 1000001, -3], torch.int64))
case("int32_to_float16", "a:to('float16')", "a.to(torch.float16)", EXACT,
     a=t([2049, 2051, 65519, 65520, 100000, -7], torch.int32))
case("bool_to_f32", "a:float()", "a.float()", EXACT, a=t([True, False], torch.bool))
case("bool_to_int64", "a:long()", "a.long()", EXACT, a=t([True, False], torch.bool))
case("uint8_to_int32", "a:int()", "a.int()", EXACT, a=t([0, 128, 255], torch.uint8))
case("uint8_to_f32", "a:float()", "a.float()", EXACT, a=t([0, 128, 255], torch.uint8))
case("int32_to_uint8_byte", "a:byte()", "a.byte()", EXACT, a=t([-1, 255, 256, 1000], torch.int32))
case("bfloat16_to_f32", "a:float()", "a.float()", EXACT, a=rn(10, dtype=torch.bfloat16))
case("float16_to_f64", "a:double()", "a.double()", EXACT, a=rn(10, dtype=torch.float16))
case("float16_to_bfloat16", "a:bfloat16()", "a.bfloat16()", EXACT, a=rn(10, dtype=torch.float16, scale=100))
case("bfloat16_to_int64", "a:long()", "a.long()", EXACT, a=rn(10, dtype=torch.bfloat16, scale=100))
case("f32_to_bool_method", "a:bool()", "a.bool()", EXACT, a=t([0.0, 1e-30, -2.0]))
case("to_same_dtype", "a:to('float32')", "a.to(torch.float32)", EXACT, a=rn(3))
case("type_method", "a:type('float64')", "a.type(torch.float64)", EXACT, a=rn(3))
case("to_noncontiguous", "a:t():to('int32')", "a.t().to(torch.int32)", EXACT, a=rn(3, 4, scale=5))

# ===========================================================================
# Views
# ===========================================================================
section("views")
A = ar(2, 3, 4)
case("view_2d", "a:view(4, 6)", "a.view(4, 6)", EXACT, a=A)
case("view_infer", "a:view(-1, 4)", "a.view(-1, 4)", EXACT, a=A)
case("view_table", "a:view({3, 8})", "a.view(3, 8)", EXACT, a=A)
case("view_0dim", "a:view({})", "a.view(())", EXACT, a=t([5.0]))
case("view_from_0dim", "a:view(1, 1)", "a.view(1, 1)", EXACT, a=t(5.0))
case("view_empty", "a:view(0, 5)", "a.view(0, 5)", EXACT, a=torch.zeros(5, 0))
case("reshape_contiguous", "a:reshape(6, 4)", "a.reshape(6, 4)", EXACT, a=A)
case("reshape_noncontiguous", "a:transpose(0, 2):reshape(6, 4)", "a.transpose(0, 2).reshape(6, 4)", EXACT, a=A)
case("reshape_infer_noncontig", "a:permute(1, 0, 2):reshape(-1)", "a.permute(1, 0, 2).reshape(-1)", EXACT, a=A)
case("transpose_12", "a:transpose(1, 2)", "a.transpose(1, 2)", EXACT, a=A)
case("transpose_negative", "a:transpose(-1, 0)", "a.transpose(-1, 0)", EXACT, a=A)
case("t_2d", "a:t()", "a.t()", EXACT, a=ar(3, 4))
case("t_1d", "a:t()", "a.t()", EXACT, a=ar(3))
case("swapaxes", "a:swapaxes(0, 1)", "a.swapaxes(0, 1)", EXACT, a=A)
case("permute_varargs", "a:permute(2, 0, 1)", "a.permute(2, 0, 1)", EXACT, a=A)
case("permute_table", "a:permute({1, 2, 0})", "a.permute(1, 2, 0)", EXACT, a=A)
case("permute_negative", "a:permute(-1, -3, -2)", "a.permute(-1, -3, -2)", EXACT, a=A)
case("narrow", "a:narrow(2, 1, 2)", "a.narrow(2, 1, 2)", EXACT, a=A)
case("narrow_dim0", "a:narrow(0, 1, 1)", "a.narrow(0, 1, 1)", EXACT, a=A)
case("narrow_empty", "a:narrow(1, 3, 0)", "a.narrow(1, 3, 0)", EXACT, a=A)
case("select", "a:select(1, 2)", "a.select(1, 2)", EXACT, a=A)
case("select_negative", "a:select(-1, -1)", "a.select(-1, -1)", EXACT, a=A)
case("select_to_0dim", "a:select(0, 2)", "a.select(0, 2)", EXACT, a=ar(4))
case("get_subtensor", "a:get(1, 0)", "a[1, 0]", EXACT, a=A)
case("squeeze_all", "a:squeeze()", "a.squeeze()", EXACT, a=ar(1, 3, 1, 2))
case("squeeze_dim", "a:squeeze(0)", "a.squeeze(0)", EXACT, a=ar(1, 3, 1, 2))
case("squeeze_noop", "a:squeeze(1)", "a.squeeze(1)", EXACT, a=ar(1, 3, 1, 2))
case("squeeze_negative", "a:squeeze(-2)", "a.squeeze(-2)", EXACT, a=ar(1, 3, 1, 2))
case("squeeze_to_0dim", "a:squeeze()", "a.squeeze()", EXACT, a=ar(1, 1))
case("unsqueeze_0", "a:unsqueeze(0)", "a.unsqueeze(0)", EXACT, a=ar(2, 3))
case("unsqueeze_middle", "a:unsqueeze(1)", "a.unsqueeze(1)", EXACT, a=ar(2, 3))
case("unsqueeze_last", "a:unsqueeze(-1)", "a.unsqueeze(-1)", EXACT, a=ar(2, 3))
case("unsqueeze_0dim", "a:unsqueeze(0)", "a.unsqueeze(0)", EXACT, a=t(7.0))
case("expand", "a:expand(3, 4)", "a.expand(3, 4)", EXACT, a=ar(3, 1))
case("expand_new_dims", "a:expand(2, 3, 4)", "a.expand(2, 3, 4)", EXACT, a=ar(3, 1))
case("expand_keep", "a:expand(-1, 4)", "a.expand(-1, 4)", EXACT, a=ar(3, 1))
case("expand_0dim", "a:expand(2, 2)", "a.expand(2, 2)", EXACT, a=t(1.5))
case("expand_as", "a:expand_as(b)", "a.expand_as(b)", EXACT, a=ar(1, 3), b=rn(2, 3))
case("expand_then_add", "a:expand(3, 4):add(b)", "a.expand(3, 4) + b", F32, a=rn(3, 1), b=rn(3, 4))
case("expand_then_contiguous", "a:expand(2, 3):contiguous()", "a.expand(2, 3).contiguous()", EXACT, a=ar(3))
case("flatten_all", "a:flatten()", "a.flatten()", EXACT, a=A)
case("flatten_from_1", "a:flatten(1)", "a.flatten(1)", EXACT, a=A)
case("flatten_0_1", "a:flatten(0, 1)", "a.flatten(0, 1)", EXACT, a=A)
case("flatten_noncontiguous", "a:transpose(0, 1):flatten()", "a.transpose(0, 1).flatten()", EXACT, a=A)
case("flatten_0dim", "a:flatten()", "a.flatten()", EXACT, a=t(3.0))
case("unflatten", "a:unflatten(1, {2, 2})", "a.unflatten(1, (2, 2))", EXACT, a=ar(3, 4))
case("contiguous_of_transpose", "a:transpose(0, 1):contiguous()", "a.transpose(0, 1).contiguous()", EXACT, a=A)
case("contiguous_of_narrow", "a:narrow(2, 1, 2):contiguous()", "a.narrow(2, 1, 2).contiguous()", EXACT, a=A)
case("chained_views", "a:permute(2, 1, 0):narrow(0, 1, 2):select(1, 0)",
     "a.permute(2, 1, 0).narrow(0, 1, 2).select(1, 0)", EXACT, a=A)
case("view_as", "a:view_as(b)", "a.view_as(b)", EXACT, a=ar(6), b=rn(2, 3))
case("reshape_as", "a:t():reshape_as(b)", "a.t().reshape_as(b)", EXACT, a=ar(2, 3), b=rn(6))
case("as_strided", "a:as_strided({2, 2}, {1, 2})", "a.as_strided((2, 2), (1, 2))", EXACT, a=ar(6))
case("as_strided_offset", "a:as_strided({2, 3}, {3, 1}, 2)", "a.as_strided((2, 3), (3, 1), 2)", EXACT, a=ar(9))
case("unbind", "a:unbind(1)", "a.unbind(1)", EXACT, a=ar(2, 3))
case("views_int64", "a:t():narrow(0, 1, 2)", "a.t().narrow(0, 1, 2)", EXACT, a=ri(-100, 100, 3, 4))
case("views_bool", "a:transpose(0, 1)", "a.transpose(0, 1)", EXACT, a=ri(0, 2, 2, 3).bool())
case("views_bfloat16", "a:permute(1, 0)", "a.permute(1, 0)", EXACT, a=rn(2, 3, dtype=torch.bfloat16))
case("size_of_view", "ddp.tensor(a:permute(2, 0, 1):size())", "torch.tensor(a.permute(2, 0, 1).size())", EXACT, a=A)
case("stride_of_view", "ddp.tensor(a:transpose(0, 2):stride())", "torch.tensor(a.transpose(0, 2).stride())", EXACT, a=A)
case("numel_dim", "ddp.tensor({a:numel(), a:dim(), a:size(-1)})",
     "torch.tensor([a.numel(), a.dim(), a.size(-1)])", EXACT, a=A)
case("is_contiguous", "ddp.tensor({a:is_contiguous(), a:t():is_contiguous(), a:expand(2, 3, 4):is_contiguous()})",
     "torch.tensor([a.is_contiguous(), a.t().is_contiguous(), a.expand(2, 3, 4).is_contiguous()])",
     EXACT, a=ar(3, 4))
case("totable_roundtrip", "ddp.tensor(a:t():totable())", "a.t().contiguous()", EXACT, a=ri(-9, 9, 2, 3))
case("equal_true", "ddp.tensor(a:equal(b))", "torch.tensor(torch.equal(a, b))", EXACT, a=ar(2, 3), b=ar(2, 3))
case("equal_false", "ddp.tensor(a:equal(b))", "torch.tensor(torch.equal(a, b))", EXACT, a=ar(2, 3), b=ar(3, 2))
case("allclose", "ddp.tensor({a:allclose(b), a:allclose(b, 0, 1e-12)})",
     "torch.tensor([torch.allclose(a, b), torch.allclose(a, b, 0, 1e-12)])", EXACT,
     a=t([1.0, 2.0], torch.float64), b=t([1.0 + 1e-7, 2.0], torch.float64))
case("isclose", "a:isclose(b)", "torch.isclose(a, b)", EXACT,
     a=t([1.0, 2.0, inf, 1.0], torch.float64), b=t([1.0 + 1e-7, 2.1, inf, -1.0], torch.float64))

# ===========================================================================
# Reductions
# ===========================================================================
section("reductions")
X = rn(3, 4, 5)
XP = (1 + 0.1 * rn(3, 4, 5))  # prod: values near 1


def reduce_cases(op, x, tol, py_op=None):
    p = py_op or op
    all_dims = ", (0, 1, 2)" if op == "logsumexp" else ""  # torch.logsumexp needs dims
    case("%s_all" % op, "a:%s()" % op, "torch.%s(a%s)" % (p, all_dims), tol, a=x)
    case("%s_dim1" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % p, tol, a=x)
    case("%s_dim1_keepdim" % op, "a:%s(1, true)" % op, "torch.%s(a, 1, keepdim=True)" % p, tol, a=x)
    case("%s_negative_dim" % op, "a:%s(-1)" % op, "torch.%s(a, -1)" % p, tol, a=x)
    if op == "prod":  # torch.prod takes one dim: chain them
        py2, py2k = "torch.prod(torch.prod(a, 2), 0)", \
            "torch.prod(torch.prod(a, -1, keepdim=True), 0, keepdim=True)"
        py3 = "torch.prod(a.transpose(0, 2))"
    else:
        py2, py2k = "torch.%s(a, (0, 2))" % p, "torch.%s(a, (-1, 0), keepdim=True)" % p
        py3 = "torch.%s(a.transpose(0, 2), (0, 1, 2))" % p
    case("%s_dims_0_2" % op, "a:%s({0, 2})" % op, py2, tol, a=x)
    case("%s_dims_keepdim" % op, "a:%s({-1, 0}, true)" % op, py2k, tol, a=x)
    case("%s_noncontiguous" % op, "a:permute(2, 0, 1):%s(1)" % op, "torch.%s(a.permute(2, 0, 1), 1)" % p, tol, a=x)
    case("%s_noncontiguous_all_dims" % op, "a:transpose(0, 2):%s({0, 1, 2})" % op, py3, tol, a=x)
    case("%s_f64" % op, "a:%s(0)" % op, "torch.%s(a, 0)" % p, F64T, a=x.double())


reduce_cases("sum", X, F32R)
reduce_cases("mean", X, F32R)
reduce_cases("prod", XP, F32R)
reduce_cases("amax", X, EXACT)
reduce_cases("amin", X, EXACT)
reduce_cases("logsumexp", X, F32R)
case("sum_int32_to_int64", "a:sum()", "torch.sum(a)", EXACT, a=ri(-100, 100, 4, 5, dtype=torch.int32))
case("sum_int64_dim", "a:sum(0)", "torch.sum(a, 0)", EXACT, a=ri(-100, 100, 4, 5))
case("sum_int64_large", "a:sum()", "torch.sum(a)", EXACT, a=t([2 ** 62, 2 ** 62 - 1, 5], torch.int64))
case("sum_uint8", "a:sum(1)", "torch.sum(a, 1)", EXACT, a=ri(0, 256, 3, 4, dtype=torch.uint8))
case("sum_bool", "a:sum()", "torch.sum(a)", EXACT, a=ri(0, 2, 10).bool())
case("sum_bool_dim", "a:sum(0)", "torch.sum(a, 0)", EXACT, a=ri(0, 2, 3, 4).bool())
case("sum_bfloat16", "a:sum(1)", "torch.sum(a, 1)", (2 ** -7, 1e-2), a=rn(3, 8, dtype=torch.bfloat16))
case("sum_float16", "a:sum()", "torch.sum(a)", (1e-3, 1e-3), a=rn(3, 8, dtype=torch.float16))
case("sum_large_f32", "a:sum()", "torch.sum(a)", F32L, a=rn(1200))
case("sum_large_f32_dim", "a:sum(1)", "torch.sum(a, 1)", F32L, a=ru(0, 1, 2, 1500))
case("sum_large_f32_strided", "a:t():sum(1)", "torch.sum(a.t(), 1)", F32L, a=ru(0, 1, 1100, 3))
case("mean_large_f32", "a:mean()", "torch.mean(a)", F32L, a=ru(0, 1, 1500))
case("sum_large_f64", "a:sum()", "torch.sum(a)", F64T, a=rn(2000, dtype=torch.float64))
case("mean_empty", "a:mean()", "torch.mean(a)", EXACT, a=torch.zeros(0))
case("mean_bfloat16", "a:mean(1)", "torch.mean(a, 1)", (2 ** -7, 0), a=rn(3, 8, dtype=torch.bfloat16))
case("logsumexp_int_to_float32", "a:logsumexp(0)", "torch.logsumexp(a, 0)", F32T, a=t([1, 2, 3], torch.int64))
case("var_correction_equals_n", "a:var(0, {correction=2})", "torch.var(a, 0, correction=2)", EXACT,
     a=t([[1.0, 2.0], [2.0, 2.0]]))
case("sum_empty", "a:sum()", "torch.sum(a)", EXACT, a=torch.zeros(0, 3))
case("sum_empty_dim", "a:sum(0)", "torch.sum(a, 0)", EXACT, a=torch.zeros(0, 3))
case("prod_empty", "a:prod(1)", "torch.prod(a, 1)", EXACT, a=torch.zeros(2, 0))
case("sum_0dim", "a:sum()", "torch.sum(a)", EXACT, a=t(2.5))
case("sum_0dim_dim0", "a:sum(0)", "torch.sum(a, 0)", EXACT, a=t(2.5))
case("sum_inf_nan", "a:sum(1)", "torch.sum(a, 1)", EXACT,
     a=t([[1.0, inf, 2.0], [inf, -inf, 0.0], [nan, 1.0, 1.0], [-inf, -inf, 1.0]]))
case("mean_of_int_as_float", "a:float():mean(0)", "a.float().mean(0)", F32R, a=ri(0, 9, 3, 4))
case("mean_keepdim_f64", "a:mean(1, true)", "torch.mean(a, 1, keepdim=True)", F64T, a=rn(3, 4, dtype=torch.float64))
case("prod_int32_to_int64", "a:prod()", "torch.prod(a)", EXACT, a=t([100000, 100000, 3], torch.int32))
case("prod_int64_dim", "a:prod(1)", "torch.prod(a, 1)", EXACT, a=ri(-5, 5, 3, 4))
case("prod_bool", "a:prod()", "torch.prod(a)", EXACT, a=t([True, True], torch.bool))
case("prod_with_zero_nan", "a:prod(1)", "torch.prod(a, 1)", EXACT, a=t([[2.0, 0.0, inf], [nan, 0.0, 1.0]]))
case("amax_nan", "a:amax(1)", "torch.amax(a, 1)", EXACT, a=t([[1.0, nan, 3.0], [-inf, -inf, -inf]]))
case("amin_nan", "a:amin(0)", "torch.amin(a, 0)", EXACT, a=t([[1.0, nan], [-1.0, 2.0]]))
case("amax_int", "a:amax(0)", "torch.amax(a, 0)", EXACT, a=ri(-100, 100, 4, 3, dtype=torch.int32))
case("amin_uint8", "a:amin()", "torch.amin(a)", EXACT, a=ri(0, 256, 4, 3, dtype=torch.uint8))
case("amax_bool", "a:amax(1)", "torch.amax(a, 1)", EXACT, a=t([[True, False], [False, False]], torch.bool))
case("amax_bfloat16", "a:amax(1)", "torch.amax(a, 1)", EXACT, a=rn(2, 5, dtype=torch.bfloat16))
case("logsumexp_large", "a:logsumexp(1)", "torch.logsumexp(a, 1)", F32R,
     a=t([[1000.0, 1000.0, 999.0], [-1000.0, -1000.0, -1001.0], [88.0, 89.0, 90.0]]))
case("logsumexp_inf", "a:logsumexp(1)", "torch.logsumexp(a, 1)", F32R,
     a=t([[-inf, -inf, -inf], [-inf, 0.0, 1.0], [inf, 0.0, 1.0], [nan, 0.0, 1.0]]))
case("logsumexp_large_n", "a:logsumexp(0)", "torch.logsumexp(a, 0)", F32L, a=rn(1100, 2, scale=5))

for op in ["all", "any"]:
    B = ri(0, 4, 3, 4) > 0
    # the whole-tensor forms give a Lua boolean, made a tensor to compare
    case("%s_bool_all" % op, "ddp.tensor(a:%s())" % op, "torch.%s(a)" % op, EXACT, a=B)
    case("%s_bool_dim" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, EXACT, a=B)
    case("%s_bool_keepdim" % op, "a:%s(0, true)" % op, "torch.%s(a, 0, keepdim=True)" % op, EXACT, a=B)
    case("%s_bool_negative_dim" % op, "a:%s(-1)" % op, "torch.%s(a, -1)" % op, EXACT, a=B)
    case("%s_bool_noncontiguous" % op, "a:t():%s(1)" % op, "torch.%s(a.t(), 1)" % op, EXACT, a=B)
    case("%s_float" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, EXACT,
         a=t([[0.0, 1.0, nan], [0.0, -0.0, 0.0], [2.0, 3.0, -1.0]]))
    case("%s_int64" % op, "ddp.tensor(a:%s())" % op, "torch.%s(a)" % op, EXACT, a=t([3, 0, 5], torch.int64))
    case("%s_uint8_keeps_uint8" % op, "a:%s(0)" % op, "torch.%s(a, 0)" % op, EXACT,
         a=t([[3, 0], [5, 0]], torch.uint8))
    case("%s_empty" % op, "ddp.tensor(a:%s())" % op, "torch.%s(a)" % op, EXACT, a=torch.zeros(0, dtype=torch.bool))
case("all_dims_table", "a:all({0, 1})", "a.all(0).all(0)", EXACT, a=ri(0, 4, 3, 4) > 0)
case("any_dims_table", "a:any({0, 1})", "a.any(0).any(0)", EXACT, a=ri(0, 4, 3, 4) > 2)

# var / std: correction 1 (default) and 0
for op in ["var", "std"]:
    case("%s_all" % op, "a:%s()" % op, "torch.%s(a)" % op, F32R, a=X)
    case("%s_all_biased" % op, "a:%s(nil, false)" % op, "torch.%s(a, unbiased=False)" % op, F32R, a=X)
    case("%s_dim1" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, F32R, a=X)
    case("%s_dim1_biased_keepdim" % op, "a:%s(1, false, true)" % op,
         "torch.%s(a, 1, unbiased=False, keepdim=True)" % op, F32R, a=X)
    case("%s_correction0_dims" % op, "a:%s({0, 2}, {correction=0})" % op,
         "torch.%s(a, (0, 2), correction=0)" % op, F32R, a=X)
    case("%s_correction1_negative" % op, "a:%s(-1, {correction=1, keepdim=true})" % op,
         "torch.%s(a, -1, correction=1, keepdim=True)" % op, F32R, a=X)
    case("%s_correction2" % op, "a:%s(0, {correction=2})" % op,
         "torch.%s(a, 0, correction=2)" % op, F32R, a=X)
    case("%s_opts_only" % op, "a:%s({correction=0})" % op, "torch.%s(a, None, correction=0)" % op, F32R, a=X)
    case("%s_noncontiguous" % op, "a:transpose(0, 2):%s(0)" % op, "torch.%s(a.transpose(0, 2), 0)" % op, F32R, a=X)
    case("%s_f64" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, F64T, a=X.double())
    case("%s_single_element_unbiased" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, EXACT, a=rn(3, 1))
    case("%s_large" % op, "a:%s()" % op, "torch.%s(a)" % op, F32L, a=rn(1500, scale=3) + 100)
    case("%s_constant_offset" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, F32R, a=1e4 + rn(2, 50))

# norm p = 1, 2, inf, 3
for p, lp, pp in [(1, "1", "1"), (2, "2", "2"), ("inf", "math.huge", "inf"), (3, "3", "3")]:
    nm = "norm_p%s" % p
    tol = F32R
    case(nm + "_all", "a:norm(%s)" % lp, "torch.norm(a, %s)" % pp, tol, a=X)
    case(nm + "_dim", "a:norm(%s, 1)" % lp, "torch.norm(a, %s, 1)" % pp, tol, a=X)
    case(nm + "_dims_keepdim", "a:norm(%s, {0, 2}, true)" % lp, "torch.norm(a, %s, (0, 2), keepdim=True)" % pp, tol, a=X)
    case(nm + "_negative_dim", "a:norm(%s, -1)" % lp, "torch.norm(a, %s, -1)" % pp, tol, a=X)
    case(nm + "_noncontiguous", "a:t():norm(%s, 1)" % lp, "torch.norm(a.t(), %s, 1)" % pp, tol, a=rn(4, 6))
    case(nm + "_f64", "a:norm(%s, 0)" % lp, "torch.norm(a, %s, 0)" % pp, F64T, a=X.double())
case("norm_p1_1d_contiguous", "a:norm(1)", "torch.norm(a, 1)", F32R, a=rn(20))
case("norm_p1_1d_contiguous_f64", "a:norm(1)", "torch.norm(a, 1)", F64T, a=rn(20, dtype=torch.float64))
case("norm_p1_last_dim_contiguous", "a:norm(1, -1)", "torch.norm(a, 1, -1)", F32R, a=rn(2, 17))
case("norm_default", "a:norm()", "torch.norm(a)", F32R, a=X)
case("norm_fro", "a:norm('fro')", "torch.norm(a, 'fro')", F32R, a=rn(3, 4))
case("norm_p0_5", "a:norm(0.5, 1)", "torch.norm(a, 0.5, 1)", F32R, a=rn(3, 4))
case("norm_p0", "a:norm(0, 1)", "torch.norm(a, 0, 1)", EXACT, a=t([[0.0, 1.0, -2.0], [0.0, 0.0, 0.0]]))
case("norm_neg_inf", "a:norm(-math.huge, 1)", "torch.norm(a, -inf, 1)", EXACT, a=rn(3, 4))
case("norm_large_values", "a:norm()", "torch.norm(a)", F32R, a=t([3e30, 4e30]))
case("norm_inf_values", "a:norm(2, 1)", "torch.norm(a, 2, 1)", EXACT, a=t([[inf, 1.0], [nan, 1.0], [-inf, nan]]))
case("norm_large_n", "a:norm()", "torch.norm(a)", F32L, a=rn(1200))

# count_nonzero
CNZ = t([[0.0, 1.0, nan, -0.0], [2.0, 0.0, 0.0, 3.0], [0.0, 0.0, 0.0, 0.0]])
case("count_nonzero_all", "a:count_nonzero()", "torch.count_nonzero(a)", EXACT, a=CNZ)
case("count_nonzero_dim", "a:count_nonzero(1)", "torch.count_nonzero(a, 1)", EXACT, a=CNZ)
case("count_nonzero_dims", "a:count_nonzero({0, 1})", "torch.count_nonzero(a, (0, 1))", EXACT, a=CNZ)
case("count_nonzero_negative", "a:count_nonzero(-2)", "torch.count_nonzero(a, -2)", EXACT, a=CNZ)
case("count_nonzero_int", "a:count_nonzero(0)", "torch.count_nonzero(a, 0)", EXACT, a=ri(-1, 2, 4, 3))
case("count_nonzero_bool_t", "a:t():count_nonzero(1)", "torch.count_nonzero(a.t(), 1)", EXACT, a=ri(0, 2, 3, 5).bool())

section("maxmin")
XD = t([[3.0, 1.0, 3.0, -2.0], [2.0, 2.0, 1.0, 2.0], [-1.0, 5.0, 5.0, 0.0]])
for op in ["max", "min"]:
    case("%s_all" % op, "a:%s()" % op, "torch.%s(a)" % op, EXACT, a=X)
    case("%s_dim" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, EXACT, a=X)
    case("%s_dim_keepdim" % op, "a:%s(0, true)" % op, "torch.%s(a, 0, keepdim=True)" % op, EXACT, a=X)
    case("%s_negative_dim" % op, "a:%s(-1)" % op, "torch.%s(a, -1)" % op, EXACT, a=X)
    case("%s_noncontiguous" % op, "a:transpose(0, 2):%s(1)" % op, "torch.%s(a.transpose(0, 2), 1)" % op, EXACT, a=X)
    case("%s_duplicates_first_index" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, EXACT, a=XD)
    case("%s_duplicates_dim0" % op, "a:%s(0)" % op, "torch.%s(a, 0)" % op, EXACT, a=XD.t().contiguous())
    case("%s_int" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, EXACT, a=ri(-3, 3, 4, 6, dtype=torch.int32))
    case("%s_nan" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, EXACT,
         a=t([[1.0, nan, 3.0, nan], [-inf, -inf, 0.0, inf]]))
    case("%s_bool" % op, "a:%s(0)" % op, "torch.%s(a, 0)" % op, EXACT, a=t([[False, True], [True, True]], torch.bool))
    case("%s_elementwise_other" % op, "a:%s(b)" % op, "torch.%s(a, b)" % op, EXACT, a=rn(3, 4), b=rn(4))
    case("%s_0dim_dim0" % op, "a:%s(0)" % op, "torch.%s(a, 0)" % op, EXACT, a=t(2.5))
    case("%s_f64_large" % op, "a:%s(0)" % op, "torch.%s(a, 0)" % op, EXACT, a=rn(1000, 2, dtype=torch.float64))
for op in ["argmax", "argmin"]:
    case("%s_all" % op, "a:%s()" % op, "torch.%s(a)" % op, EXACT, a=X)
    case("%s_dim" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, EXACT, a=X)
    case("%s_keepdim" % op, "a:%s(1, true)" % op, "torch.%s(a, 1, keepdim=True)" % op, EXACT, a=X)
    case("%s_negative_dim" % op, "a:%s(-1)" % op, "torch.%s(a, -1)" % op, EXACT, a=X)
    case("%s_noncontiguous" % op, "a:permute(2, 1, 0):%s(0)" % op, "torch.%s(a.permute(2, 1, 0), 0)" % op, EXACT, a=X)
    case("%s_noncontiguous_all" % op, "a:t():%s()" % op, "torch.%s(a.t())" % op, EXACT, a=rn(4, 5))
    case("%s_duplicates" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, EXACT, a=XD)
    case("%s_duplicates_all" % op, "a:%s()" % op, "torch.%s(a)" % op, EXACT, a=XD)
    case("%s_nan" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, EXACT, a=t([[1.0, nan, 3.0, nan], [0.0, 2.0, 2.0, -1.0]]))
    case("%s_int64" % op, "a:%s(0)" % op, "torch.%s(a, 0)" % op, EXACT, a=ri(-3, 3, 5, 4))
    case("%s_0dim" % op, "a:%s()" % op, "torch.%s(a)" % op, EXACT, a=t(1.5))

section("cumulative")
for op in ["cumsum", "cumprod"]:
    x = rn(3, 4) if op == "cumsum" else 1 + 0.5 * rn(3, 4)
    case("%s_dim0" % op, "a:%s(0)" % op, "torch.%s(a, 0)" % op, F32R, a=x)
    case("%s_dim1" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, F32R, a=x)
    case("%s_negative_dim" % op, "a:%s(-1)" % op, "torch.%s(a, -1)" % op, F32R, a=rn(2, 3, 4))
    case("%s_middle_dim" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, F32R, a=rn(2, 3, 4))
    case("%s_noncontiguous" % op, "a:t():%s(1)" % op, "torch.%s(a.t(), 1)" % op, F32R, a=x)
    case("%s_int32_to_int64" % op, "a:%s(0)" % op, "torch.%s(a, 0)" % op, EXACT, a=ri(-5, 6, 6, dtype=torch.int32))
    case("%s_int64" % op, "a:%s(1)" % op, "torch.%s(a, 1)" % op, EXACT, a=ri(-5, 6, 2, 6))
    case("%s_bool_to_int64" % op, "a:%s(0)" % op, "torch.%s(a, 0)" % op, EXACT, a=t([True, True, False, True], torch.bool))
    case("%s_uint8_to_int64" % op, "a:%s(0)" % op, "torch.%s(a, 0)" % op, EXACT, a=t([200, 100, 2], torch.uint8))
    case("%s_f64" % op, "a:%s(0)" % op, "torch.%s(a, 0)" % op, F64T, a=x.double())
    case("%s_nan_inf" % op, "a:%s(0)" % op, "torch.%s(a, 0)" % op, EXACT, a=t([1.0, inf, 2.0, nan, 3.0]))
    case("%s_0dim" % op, "a:%s(0)" % op, "torch.%s(a, 0)" % op, EXACT, a=t(2.5))
    case("%s_empty" % op, "a:%s(0)" % op, "torch.%s(a, 0)" % op, EXACT, a=torch.zeros(0, 3))
case("cumsum_large", "a:cumsum(0)", "torch.cumsum(a, 0)", F32L, a=ru(0, 1, 1200))
case("cumsum_bfloat16", "a:cumsum(0)", "torch.cumsum(a, 0)", (2 ** -7, 1e-2), a=rn(6, dtype=torch.bfloat16))

section("softmax")
for op, pyop in [("softmax", "torch.softmax"), ("log_softmax", "torch.log_softmax")]:
    case("%s_dim0" % op, "a:%s(0)" % op, "%s(a, 0)" % pyop, F32T, a=rn(3, 4, scale=2))
    case("%s_dim1" % op, "a:%s(1)" % op, "%s(a, 1)" % pyop, F32T, a=rn(3, 4, scale=2))
    case("%s_negative_dim" % op, "a:%s(-1)" % op, "%s(a, -1)" % pyop, F32T, a=rn(2, 3, 4, scale=2))
    case("%s_middle_dim" % op, "a:%s(1)" % op, "%s(a, 1)" % pyop, F32T, a=rn(2, 3, 4, scale=2))
    case("%s_noncontiguous" % op, "a:t():%s(1)" % op, "%s(a.t(), 1)" % pyop, F32T, a=rn(4, 3, scale=2))
    case("%s_large_values" % op, "a:%s(1)" % op, "%s(a, 1)" % pyop, F32T,
         a=t([[1000.0, 1001.0, 1002.0], [-1000.0, -1001.0, -1002.0], [88.0, 0.0, -88.0]]))
    case("%s_neg_inf" % op, "a:%s(1)" % op, "%s(a, 1)" % pyop, F32T,
         a=t([[-inf, 0.0, 1.0], [-inf, -inf, 2.0]]))
    case("%s_f64" % op, "a:%s(0)" % op, "%s(a, 0)" % pyop, F64T, a=rn(3, 4, dtype=torch.float64, scale=2))
    case("%s_0dim" % op, "a:%s(0)" % op, "%s(a, 0)" % pyop, F32T, a=t(3.0))
    case("%s_long_row" % op, "a:%s(0)" % op, "%s(a, 0)" % pyop, F32T, a=rn(1000, scale=3))
    case("%s_functional" % op, "ddp.%s(a, -1)" % op, "%s(a, -1)" % pyop, F32T, a=rn(2, 5))

# ===========================================================================
# Linear algebra
# ===========================================================================
case("softmax_bfloat16", "a:softmax(0)", "torch.softmax(a, 0)", (2 ** -7, 1e-3), a=rn(6, dtype=torch.bfloat16))
case("log_softmax_of_int_as_float", "a:float():log_softmax(0)", "torch.log_softmax(a.float(), 0)", F32T,
     a=t([1, 2, 3], torch.int64))

section("linalg")
case("matmul_1d_1d", "a:matmul(b)", "torch.matmul(a, b)", F32R, a=rn(5), b=rn(5))
case("matmul_2d_1d", "a:matmul(b)", "torch.matmul(a, b)", F32R, a=rn(3, 4), b=rn(4))
case("matmul_1d_2d", "a:matmul(b)", "torch.matmul(a, b)", F32R, a=rn(4), b=rn(4, 3))
case("matmul_2d_2d", "a:matmul(b)", "torch.matmul(a, b)", F32R, a=rn(3, 4), b=rn(4, 5))
case("matmul_3d_2d", "a:matmul(b)", "torch.matmul(a, b)", F32R, a=rn(2, 3, 4), b=rn(4, 5))
case("matmul_2d_3d", "a:matmul(b)", "torch.matmul(a, b)", F32R, a=rn(3, 4), b=rn(2, 4, 5))
case("matmul_3d_1d", "a:matmul(b)", "torch.matmul(a, b)", F32R, a=rn(2, 3, 4), b=rn(4))
case("matmul_1d_3d", "a:matmul(b)", "torch.matmul(a, b)", F32R, a=rn(4), b=rn(2, 4, 5))
case("matmul_3d_3d", "a:matmul(b)", "torch.matmul(a, b)", F32R, a=rn(2, 3, 4), b=rn(2, 4, 5))
case("matmul_broadcast_batch", "a:matmul(b)", "torch.matmul(a, b)", F32R, a=rn(2, 1, 3, 4), b=rn(5, 4, 2))
case("matmul_broadcast_batch_both", "a:matmul(b)", "torch.matmul(a, b)", F32R, a=rn(3, 1, 2, 4), b=rn(1, 2, 4, 3))
case("matmul_4d_1d", "a:matmul(b)", "torch.matmul(a, b)", F32R, a=rn(2, 2, 3, 4), b=rn(4))
case("matmul_transposed_a", "a:t():matmul(b)", "torch.matmul(a.t(), b)", F32R, a=rn(4, 3), b=rn(4, 5))
case("matmul_transposed_b", "a:matmul(b:t())", "torch.matmul(a, b.t())", F32R, a=rn(3, 4), b=rn(5, 4))
case("matmul_transposed_both", "a:t():matmul(b:t())", "torch.matmul(a.t(), b.t())", F32R, a=rn(4, 3), b=rn(5, 4))
case("matmul_batched_transposed", "a:transpose(1, 2):matmul(b:transpose(1, 2))",
     "torch.matmul(a.transpose(1, 2), b.transpose(1, 2))", F32R, a=rn(2, 4, 3), b=rn(2, 5, 4))
case("matmul_batch_transposed", "a:transpose(0, 1):matmul(b)", "torch.matmul(a.transpose(0, 1), b)", F32R,
     a=rn(3, 2, 4), b=rn(4, 2))
case("matmul_sliced", "a:narrow(1, 1, 4):matmul(b:narrow(0, 2, 4))",
     "torch.matmul(a.narrow(1, 1, 4), b.narrow(0, 2, 4))", F32R, a=rn(3, 6), b=rn(7, 2))
case("matmul_expanded", "a:expand(3, 4):matmul(b)", "torch.matmul(a.expand(3, 4), b)", F32R, a=rn(1, 4), b=rn(4, 2))
case("matmul_f64", "a:matmul(b)", "torch.matmul(a, b)", F64T, a=rn(3, 7, dtype=torch.float64), b=rn(7, 2, dtype=torch.float64))
case("matmul_int64", "a:matmul(b)", "torch.matmul(a, b)", EXACT, a=ri(-9, 9, 3, 4), b=ri(-9, 9, 4, 2))
case("matmul_int32_batched", "a:matmul(b)", "torch.matmul(a, b)", EXACT,
     a=ri(-9, 9, 2, 3, 4, dtype=torch.int32), b=ri(-9, 9, 4, 2, dtype=torch.int32))
case("matmul_large", "a:matmul(b)", "torch.matmul(a, b)", (1e-5, 1e-5), a=rn(16, 64), b=rn(64, 8))
case("matmul_empty_k", "a:matmul(b)", "torch.matmul(a, b)", EXACT, a=torch.zeros(2, 0), b=torch.zeros(0, 3))
case("matmul_bfloat16", "a:matmul(b)", "torch.matmul(a, b)", (2 ** -7, 2e-2),
     a=rn(3, 4, dtype=torch.bfloat16), b=rn(4, 2, dtype=torch.bfloat16))
case("mm", "a:mm(b)", "torch.mm(a, b)", F32R, a=rn(3, 4), b=rn(4, 5))
case("mm_transposed", "a:t():mm(b)", "torch.mm(a.t(), b)", F32R, a=rn(4, 3), b=rn(4, 5))
case("mm_f64", "ddp.mm(a, b)", "torch.mm(a, b)", F64T, a=rn(2, 3, dtype=torch.float64), b=rn(3, 2, dtype=torch.float64))
case("bmm", "a:bmm(b)", "torch.bmm(a, b)", F32R, a=rn(3, 2, 4), b=rn(3, 4, 5))
case("bmm_transposed", "a:bmm(b:transpose(1, 2))", "torch.bmm(a, b.transpose(1, 2))", F32R, a=rn(3, 2, 4), b=rn(3, 5, 4))
case("addmm_default", "c:addmm(a, b)", "torch.addmm(c, a, b)", F32R, c=rn(3, 5), a=rn(3, 4), b=rn(4, 5))
case("addmm_beta_alpha", "c:addmm(a, b, {beta=0.5, alpha=2})", "torch.addmm(c, a, b, beta=0.5, alpha=2)", F32R,
     c=rn(3, 5), a=rn(3, 4), b=rn(4, 5))
case("addmm_broadcast_bias", "ddp.addmm(c, a, b, {beta=1, alpha=1})", "torch.addmm(c, a, b)", F32R,
     c=rn(5), a=rn(3, 4), b=rn(4, 5))
case("addmm_beta0_ignores_nan", "c:addmm(a, b, {beta=0})", "torch.addmm(c, a, b, beta=0)", F32R,
     c=t([[nan, inf], [1.0, 2.0]]), a=rn(2, 3), b=rn(3, 2))
case("addmm_transposed", "c:addmm(a:t(), b, {alpha=-1})", "torch.addmm(c, a.t(), b, alpha=-1)", F32R,
     c=rn(3, 1), a=rn(4, 3), b=rn(4, 2))
case("outer", "a:outer(b)", "torch.outer(a, b)", F32, a=rn(3), b=rn(4))
case("outer_mixed_dtypes", "a:outer(b)", "torch.outer(a, b)", F32, a=ri(-9, 9, 3), b=rn(2))
case("outer_int", "a:outer(b)", "torch.outer(a, b)", EXACT, a=ri(-9, 9, 3), b=ri(-9, 9, 2))
case("ger_alias", "a:ger(b)", "torch.outer(a, b)", F32, a=rn(2), b=rn(3))
case("dot", "a:dot(b)", "torch.dot(a, b)", F32R, a=rn(7), b=rn(7))
case("dot_f64", "a:dot(b)", "torch.dot(a, b)", F64T, a=rn(7, dtype=torch.float64), b=rn(7, dtype=torch.float64))
case("dot_int", "a:dot(b)", "torch.dot(a, b)", EXACT, a=ri(-9, 9, 5), b=ri(-9, 9, 5))
case("dot_strided", "a:select(1, 1):dot(b)", "torch.dot(a.select(1, 1), b)", F32R, a=rn(4, 3), b=rn(4))
case("dot_large", "a:dot(b)", "torch.dot(a, b)", F32L, a=rn(1200), b=rn(1200))

# ===========================================================================
# Indexing, joining, sorting
# ===========================================================================
section("indexing")
M = rn(4, 5)
case("index_select_dim0", "a:index_select(0, i)", "torch.index_select(a, 0, i)", EXACT, a=M, i=t([2, 0, 2, 3], torch.int64))
case("index_select_dim1", "a:index_select(1, i)", "torch.index_select(a, 1, i)", EXACT, a=M, i=t([4, 1], torch.int64))
case("index_select_negative_dim", "a:index_select(-1, i)", "torch.index_select(a, -1, i)", EXACT, a=M, i=t([0], torch.int64))
case("index_select_table", "a:index_select(0, {3, 1})", "torch.index_select(a, 0, torch.tensor([3, 1]))", EXACT, a=M)
case("index_select_int32_index", "a:index_select(0, i)", "torch.index_select(a, 0, i)", EXACT, a=M, i=t([1, 1], torch.int32))
case("index_select_noncontiguous", "a:t():index_select(0, i)", "torch.index_select(a.t(), 0, i)", EXACT,
     a=M, i=t([4, 0, 2], torch.int64))
case("index_select_int64_values", "a:index_select(0, i)", "torch.index_select(a, 0, i)", EXACT,
     a=ri(-99, 99, 5, 2), i=t([4, 0], torch.int64))
case("index_select_empty", "a:index_select(0, i)", "torch.index_select(a, 0, i)", EXACT,
     a=M, i=torch.zeros(0, dtype=torch.int64))
case("index_select_0dim_index", "a:index_select(0, i)", "torch.index_select(a, 0, i)", EXACT, a=M, i=t(2, torch.int64))
case("gather_dim1", "a:gather(1, i)", "torch.gather(a, 1, i)", EXACT, a=M, i=ri(0, 5, 4, 3))
case("gather_dim0", "a:gather(0, i)", "torch.gather(a, 0, i)", EXACT, a=M, i=ri(0, 4, 2, 5))
case("gather_smaller_index", "a:gather(1, i)", "torch.gather(a, 1, i)", EXACT, a=M, i=ri(0, 5, 2, 2))
case("gather_3d_negative_dim", "a:gather(-1, i)", "torch.gather(a, -1, i)", EXACT, a=rn(2, 3, 4), i=ri(0, 4, 2, 3, 2))
case("gather_noncontiguous", "a:t():gather(0, i)", "torch.gather(a.t(), 0, i)", EXACT, a=M, i=ri(0, 5, 3, 4))
case("scatter_dim0", "a:scatter(0, i, s)", "torch.scatter(a, 0, i, s)", EXACT,
     a=torch.zeros(3, 5), i=t([[0, 1, 2, 0, 1], [2, 0, 1, 1, 2]], torch.int64), s=rn(2, 5))
case("scatter_dim1", "a:scatter(1, i, s)", "torch.scatter(a, 1, i, s)", EXACT,
     a=rn(3, 5), i=t([[4, 0], [1, 3], [2, 2]], torch.int64)[:, :1].contiguous(), s=rn(3, 2))
case("scatter_scalar_src", "a:scatter(1, i, 5)", "torch.scatter(a, 1, i, 5)", EXACT,
     a=ri(0, 3, 2, 4), i=t([[3], [0]], torch.int64))
case("scatter_inplace", "a:scatter_(0, i, s)", "a.scatter_(0, i, s)", EXACT,
     a=rn(3, 2), i=t([[2, 0]], torch.int64), s=rn(1, 2))
case("scatter_add_duplicates", "a:scatter_add(0, i, s)", "torch.scatter_add(a, 0, i, s)", F32,
     a=torch.zeros(3, 4), i=t([[0, 1, 2, 0], [0, 1, 2, 2], [1, 1, 0, 0]], torch.int64), s=rn(3, 4))
case("scatter_add_dim1", "a:scatter_add(1, i, s)", "torch.scatter_add(a, 1, i, s)", F32,
     a=rn(2, 3), i=t([[0, 0, 2, 2], [1, 1, 1, 0]], torch.int64), s=rn(2, 4))
case("scatter_add_int", "a:scatter_add(0, i, s)", "torch.scatter_add(a, 0, i, s)", EXACT,
     a=torch.zeros(4, dtype=torch.int64), i=t([0, 3, 3, 0, 1], torch.int64), s=t([1, 2, 3, 4, 5], torch.int64))
case("scatter_add_inplace", "a:scatter_add_(0, i, s)", "a.scatter_add_(0, i, s)", F32,
     a=rn(4), i=t([0, 0, 2], torch.int64), s=rn(3))
case("masked_fill", "a:masked_fill(m, -1)", "a.masked_fill(m, -1)", EXACT, a=M, m=M > 0.3)
case("masked_fill_fraction", "a:masked_fill(m, 0.1)", "a.masked_fill(m, 0.1)", EXACT, a=M, m=M < 0)
case("masked_fill_broadcast_mask", "a:masked_fill(m, 9)", "a.masked_fill(m, 9)", EXACT,
     a=M, m=t([True, False, True, False, False], torch.bool))
case("masked_fill_int", "a:masked_fill(m, 7)", "a.masked_fill(m, 7)", EXACT, a=ri(-9, 9, 2, 3), m=ri(0, 2, 2, 3).bool())
case("masked_fill_neg_inf", "a:masked_fill(m, -math.huge)", "a.masked_fill(m, -inf)", EXACT,
     a=rn(3, 3), m=torch.ones(3, 3, dtype=torch.bool).triu(1))
case("masked_fill_tensor_value", "a:masked_fill(m, v)", "a.masked_fill(m, v)", EXACT,
     a=rn(4), m=t([True, False, False, True], torch.bool), v=t(2.5))
case("masked_fill_bool", "a:masked_fill(m, true)", "a.masked_fill(m, True)", EXACT,
     a=t([False, True, False], torch.bool), m=t([True, False, False], torch.bool))
case("masked_fill_inplace", "a:masked_fill_(m, 0)", "a.masked_fill_(m, 0)", EXACT, a=rn(2, 3), m=ri(0, 2, 2, 3).bool())
case("masked_fill_noncontiguous", "a:t():masked_fill(m, 0)", "a.t().masked_fill(m, 0)", EXACT,
     a=rn(3, 2), m=ri(0, 2, 2, 3).bool())
case("masked_select", "a:masked_select(m)", "torch.masked_select(a, m)", EXACT, a=M, m=M > 0)
case("masked_select_broadcast", "a:masked_select(m)", "torch.masked_select(a, m)", EXACT,
     a=M, m=t([[True], [False], [True], [True]], torch.bool))
case("masked_select_none", "a:masked_select(m)", "torch.masked_select(a, m)", EXACT,
     a=M, m=torch.zeros(4, 5, dtype=torch.bool))
case("masked_select_noncontiguous", "a:t():masked_select(m)", "torch.masked_select(a.t(), m)", EXACT,
     a=ri(-9, 9, 3, 4), m=ri(0, 2, 4, 3).bool())

section("joining")
case("cat_dim0", "ddp.cat({a, b}, 0)", "torch.cat([a, b], 0)", EXACT, a=rn(2, 3), b=rn(1, 3))
case("cat_dim1", "ddp.cat({a, b, c}, 1)", "torch.cat([a, b, c], 1)", EXACT, a=rn(2, 3), b=rn(2, 1), c=rn(2, 2))
case("cat_negative_dim", "ddp.cat({a, b}, -1)", "torch.cat([a, b], -1)", EXACT, a=rn(2, 2, 3), b=rn(2, 2, 1))
case("cat_default_dim", "ddp.cat({a, b})", "torch.cat([a, b])", EXACT, a=ri(0, 9, 2), b=ri(0, 9, 3))
case("cat_promote_int_float", "ddp.cat({a, b}, 0)", "torch.cat([a, b], 0)", EXACT,
     a=t([1, 2], torch.int32), b=t([1.5]))
case("cat_promote_int32_int64", "ddp.cat({a, b}, 0)", "torch.cat([a, b], 0)", EXACT,
     a=t([1, 2], torch.int32), b=t([2 ** 40], torch.int64))
case("cat_promote_bool_uint8", "ddp.cat({a, b}, 0)", "torch.cat([a, b], 0)", EXACT,
     a=t([True, False], torch.bool), b=t([7], torch.uint8))
case("cat_promote_f32_f64", "ddp.cat({a, b}, 0)", "torch.cat([a, b], 0)", EXACT,
     a=rn(2), b=rn(1, dtype=torch.float64))
case("cat_noncontiguous", "ddp.cat({a:t(), b}, 0)", "torch.cat([a.t(), b], 0)", EXACT, a=rn(3, 2), b=rn(1, 3))
case("cat_empty_1d_legacy", "ddp.cat({a, b}, 0)", "torch.cat([a, b], 0)", EXACT, a=torch.zeros(0), b=rn(2, 3))
case("cat_empty_rows", "ddp.cat({a, b}, 0)", "torch.cat([a, b], 0)", EXACT, a=torch.zeros(0, 3), b=rn(2, 3))
case("cat_single", "ddp.cat({a}, 1)", "torch.cat([a], 1)", EXACT, a=rn(2, 3))
case("stack_dim0", "ddp.stack({a, b}, 0)", "torch.stack([a, b], 0)", EXACT, a=rn(2, 3), b=rn(2, 3))
case("stack_dim1", "ddp.stack({a, b, c}, 1)", "torch.stack([a, b, c], 1)", EXACT, a=rn(2, 3), b=rn(2, 3), c=rn(2, 3))
case("stack_last", "ddp.stack({a, b}, -1)", "torch.stack([a, b], -1)", EXACT, a=rn(2, 3), b=rn(2, 3))
case("stack_0dim", "ddp.stack({a, b}, 0)", "torch.stack([a, b], 0)", EXACT, a=t(1.0), b=t(2.0))
case("stack_promote", "ddp.stack({a, b}, 0)", "torch.stack([a, b], 0)", EXACT, a=t([1, 2], torch.int64), b=t([0.5, 1.5]))
case("stack_noncontiguous", "ddp.stack({a:t(), b:t()}, 1)", "torch.stack([a.t(), b.t()], 1)", EXACT, a=rn(2, 3), b=rn(2, 3))
case("split_even", "a:split(2, 0)", "torch.split(a, 2, 0)", EXACT, a=ar(4, 3))
case("split_uneven", "a:split(2, 0)", "torch.split(a, 2, 0)", EXACT, a=ar(5, 3))
case("split_sizes", "a:split({1, 3}, 1)", "torch.split(a, [1, 3], 1)", EXACT, a=ar(2, 4))
case("split_negative_dim", "a:split(3, -1)", "torch.split(a, 3, -1)", EXACT, a=ar(2, 7))
case("split_larger_than_dim", "a:split(10)", "torch.split(a, 10)", EXACT, a=ar(3, 2))
case("chunk_3", "a:chunk(3, 0)", "torch.chunk(a, 3, 0)", EXACT, a=ar(7, 2))
case("chunk_2_dim1", "a:chunk(2, 1)", "torch.chunk(a, 2, 1)", EXACT, a=ar(2, 5))
case("chunk_fewer_pieces", "a:chunk(4, 0)", "torch.chunk(a, 4, 0)", EXACT, a=ar(6))
case("chunk_more_than_size", "a:chunk(5, 0)", "torch.chunk(a, 5, 0)", EXACT, a=ar(3))
case("split_then_add", "ddp.add(unpack(a:split(2, 1)))", "torch.add(*torch.split(a, 2, 1))", F32, a=rn(3, 4))
case("one_hot", "a:one_hot(5)", "F.one_hot(a, 5)", EXACT, a=t([0, 3, 1, 4, 3], torch.int64))
case("one_hot_inferred", "ddp.one_hot(a)", "F.one_hot(a)", EXACT, a=t([2, 0, 1], torch.int64))
case("one_hot_2d", "a:one_hot(3)", "F.one_hot(a, 3)", EXACT, a=t([[0, 2], [1, 1]], torch.int64))
case("one_hot_0dim", "a:one_hot(4)", "F.one_hot(a, 4)", EXACT, a=t(2, torch.int64))

section("sorting")
SD = t([[3.0, 1.0, 2.0, 1.0, 3.0, 0.0], [2.0, 2.0, 2.0, -1.0, 5.0, 2.0], [nan, 1.0, -inf, inf, nan, 0.0]])
case("sort_last_dim", "a:sort()", "torch.sort(a, stable=True)", EXACT, a=rn(3, 5))
case("sort_dim0", "a:sort(0)", "torch.sort(a, stable=True, dim=0)", EXACT, a=rn(4, 3))
case("sort_descending", "a:sort(1, true)", "torch.sort(a, stable=True, dim=1, descending=True)", EXACT, a=rn(3, 5))
case("sort_opts", "a:sort({dim=0, descending=true})", "torch.sort(a, stable=True, dim=0, descending=True)", EXACT, a=rn(4, 3))
case("sort_duplicates_stable", "a:sort(1)", "torch.sort(a, stable=True, dim=1)", EXACT, a=SD)
case("sort_duplicates_descending_stable", "a:sort(1, true)", "torch.sort(a, stable=True, dim=1, descending=True)", EXACT, a=SD)
case("sort_int_duplicates", "a:sort(0)", "torch.sort(a, stable=True, dim=0)", EXACT, a=ri(0, 3, 12, 2))
case("sort_int_descending", "a:sort(0, true)", "torch.sort(a, stable=True, dim=0, descending=True)", EXACT, a=ri(0, 3, 12, 2))
case("sort_negative_dim", "a:sort(-2)", "torch.sort(a, stable=True, dim=-2)", EXACT, a=rn(2, 4, 3))
case("sort_noncontiguous", "a:t():sort(1)", "torch.sort(a.t(), stable=True, dim=1)", EXACT, a=rn(5, 3))
case("sort_int32_descending", "a:sort(1, true)", "torch.sort(a, stable=True, dim=1, descending=True)", EXACT,
     a=ri(-3, 3, 2, 9, dtype=torch.int32))
case("sort_f64_with_nan", "a:sort(0)", "torch.sort(a, stable=True, dim=0)", EXACT,
     a=t([2.0, nan, -inf, 1.0, nan, -0.0, 0.0], torch.float64))
case("sort_bool", "a:sort(0)", "torch.sort(a, stable=True, dim=0)", EXACT, a=t([True, False, True, False], torch.bool))
case("sort_long", "a:sort(0)", "torch.sort(a, stable=True, dim=0)", EXACT, a=ri(0, 50, 1000))
case("sort_0dim", "a:sort()", "torch.sort(a, stable=True)", EXACT, a=t(1.5))
case("argsort", "a:argsort(1)", "torch.sort(a, stable=True, dim=1)[1]", EXACT, a=SD)
case("argsort_descending", "a:argsort(1, true)", "torch.sort(a, stable=True, dim=1, descending=True)[1]", EXACT, a=SD)
case("topk_largest", "a:topk(2)", "torch.topk(a, 2)", EXACT, a=rn(3, 6))
case("topk_smallest_dim0", "a:topk(3, 0, false)", "torch.topk(a, 3, 0, largest=False)", EXACT, a=rn(5, 4))
case("topk_opts", "a:topk(2, {dim=1, largest=false})", "torch.topk(a, 2, 1, largest=False)", EXACT, a=rn(3, 6))
case("topk_int", "a:topk(3)", "torch.topk(a, 3)", EXACT, a=torch.randperm(10).reshape(2, 5))
case("topk_k_equals_n", "a:topk(4)", "torch.topk(a, 4)", EXACT, a=rn(4))
case("topk_noncontiguous", "a:t():topk(2, 0)", "torch.topk(a.t(), 2, 0)", EXACT, a=rn(3, 5))
case("topk_with_inf", "a:topk(2)", "torch.topk(a, 2)", EXACT, a=t([1.0, -inf, inf, 0.5]))
case("topk_smallest_with_nan", "a:topk(2, 0, false)", "torch.topk(a, 2, 0, largest=False)", EXACT, a=t([1.0, nan, -2.0, 0.5]))
case("topk_largest_with_nan", "a:topk(2)", "torch.topk(a, 2)", EXACT, a=t([1.0, nan, -2.0, 0.5]))
case("nonzero_2d", "a:nonzero()", "torch.nonzero(a)", EXACT, a=ri(-1, 2, 3, 4))
case("nonzero_1d", "a:nonzero()", "torch.nonzero(a)", EXACT, a=t([0.0, 1.5, 0.0, nan, -0.0]))
case("nonzero_bool_3d", "a:nonzero()", "torch.nonzero(a)", EXACT, a=ri(0, 2, 2, 2, 3).bool())
case("nonzero_none", "a:nonzero()", "torch.nonzero(a)", EXACT, a=torch.zeros(2, 3))
case("nonzero_noncontiguous", "a:t():nonzero()", "torch.nonzero(a.t())", EXACT, a=ri(0, 2, 3, 4))
case("nonzero_0dim", "a:nonzero()", "torch.nonzero(a)", EXACT, a=t(3.0))
TR = ar(4, 5)
for k in [0, 1, -1, 2, -3, 5, -5]:
    sk = ("m%d" % -k) if k < 0 else str(k)
    case("tril_%s" % sk, "a:tril(%d)" % k, "torch.tril(a, %d)" % k, EXACT, a=TR)
    case("triu_%s" % sk, "a:triu(%d)" % k, "torch.triu(a, %d)" % k, EXACT, a=TR)
case("tril_default", "a:tril()", "torch.tril(a)", EXACT, a=ar(3, 3))
case("triu_default", "a:triu()", "torch.triu(a)", EXACT, a=ar(3, 3))
case("tril_batched", "a:tril(1)", "torch.tril(a, 1)", EXACT, a=ar(2, 3, 4))
case("triu_batched_negative", "a:triu(-1)", "torch.triu(a, -1)", EXACT, a=ar(2, 4, 3))
case("tril_noncontiguous", "a:t():tril()", "torch.tril(a.t())", EXACT, a=ar(3, 4))
case("triu_bool", "a:triu(1)", "torch.triu(a, 1)", EXACT, a=torch.ones(3, 3, dtype=torch.bool))
case("tril_int", "a:tril(-1)", "torch.tril(a, -1)", EXACT, a=ri(-9, 9, 3, 3))


if __name__ == "__main__":
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases.lua")
    write(out)
    print("%d cases, %d bytes -> %s" % (len(CASES), os.path.getsize(out), out))
