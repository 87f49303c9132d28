"""Two corrections to XLA's cost analysis, read from a compiled program's optimized HLO text: the bytes of
fused gathers and viewed slices (``gather_overcount``) and the iterations of loops XLA counts once
(``loop_extra``, at the end of this module), and the launches and traffic of every kernel
(``kernel_traffic``: how a program's bytes split over kernels of each size).

XLA's cost analysis (``HloCostAnalysis::FusionParameterReadBytes``) counts a fusion's operand as read
WHOLE unless its users in the fused computation are slices or dynamic slices, which it counts by their
output. A ``gather`` is not among those: a fusion that gathers 57 rows of a ``[2000, 10]`` data array is
counted as reading all 2,000 rows. dpjax's user-stream rounds (shuffle-private SCO: round ``r`` reads
the window ``[start_r, start_r + batch_r)`` of the users by a gather) are such fusions, so a chunk's
rebuilt per-round byte count grew with the data, i.e. with the number of rounds of a one-pass
schedule (0.56 MB a round at R = 200, 73 MB at R = 166,666), and the roofline floors of those chunk
programs were invalid (measured below their floor).

The same rule misses a slice behind a layout-only view: a fused ``bitcast`` of a ``[1, 2, R]`` hparams
array, then the slice of round ``r``, is counted as reading all R rounds' values, so the per-round count
grew with R here too.

``gather_overcount(hlo_text)`` returns the bytes XLA over-counted that way. For every fusion called from
a non-fused computation and each fused parameter: XLA's count of that parameter (its rule mirrored in
``_xla_param_bytes``) minus what is read where EVERY reader, through bitcasts and reshapes, is a gather,
slice or dynamic slice taking it as operand 0 (each reads at most its output's worth); parameters with
any other reader are left as XLA counts them. Subtracting it from XLA's total is XLA's own dynamic-slice
rule applied to gathers and to views. Loops are left as XLA counts them (a ``while`` body once: see
``roofline.py``).
"""

from __future__ import annotations

import re

_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2, "s32": 4, "u32": 4,
                "f32": 4, "s64": 8, "u64": 8, "f64": 8, "c64": 8, "c128": 16}
_ARRAY = re.compile(r"\b(" + "|".join(_DTYPE_BYTES) + r")\[([\d,]*)\]")
_HEADER = re.compile(r"^(ENTRY\s+)?%([\w.\-]+)\s*\(")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%([\w.\-]+)\s*=\s*")


def _arrays(shape: str):
    """``(dtype, element count)`` of every array in an HLO shape string (an array or a tuple of them)."""
    for dtype, dims in _ARRAY.findall(shape):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        yield dtype, n


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape string (an array ``f32[2,3]{1,0}`` or a tuple of them)."""
    return sum(n * _DTYPE_BYTES[dtype] for dtype, n in _arrays(shape))


def _matching(text: str, start: int) -> int:
    """Index just past the bracket group opening at ``text[start]`` (``(`` ... ``)``)."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i + 1
    raise ValueError(f"unbalanced HLO line: {text[:120]!r}")


def _parse_instruction(line: str):
    """``(name, shape, opcode, operand names, rest)`` of one HLO instruction line, or ``None``."""
    m = _INSTRUCTION.match(line)
    if m is None:
        return None
    pos = m.end()
    if line[pos] == "(":  # a tuple shape
        end = _matching(line, pos)
        shape = line[pos:end]
    else:
        end = line.index(" ", pos)
        shape = line[pos:end]
    rest = line[end:].lstrip()
    op_end = rest.index("(")
    opcode = rest[:op_end]
    args_end = _matching(rest, op_end)
    operands = re.findall(r"%([\w.\-]+)", rest[op_end:args_end])
    return m.group(1), shape, opcode, operands, rest[args_end:]


def parse_computations(hlo_text: str) -> dict[str, list[tuple]]:
    """Every computation of an HLO module: name -> its parsed instructions (``_parse_instruction``)."""
    computations: dict[str, list[tuple]] = {}
    current = None
    for line in hlo_text.splitlines():
        header = _HEADER.match(line)
        if header and line.rstrip().endswith("{"):
            current = computations.setdefault(header.group(2), [])
            continue
        if line.startswith("}"):
            current = None
            continue
        if current is not None:
            parsed = _parse_instruction(line)
            if parsed is not None:
                current.append(parsed)
    return computations


def gather_overcount(hlo_text: str) -> int:
    """Bytes of whole fusion operands XLA's cost analysis counted although only windows of them are read
    (gathers, or slices behind bitcasts / reshapes; see the module docstring); ``0`` for a program without
    such fusions."""
    computations = parse_computations(hlo_text)
    fused = set()
    for instructions in computations.values():
        for _, _, opcode, _, rest in instructions:
            if opcode == "fusion":
                called = re.search(r"calls=%([\w.\-]+)", rest)
                if called:
                    fused.add(called.group(1))
    over = 0
    for name, instructions in computations.items():
        if name in fused:
            continue  # a fused computation is costed through its fusion instruction
        for _, _, opcode, _, rest in instructions:
            if opcode != "fusion":
                continue
            called = re.search(r"calls=%([\w.\-]+)", rest)
            if called and called.group(1) in computations:
                over += _fusion_gather_overcount(computations[called.group(1)])
    return over


