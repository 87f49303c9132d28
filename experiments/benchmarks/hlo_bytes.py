"""A correction to XLA's ``bytes accessed`` for gathers inside fusions, read from the optimized HLO text.

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


def shape_bytes(shape: str) -> int:
    """Bytes of an HLO shape string (an array ``f32[2,3]{1,0}`` or a tuple of them)."""
    total = 0
    for dtype, dims in _ARRAY.findall(shape):
        n = 1
        for d in filter(None, dims.split(",")):
            n *= int(d)
        total += n * _DTYPE_BYTES[dtype]
    return total


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
    """Bytes of whole fusion operands XLA's cost analysis counted although only gathers read them (see the
    module docstring); ``0`` for a program without such fusions."""
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
