"""Branches of ``dpjax.engine.chain``'s declaration and bookkeeping code reached by tests that can fail (issue 42,
item 1): which part fills which role (an audit's mutant clipper must replace THE clipper, in a local loop's inner
chain too), how many parts run per silo (before the aggregator: the per-silo noise of ISRL-DP), silo sizes, and the
float32 noise multiplier whose compiled std is exactly the accountant's.

The parts are minimal stand-ins declaring ``roles``; the expected values are read off the declarations by hand.
"""

from __future__ import annotations

import dataclasses
import types

import jax
import numpy as np
import pytest

from dpjax.engine import chain

pytestmark = pytest.mark.privacy


@dataclasses.dataclass(frozen=True)
class _P:
    name: str
    roles: tuple
    inner: object = ()


SEL = _P("sel", ("selection",))
CLIENT, CLIP, PRIV, AGG, SERVER = (_P("client", ("client",)), _P("clip", ("clipper",)), _P("priv", ("privatizer",)),
                                   _P("agg", ("aggregator",)), _P("server", ("server",)))


def test_roles_must_be_declared_from_the_known_set():
    with pytest.raises(ValueError, match="part object must declare roles"):
        chain.roles_of(object())
    with pytest.raises(ValueError, match=r"part _P must declare roles.*got \('noiser',\)"):
        chain.roles_of(_P("x", ("noiser",)))
    assert chain.roles_of(CLIP) == ("clipper",)


def test_parts_declaration_refusals_and_keys():
    with pytest.raises(ValueError, match="selection=_P is not a batch selection part"):
        chain.Parts(CLIENT, (CLIP,))
    with pytest.raises(ValueError, match=r"parts \['clipper', 'clipper'\]: each role may lead one part"):
        chain.Parts(SEL, (CLIP, _P("clip2", ("clipper",))))
    p = chain.Parts(SEL, (CLIENT, None, CLIP, PRIV, AGG, SERVER))  # None entries are dropped
    assert p.keys == ("client", "clipper", "privatizer", "aggregator", "server")
    assert p.per_silo_length == 3  # client, clipper, privatizer run per silo; the aggregator combines
    assert chain.Parts(SEL, (CLIENT, CLIP, PRIV)).per_silo_length == 3  # no aggregator: every part per silo


def test_role_and_position_reach_a_local_loops_inner_chain():
    loop = _P("loop", ("client",), inner=(CLIP, PRIV))  # e.g. Local SGD: clip + noise at every local step
    p = chain.Parts(SEL, (loop, AGG, SERVER))
    assert p.role("selection") is SEL and p.position("selection") == -1
    assert p.role("privatizer") is PRIV and p.position("privatizer") == 0  # at its loop's position
    assert p.role("averager", None) is None
    with pytest.raises(ValueError, match="these parts fill no 'averager' role"):
        p.role("averager")
    with pytest.raises(ValueError, match="these parts fill no 'averager' role"):
        p.position("averager")
    # a wrapper's single inner part (not a tuple) is not a chain
    wrapper = _P("wrap", ("clipper",), inner=PRIV)
    assert chain.Parts(SEL, (CLIENT, wrapper)).role("privatizer", None) is None


def test_with_role_replaces_exactly_the_part_filling_it():
    def mutant(part):
        return dataclasses.replace(part, name=part.name + "*")
    loop = _P("loop", ("client",), inner=(CLIP, PRIV))
    p = chain.Parts(SEL, (loop, AGG, SERVER))
    q = p.with_role("clipper", mutant)  # inside the loop
    assert [x.name for x in q.chain[0].inner] == ["clip*", "priv"] and q.chain[1:] == (AGG, SERVER)
    assert p.with_role("selection", mutant).selection.name == "sel*"
    r = p.with_role("server", mutant)
    assert [x.name for x in r.chain] == ["loop", "agg", "server*"] and r.chain[0] is loop


def test_silo_sizes_and_data_shape():
    assert chain._silo_sizes(7) == (7,)
    assert chain._silo_sizes(np.int64(3)) == (3,)  # a 0-d array is one silo
    assert chain._silo_sizes(np.array([4, 5])) == (4, 5)
    with pytest.raises(ValueError, match=r"silo_sizes=\[\] must name at least one silo"):
        chain._silo_sizes([])
    assert chain.DataShape.of_sizes([3, 9, 4]) == chain.DataShape(3, 9)
    assert chain.DataShape.of_sizes([]) == chain.DataShape(0, 0)
    rec = (jax.ShapeDtypeStruct((2, 5, 3), np.float32),)
    pooled = types.SimpleNamespace(num_silos=2, n_max=5, record_structs=lambda: rec)
    assert chain.DataShape.of(pooled) == chain.DataShape(2, 5, rec)
    plain = types.SimpleNamespace(num_silos=2, n_max=5, x=np.zeros((2, 5, 3), np.float32), y=np.zeros((2, 5), np.int32))
    shape = chain.DataShape.of(plain)
    assert shape.records == (jax.ShapeDtypeStruct((2, 5, 3), np.float32), jax.ShapeDtypeStruct((2, 5), np.int32))


def test_float32_multiplier_reproduces_the_accounted_std_exactly():
    # the compiled round forms std = float32(z) * float32(divisor); the multiplier must make that product exactly
    # float32(noise_std) whenever one of z's float32 neighbours does (never a std one ulp below the accountant's)
    assert chain.float32_multiplier(0.0, 3.0, lambda z: None) == 0.0
    rng = np.random.default_rng(0)
    hits = misses = 0
    for _ in range(400):
        std, div = float(rng.uniform(0.1, 10)), float(rng.uniform(0.01, 3))
        def run(z, div=div):
            return np.float32(z) * np.float32(div)
        z = chain.float32_multiplier(std, div, run)
        z32 = np.float32(std / div)
        reachable = [np.float32(c) for c in (z32, *(_steps(z32, +1)), *(_steps(z32, -1))) if run(c) == np.float32(std)]
        if reachable:
            hits += 1
            assert run(z) == np.float32(std) and np.float32(z) == reachable[0]
        else:
            misses += 1
            assert np.float32(z) == z32  # none reproduces it: the quotient itself
    assert hits > 100  # both arms reached
    # a run std that no candidate matches: the quotient
    assert chain.float32_multiplier(1.0, 3.0, lambda z: np.float32(-1.0)) == float(np.float32(1.0 / 3.0))


def _steps(z, sign, n=2):
    out, c = [], z
    for _ in range(n):
        c = np.nextafter(c, np.float32(np.inf * sign))
        out.append(c)
    return out