_LAYOUT_ONLY = ("bitcast", "reshape")  # a view of the same elements: whoever reads the view reads the operand
_WINDOW = ("gather", "slice", "dynamic-slice")  # reads only its output's worth of operand 0


def _xla_param_bytes(param_shape: str, uses: list[tuple]) -> int | None:
    """What ``FusionParameterReadBytes`` counts for a fused parameter with these direct ``uses`` (``None``
    where its rule is not mirrored here: nested fusions, dynamic-update-slices)."""
    full, size, seen_default = shape_bytes(param_shape), 0, False
    for opcode, position, shape in uses:
        if opcode in ("fusion", "dynamic-update-slice"):
            return None
        if opcode == "slice" or (opcode == "dynamic-slice" and position == 0):
            size += shape_bytes(shape)
        elif opcode in ("broadcast", "reshape"):
            size += full
        elif not seen_default:
            seen_default, size = True, size + full
    return size


def _fusion_gather_overcount(body: list[tuple]) -> int:
    shapes = {name: shape for name, shape, _, _, _ in body}
    users: dict[str, list[tuple]] = {name: [] for name in shapes}
    for name, shape, opcode, operands, _ in body:
        for position, operand in enumerate(operands):
            if operand in users:
                users[operand].append((name, opcode, position, shape))

    def window_reads(value: str) -> int | None:
        """Bytes read from ``value`` when every reader (through layout-only views) takes a window of it
        as operand 0; ``None`` when some reader may read all of it."""
        total = 0
        for name, opcode, position, shape in users[value]:
            if opcode in _LAYOUT_ONLY:
                inner = window_reads(name)
                if inner is None:
                    return None
                total += inner
            elif opcode in _WINDOW and position == 0:
                total += shape_bytes(shape)
            else:
                return None
        return total

    over = 0
    for name, shape, opcode, _, _ in body:
        if opcode != "parameter" or not users[name]:
            continue
        counted = _xla_param_bytes(shape, [(op, pos, s) for _, op, pos, s in users[name]])
        true = window_reads(name)
        if counted is not None and true is not None:
            over += max(counted - true, 0)
    return over


# ----------------------------------------------------------------------------- loops counted once
# XLA's cost analysis counts a ``while`` body once whatever its trip count. XLA annotates the loops whose
# trip count it proved (``backend_config={... "known_trip_count":{"n":"400"}}``: every ``lax.scan`` /
# ``fori_loop`` with static bounds). ``loop_extra`` costs each such body with the model below, which mirrors
# ``HloCostAnalysis``'s rules for the instructions dpjax's programs hold, and returns what the (n - 1)
# uncounted iterations add; loops without a known trip count stay counted once (``unknown`` of them).

_TRANSCENDENTAL = {"exponential", "exponential-minus-one", "log", "log-plus-one", "tanh", "sine", "cosine", "tan",
                   "power", "sqrt", "cbrt", "rsqrt", "erf", "atan2", "logistic"}
_NO_FLOPS = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "broadcast", "reshape", "transpose",
             "slice", "dynamic-slice", "dynamic-update-slice", "concatenate", "pad", "iota", "reverse", "copy",
             "gather", "scatter", "after-all", "partition-id", "replica-id", "custom-call", "rng-bit-generator",
             "rng-get-and-update-state", "bitcast-convert", "copy-start", "copy-done", "optimization-barrier",
             "sort"}
_NO_BYTES = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "after-all", "while", "call",
             "conditional", "optimization-barrier"}
_CALLED = re.compile(r"(?:calls|to_apply|body|condition|true_computation|false_computation)=%([\w.\-]+)")
_TRIP = re.compile(r'"known_trip_count":\{"n":"(\d+)"\}')


def _elements(shape: str) -> int:
    return sum(n for _, n in _arrays(shape))


def _dims(shape: str) -> list[int]:
    m = _ARRAY.search(shape)
    return [int(d) for d in filter(None, m.group(2).split(","))] if m else []


class _Model:
    """FLOPs and bytes of an HLO module's computations, each ``while`` body weighted by its trip count
    (``weighted``) or once (``once``, XLA's way)."""

    def __init__(self, hlo_text: str):
        self.computations = parse_computations(hlo_text)
        self.shapes = {name: shape for body in self.computations.values() for name, shape, *_ in body}
        self.unknown = 0

    def flops_of(self, name, shape, opcode, operands, rest) -> float:
        if opcode == "dot":
            contracting = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", rest)
            lhs = _dims(self.shapes.get(operands[0], ""))
            k = 1
            for d in filter(None, (contracting.group(1) if contracting else "").split(",")):
                k *= lhs[int(d)] if int(d) < len(lhs) else 1
            return 2.0 * _elements(shape) * k
        if opcode == "reduce":
            return float(max(_elements(self.shapes.get(operands[0], "")) - _elements(shape), 0))
        if opcode in _NO_FLOPS or opcode in _TRANSCENDENTAL or opcode in ("fusion", "while", "call", "conditional"):
            return 0.0
        return float(_elements(shape))  # elementwise arithmetic, compare, select, convert: one per element

    def fusion_bytes(self, shape, operands, body) -> float:
        params = [(n, s) for n, s, op, _, _ in body if op == "parameter"]
        users: dict[str, list[tuple]] = {n: [] for n, _ in params}
        for _, s, op, ops, _ in body:
            for position, operand in enumerate(ops):
                if operand in users:
                    users[operand].append((op, position, s))
        counted = [_xla_param_bytes(s, users[n]) for n, s in params]
        read = sum(shape_bytes(s) if c is None else c for c, (_, s) in zip(counted, params))
        return float(shape_bytes(shape) + read - _fusion_gather_overcount(body))

    def cost(self, computation: str, weighted: bool) -> tuple[float, float]:
        flops = nbytes = 0.0
        for name, shape, opcode, operands, rest in self.computations.get(computation, []):
            called = _CALLED.findall(rest)
            if opcode == "fusion" and called:
                body = self.computations.get(called[0], [])
                flops += sum(self.flops_of(*i) for i in body)
                nbytes += self.fusion_bytes(shape, operands, body)
                continue
            if opcode == "while":
                trip = _TRIP.search(rest)
                n = int(trip.group(1)) if trip and weighted else 1
                if trip is None and weighted:
                    self.unknown += 1
                for c in called:
                    f, b = self.cost(c, weighted)
                    flops, nbytes = flops + n * f, nbytes + n * b
                continue
            if opcode in ("call", "conditional"):
                for c in called:
                    f, b = self.cost(c, weighted)
                    flops, nbytes = flops + f, nbytes + b
                continue
            flops += self.flops_of(name, shape, opcode, operands, rest)
            if opcode not in _NO_BYTES:
                nbytes += shape_bytes(shape) + sum(shape_bytes(self.shapes.get(o, "")) for o in operands)
        return flops, nbytes


def _entry(hlo_text: str) -> str | None:
    m = re.search(r"^ENTRY\s+%([\w.\-]+)", hlo_text, re.M)
    return m.group(1) if m else None


def model_cost(hlo_text: str, weighted: bool = True) -> tuple[float, float]:
    """The model's ``(flops, bytes)`` of the module: loops weighted by their known trip counts, or (with
    ``weighted=False``) each body once, as XLA counts (to check the model against XLA's own numbers)."""
    entry = _entry(hlo_text)
    return _Model(hlo_text).cost(entry, weighted) if entry else (0.0, 0.0)


def loop_extra(hlo_text: str) -> tuple[float, float, int]:
    """``(flops, bytes, loops)``: what the uncounted iterations of every ``while`` loop with a known trip count
    add to XLA's count (the model's weighted cost minus its once-counted cost), and how many loops have no
    known trip count (still counted once)."""
    entry = _entry(hlo_text)
    if entry is None:
        return 0.0, 0.0, 0
    model = _Model(hlo_text)
    wf, wb = model.cost(entry, True)
    of, ob = model.cost(entry, False)
    return max(wf - of, 0.0), max(wb - ob, 0.0), model.unknown


def kernel_traffic(hlo_text: str) -> list[tuple[int, float, str, str]]:
    """``(launches, bytes, opcode, name)`` per kernel of the module: every fusion or unfused op of the entry
    computation and of the computations it calls (``while`` bodies and conditions weighted by their known
    trip counts, as ``model_cost`` counts them), ``bytes`` one launch's traffic (a fusion's by XLA's rule
    with the gather and view correction); ``sum(launches * bytes)`` is ``model_cost``'s byte count. Views and
    tuple plumbing (parameters, constants, bitcasts, get-tuple-element) launch nothing and are left out. This says what a floor from one bandwidth cannot:
    a program of many kernels of a few MiB each runs at the bandwidth of arrays that size, not at the best
    copy's."""
    entry = _entry(hlo_text)
    if entry is None:
        return []
    model = _Model(hlo_text)
    out: list[tuple[int, float, str, str]] = []

    def visit(computation: str, launches: int) -> None:
        for name, shape, opcode, operands, rest in model.computations.get(computation, []):
            called = _CALLED.findall(rest)
            if opcode == "while":
                trip = _TRIP.search(rest)
                for c in called:
                    visit(c, launches * (int(trip.group(1)) if trip else 1))
            elif opcode in ("call", "conditional"):
                for c in called:
                    visit(c, launches)
            elif opcode == "fusion" and called:
                out.append((launches, model.fusion_bytes(shape, operands, model.computations.get(called[0], [])),
                            opcode, name))
            elif opcode not in _NO_BYTES:
                out.append((launches, float(shape_bytes(shape) + sum(shape_bytes(model.shapes.get(o, ""))
                                                                     for o in operands)), opcode, name))

    visit(entry, 1)
    return out
