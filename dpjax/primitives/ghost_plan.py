"""The plan of ghost clipping: which layers a loss calls, how (linen / NNX module systems observed by
hooks), and whether every parameter is covered by a ghost layer (:mod:`dpjax.primitives.ghost_clipping`)."""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import re
from collections.abc import Mapping
from typing import Any, Callable

import flax
import flax.linen as nn
import jax
import jax.extend as jex
import jax.numpy as jnp
from flax.core.tracers import current_trace
from flax.linen import dtypes as linen_dtypes

from dpjax.primitives.lazy_nnx import nnx  # flax.nnx on first use: a linen run never pays its import


PyTree = Any


HIGHEST_PRECISION = jax.lax.Precision.HIGHEST
_SCOPE = "dpjax_ghost_"
_SCOPE_RE = re.compile(_SCOPE + r"(\d+)")
GHOST_KINDS = ("dense", "conv", "embed", "attend")
MATERIALISED = "materialised"


# ----------------------------------------------------------------------------- layer specs
@dataclasses.dataclass(frozen=True)
class DenseSpec:
    """``y = dot(a, W) + b`` contracting input axes ``axes`` (of one example) with the
    first ``len(axes)`` kernel axes; the last ``n_features`` output axes are features."""

    axes: tuple[int, ...]
    n_features: int


@dataclasses.dataclass(frozen=True)
class ConvSpec:
    kernel_size: tuple[int, ...]
    strides: tuple[int, ...]
    padding: Any  # lax padding: "SAME"/"VALID"/"SAME_LOWER" or ((lo, hi), ...)
    input_dilation: tuple[int, ...]
    kernel_dilation: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class EmbedSpec:
    num_embeddings: int


@dataclasses.dataclass(frozen=True)
class LayerCall:
    """One call of a parametrised layer, in execution order.

    ``kind``: ``dense``/``conv``/``embed``/``attend`` (ghost) or ``materialised``; ``param_names``/``leaf_ids``: the
    layer's parameters and their positions in ``tree_leaves(params)``; ``out_shape``: output shape for one example
    (ghost layers; ``()`` for materialised ones); ``name``: type and path, for messages."""

    kind: str
    name: str
    method: str
    param_names: tuple[str, ...]
    leaf_ids: tuple[int, ...]
    out_shape: tuple[int, ...]
    out_dtype: Any
    spec: Any = None
    module_type: Any = None

    def leaf(self, name: str) -> int:
        return self.leaf_ids[self.param_names.index(name)]


@dataclasses.dataclass(frozen=True)
class GhostPlan:
    """What ghost clipping found in a model (built from one traced example).

    ``fast`` says whether ghost clipping applies; ``reason`` why not; ``calls`` the parametrised layer calls in
    execution order; ``leaf_groups`` per parameter leaf used by some layer, ``(leaf, ((call, role), ...))``: the calls
    contributing to its gradient; ``fixed_inputs`` per call, whether its input does not depend on the parameters (e.g.
    the data)."""

    fast: bool
    reason: str
    calls: tuple[LayerCall, ...] = ()
    leaf_groups: tuple[tuple[int, tuple[tuple[int, str], ...]], ...] = ()
    fixed_inputs: tuple[bool, ...] = ()

    @property
    def groups(self) -> tuple[tuple[int, ...], ...]:
        """Calls sharing parameters (one tuple per distinct set of contributing calls)."""
        seen = []
        for _, contribs in self.leaf_groups:
            calls = tuple(sorted({k for k, _ in contribs}))
            if calls not in seen:
                seen.append(calls)
        return tuple(seen)

    def describe(self) -> str:
        """One line per layer call: path taken (ghost kind or materialised), or the reason."""
        if not self.fast:
            return f"vmap(grad) fallback: {self.reason}"
        return "\n".join(f"{c.name}.{c.method}: {'ghost ' + c.kind if c.kind in GHOST_KINDS else c.kind}"
                         for c in self.calls)


# ----------------------------------------------------------------------------- module systems
def _tuple(v, rank):
    if v is None:
        return (1,) * rank
    return (v,) * rank if isinstance(v, int) else tuple(v)


def _conv_padding(pad, rank: int):
    if isinstance(pad, str):
        return pad if pad in ("SAME", "VALID", "SAME_LOWER") else None
    if isinstance(pad, int):
        return ((pad, pad),) * rank
    pad = list(pad)
    if len(pad) != rank:
        return None
    return tuple((p, p) if isinstance(p, int) else tuple(p) for p in pad)


def _conv_spec(module):
    kernel_size = (module.kernel_size,) if isinstance(module.kernel_size, int) else tuple(module.kernel_size)
    rank = len(kernel_size)
    padding = _conv_padding(module.padding, rank)
    if padding is None or module.feature_group_count != 1 or module.mask is not None:
        return None
    return ConvSpec(kernel_size, _tuple(module.strides, rank), padding, _tuple(module.input_dilation, rank),
                    _tuple(module.kernel_dilation, rank))


def _norm_axes(axes, ndim):
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    return tuple(sorted(a % ndim for a in axes)) if len(set(a % ndim for a in axes)) == len(axes) else None


def _dense_axes_in_order(axes, ndim):
    """Contracted axes in kernel order (flax contracts input axis ``axes[j]`` with kernel axis j)."""
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    return tuple(a % ndim for a in axes)


class _Linen:
    """Layer recognition and re-application for ``flax.linen`` modules."""

    @staticmethod
    def own(module, ids) -> dict:
        return {k: v for k, v in module.variables.get("params", {}).items() if not isinstance(v, Mapping)}

    @staticmethod
    def has_child_params(module) -> bool:
        return any(isinstance(v, Mapping) for v in module.variables.get("params", {}).values())

    @staticmethod
    def name(module) -> str:
        try:
            path = "/".join(str(p) for p in module.scope.path)
        except Exception:  # noqa: BLE001  (an unbound module has no scope)
            path = ""
        return f"{type(module).__name__} '{path}'" if path else f"{type(module).__name__} (the top-level module)"

    @staticmethod
    def classify(module, method, args, kwargs):
        """``(kind, spec)`` or ``("refuse", reason)``."""
        t = type(module)
        if t is nn.BatchNorm:
            ura = kwargs.get("use_running_average", args[1] if len(args) > 1 else None)
            ura = module.use_running_average if ura is None else ura
            if not ura:
                return "refuse", "BatchNorm in training mode: its batch statistics couple the examples"
        simple = method == "__call__" and len(args) == 1 and not kwargs and hasattr(args[0], "ndim")
        if not simple and not (t is nn.Embed and method == "attend" and len(args) == 1 and not kwargs):
            return MATERIALISED, None
        default_promote = getattr(module, "promote_dtype", None) is linen_dtypes.promote_dtype
        if t in (nn.Dense, nn.DenseGeneral) and default_promote and module.dot_general is None \
                and module.dot_general_cls is None:
            ndim = args[0].ndim
            if t is nn.Dense:
                return "dense", DenseSpec((ndim - 1,), 1)
            if tuple(module.batch_dims) or _norm_axes(module.axis, ndim) is None:
                return MATERIALISED, None
            features = (module.features,) if isinstance(module.features, int) else tuple(module.features)
            return "dense", DenseSpec(_dense_axes_in_order(module.axis, ndim), len(features))
        if t is nn.Conv and default_promote and module.conv_general_dilated is None \
                and module.conv_general_dilated_cls is None:
            spec = _conv_spec(module)
            return ("conv", spec) if spec is not None else (MATERIALISED, None)
        if t is nn.Embed and default_promote:
            return ("embed" if method == "__call__" else "attend"), EmbedSpec(module.num_embeddings)
        return MATERIALISED, None

    @staticmethod
    def call_with_params(module, method, fn, args, kwargs, new_params: dict):
        others = {c: v for c, v in module.variables.items() if c != "params"}
        out, _ = module.clone(parent=None).apply({"params": new_params, **others}, *args, method=method,
                                                 mutable=True, **kwargs)
        return out


class _NNX:
    """Layer recognition and re-application for ``flax.nnx`` modules."""

    @staticmethod
    def own(module, ids) -> dict:
        return {k: v.get_value() for k, v in vars(module).items()
                if isinstance(v, nnx.Variable) and id(v.get_value()) in ids}

    @staticmethod
    def param_like(module) -> bool:
        return any(isinstance(v, nnx.Param) for v in vars(module).values())

    @staticmethod
    def has_child_params(module, ids) -> bool:
        for path, node in nnx.iter_graph(module):
            if path and isinstance(node, nnx.Module) and _NNX.own(node, ids):
                return True
        return False

    @staticmethod
    def classify(module, method, args, kwargs):
        t = type(module).__mro__[1] if getattr(type(module), "_dpjax_hooked", False) else type(module)
        if t is nnx.BatchNorm:
            ura = kwargs.get("use_running_average", args[1] if len(args) > 1 else None)
            ura = module.use_running_average if ura is None else ura
            if not ura:
                return "refuse", "BatchNorm in training mode: its batch statistics couple the examples"
        extra_ok = all(k == "out_sharding" and v is None for k, v in kwargs.items())
        if not (len(args) == 1 and extra_ok and hasattr(args[0], "ndim") and method in ("__call__", "attend")):
            return MATERIALISED, None
        if method == "attend":
            return ("attend", EmbedSpec(module.num_embeddings)) if t is nnx.Embed else (MATERIALISED, None)
        default_promote = getattr(module, "promote_dtype", None) is nnx.nn.dtypes.promote_dtype
        plain = default_promote and getattr(module, "preferred_element_type", None) is None
        ndim = args[0].ndim
        if t is nnx.Linear and plain and module.dot_general is jax.lax.dot_general:
            return "dense", DenseSpec((ndim - 1,), 1)
        if t is nnx.LinearGeneral and plain and module.dot_general is None and module.dot_general_cls is None \
                and not module.batch_axis and _norm_axes(module.axis, ndim) is not None:
            return "dense", DenseSpec(_dense_axes_in_order(module.axis, ndim), len(module.out_features))
        if t is nnx.Conv and plain and module.conv_general_dilated is jax.lax.conv_general_dilated:
            spec = _conv_spec(module)
            return ("conv", spec) if spec is not None else (MATERIALISED, None)
        if t is nnx.Embed and default_promote:
            return "embed", EmbedSpec(module.num_embeddings)
        return MATERIALISED, None

    @staticmethod
    def call_with_params(module, method, fn, args, kwargs, new_params: dict):
        # a fresh copy carrying the new values (NNX forbids mutating a Variable
        # created outside the current trace, e.g. under the per-example vmap)
        graphdef, state = nnx.split(module)
        flat, treedef = jax.tree_util.tree_flatten_with_path(state)
        values = []
        for path, value in flat:
            key = path[0].key if path and hasattr(path[0], "key") else None
            values.append(new_params[key] if len(path) <= 2 and key in new_params else value)
        fresh = nnx.merge(graphdef, jax.tree_util.tree_unflatten(treedef, values))
        return fn.__func__(fresh, *args, **kwargs)


# ----------------------------------------------------------------------------- observing layer calls
class Observer:
    """Sees every call of a parametrised layer while the loss of one example runs.

    ``mode="probe"``: records the calls (``calls``) and anything unsupported (``problems``). ``mode="capture"``: replays
    ``plan.calls`` adding the perturbations ``z`` and collecting the ghost layers' inputs."""

    def __init__(self, leaves, mode: str, plan: GhostPlan | None = None, z=None):
        self.ids = {id(leaf): i for i, leaf in enumerate(leaves)}
        self.mode = mode
        self.plan = plan
        self.z = z
        self.calls: list[LayerCall] = []
        self.captured: list = []
        self.problems: list[str] = []
        self.active = False
        self.base = current_trace()
        self.nnx_paths: dict = {}

    def _name(self, ops, module):
        if ops is _NNX:
            path = self.nnx_paths.get(id(module))
            base = type(module).__mro__[1] if getattr(type(module), "_dpjax_hooked", False) else type(module)
            where = ("(a copy made inside an NNX transformation)" if path is None
                     else f"'{path}'" if path else "(the top-level module)")
            return f"{base.__name__} {where}"
        return ops.name(module)

    def __call__(self, ops, module, method, fn, args, kwargs):
        if self.active or method == "setup":
            return fn(*args, **kwargs)
        own = ops.own(module, self.ids)
        if not own:
            if self.mode == "probe" and ops is _NNX and _NNX.param_like(module) and current_trace() != self.base:
                # inside an NNX transformation its parameters are the transformation's tracers
                self.problems.append(self._transformed(self._name(ops, module)))
                return self._passthrough(fn, args, kwargs)
            return fn(*args, **kwargs)  # parameter-free, a container, or nothing of it differentiated
        if self.mode == "probe":
            call = self._probe_call(ops, module, method, args, kwargs, own)
            if call is None:
                return self._passthrough(fn, args, kwargs)
            k = len(self.calls)
            self.calls.append(call)
        else:
            k = len(self.captured)
            call = self.plan.calls[k]
            if call.method != method or call.param_names != tuple(sorted(own)):
                raise RuntimeError(f"ghost clipping: layer call {k} changed between traces "
                                   f"({call.name}.{call.method} expected, {type(module).__name__}.{method} seen)")
        self.active = True
        try:
            with jax.named_scope(f"{_SCOPE}{k}"):
                if call.kind == MATERIALISED:
                    out = self._materialised(ops, module, method, fn, args, kwargs, own, call, k)
                    self.captured.append(None)
                else:
                    out = fn(*args, **kwargs)
                    self.captured.append(args[0])
                    if self.mode == "probe":
                        self.calls[k] = dataclasses.replace(call, out_shape=tuple(out.shape), out_dtype=out.dtype)
                    else:
                        out = out + self.z[k].astype(out.dtype)
        finally:
            self.active = False
        return out

    @staticmethod
    def _transformed(name):
        return (f"{name} is called inside a JAX transformation within the loss (nn.scan/nn.remat/nn.vmap/nn.jit, "
                f"nnx.scan/nnx.remat/nnx.vmap/nnx.jit, or jax.lax.scan/jax.checkpoint/jax.jit): ghost clipping "
                f"cannot observe its per-example inputs there; call the layer outside the transformation")

    def _passthrough(self, fn, args, kwargs):
        self.active = True
        try:
            return fn(*args, **kwargs)
        finally:
            self.active = False

    def _probe_call(self, ops, module, method, args, kwargs, own) -> LayerCall | None:
        name = self._name(ops, module)
        if current_trace() != self.base:
            self.problems.append(self._transformed(name))
            return None
        if ops is _Linen:
            missing = [k for k, v in own.items() if id(v) not in self.ids]
            if missing:
                self.problems.append(f"{name}: parameters {sorted(missing)} are not leaves of params "
                                     f"(transformed before the layer sees them)")
                return None
            child = ops.has_child_params(module)
        else:
            child = _NNX.has_child_params(module, self.ids)
        if child:
            self.problems.append(f"{name} owns parameters and also has submodules with parameters: ghost "
                                 f"clipping works layer by layer on leaf modules; move its own parameters "
                                 f"into a leaf submodule")
            return None
        kind, spec = ops.classify(module, method, args, kwargs)
        if kind == "refuse":
            self.problems.append(f"{name}: {spec}")
            return None
        names = tuple(sorted(own))
        return LayerCall(kind, name, method, names, tuple(self.ids[id(own[n])] for n in names), (), None, spec,
                     type(module))

    def _materialised(self, ops, module, method, fn, args, kwargs, own, call, k):
        if self.mode == "probe":
            z = {n: jnp.zeros_like(own[n]) for n in call.param_names}
        else:
            z = dict(zip(call.param_names, self.z[k]))
        new = {n: own[n] + z[n].astype(own[n].dtype) for n in call.param_names}
        if self.mode == "probe":
            try:
                return ops.call_with_params(module, method, fn, args, kwargs, new)
            except Exception as err:  # noqa: BLE001  (turned into a refusal naming the layer)
                self.problems.append(f"{call.name}.{method}: re-applying the layer with per-example "
                                     f"parameters failed ({type(err).__name__}: {err})")
                self.calls[k] = dataclasses.replace(call, kind="refuse")
                return fn(*args, **kwargs)
        return ops.call_with_params(module, method, fn, args, kwargs, new)


_NNX_ACTIVE: list = []
_HOOKED_CLASSES: dict = {}


def _hookable_methods(cls) -> list[str]:
    names = []
    for klass in cls.__mro__:
        if klass in (nnx.Module, object) or not issubclass(klass, nnx.Module):
            break
        for name, value in vars(klass).items():
            if inspect.isfunction(value) and (name == "__call__" or not name.startswith("_")) and name not in names:
                names.append(name)
    return names


def _hooked_class(cls):
    """A subclass of the NNX module class ``cls`` whose public methods report to
    the active observer (installed on the merged copy of a model only)."""
    if getattr(cls, "_dpjax_hooked", False):
        return cls
    if cls not in _HOOKED_CLASSES:
        def wrap(name):
            orig = getattr(cls, name)

            def method(self, *args, **kwargs):
                bound = orig.__get__(self, type(self))
                if not _NNX_ACTIVE:
                    return bound(*args, **kwargs)
                return _NNX_ACTIVE[-1](_NNX, self, name, bound, args, kwargs)

            method.__name__ = name
            return method

        ns = {name: wrap(name) for name in _hookable_methods(cls)}
        ns.update(_dpjax_hooked=True, __module__=cls.__module__, __qualname__=cls.__qualname__)
        _HOOKED_CLASSES[cls] = type(cls.__name__, (cls,), ns)
    return _HOOKED_CLASSES[cls]


@dataclasses.dataclass(frozen=True, eq=False)
class NNXLoss:
    """A per-example loss of a flax NNX model as a function of its parameters.

    ``NNXLoss(graphdef, loss, rest)(params, x, y) = loss(nnx.merge(graphdef, params, *rest), x, y)``:
    ``graphdef, params, *rest = nnx.split(model, nnx.Param, ...)``; ``loss(model, x, y)`` returns the scalar loss of one
    example. It is an ordinary ``loss_fn`` (for ``vmap(grad)``, optax, the engine); ghost clipping recognises it and
    observes the NNX layers' calls on its own merged copy of the model. ``nnx_loss`` builds one from a model."""

    graphdef: Any
    loss: Callable
    rest: tuple = ()

    def __post_init__(self):
        if not callable(self.loss):
            raise TypeError(f"loss={self.loss!r} must be callable: loss(model, x_i, y_i) -> the scalar loss of one "
                            "example")

    def __call__(self, params, x, y):
        model = nnx.merge(self.graphdef, params, *self.rest)
        with _batch_norm_refusal(model):
            return self.loss(model, x, y)

    def _observed(self, params, x, y, observer: Observer):
        model = nnx.merge(self.graphdef, params, *self.rest)
        layers = [(path, node) for path, node in nnx.iter_graph(model)
                  if isinstance(node, nnx.Module) and (_NNX.own(node, observer.ids) or _NNX.param_like(node))]
        for path, node in layers:
            observer.nnx_paths[id(node)] = "/".join(str(p) for p in path)
            node.__class__ = _hooked_class(type(node))
        _NNX_ACTIVE.append(observer)
        try:
            with _batch_norm_refusal(model):
                return self.loss(model, x, y)
        finally:
            _NNX_ACTIVE.pop()


@contextlib.contextmanager
def _batch_norm_refusal(model):
    """flax raises ``TraceContextError`` when the loss mutates NNX state inside the per-example trace, which is a
    modelling error reported as such, naming the layers that cause it: a training-mode ``nnx.BatchNorm`` updates its
    batch statistics (they couple the examples, so a per-example gradient and its clipped sensitivity do not exist);
    a training-mode ``nnx.Dropout`` advances its stateful ``Rngs`` stream (a key drawn once outside the per-example
    trace cannot be advanced inside it)."""
    try:
        yield
    except flax.errors.TraceContextError as err:
        def paths(kind, training):
            return [repr("/".join(str(p) for p in path) or "(the top-level module)")
                    for path, node in nnx.iter_graph(model) if isinstance(node, kind) and training(node)]

        norms = paths(nnx.BatchNorm, lambda n: not n.use_running_average)
        if norms:
            raise ValueError(f"BatchNorm {', '.join(norms)} is in training mode (use_running_average="
                             "False): its batch statistics couple the examples, so per-example gradients and their "
                             "clipped sensitivity are undefined; call model.eval() (or set use_running_average=True) "
                             "before DP training, or use LayerNorm / GroupNorm") from None
        drops = paths(nnx.Dropout, lambda n: not n.deterministic and n.rate > 0)
        if drops:
            raise ValueError(f"Dropout {', '.join(drops)} is in training mode (deterministic=False): it draws its mask "
                             "from the model's stateful Rngs, which cannot advance inside the per-example trace; call "
                             "model.eval() (or set deterministic=True), or pass it a key explicitly "
                             "(self.dropout(h, rngs=key))") from None
        raise ValueError(f"the NNX model mutates its state inside the per-example loss ({err}); per-example "
                         "gradients need a loss that does not update Variables: call model.eval() first") from None


def nnx_loss(model, loss: Callable, params_filter=None) -> tuple[NNXLoss, PyTree]:
    """``(loss_fn, params)`` for an NNX ``model``: ``params`` is the state selected by
    ``params_filter`` (default ``nnx.Param``), ``loss_fn(params, x, y) = loss(model', x, y)``
    with ``model'`` the model carrying ``params``. ``loss(model, x_i, y_i)`` is the scalar loss of one
    example (``x_i`` without the batch axis); ``params`` is an ``nnx.State`` pytree. Example::

        loss_fn, params = nnx_loss(model, lambda m, x, y: optax.softmax_cross_entropy_with_integer_labels(m(x), y))
        res = ghost_clipped_sum(loss_fn, params, x, y, clip_norm=1.0, require_fast=True)
        nnx.update(model, jax.tree.map(lambda p, g: p - lr * g, params, res.total))
    """
    if not isinstance(model, nnx.Module):
        raise TypeError(f"model={type(model).__name__} must be a flax.nnx.Module (for a graphdef and state "
                        f"use NNXLoss(graphdef, loss, rest) directly)")
    if not callable(loss):
        raise TypeError(f"loss={loss!r} must be callable: loss(model, x_i, y_i) -> the scalar loss of one example")
    graphdef, params, rest = nnx.split(model, nnx.Param if params_filter is None else params_filter, ...)
    return NNXLoss(graphdef, loss, (rest,)), params


def observed_loss(loss_fn, params, xi, yi, observer: Observer):
    def interceptor(fn, args, kwargs, ctx):
        return observer(_Linen, ctx.module, ctx.method_name, fn, args, kwargs)

    with nn.intercept_methods(interceptor):
        if isinstance(loss_fn, NNXLoss):
            return loss_fn._observed(params, xi, yi, observer)
        return loss_fn(params, xi, yi)


# ----------------------------------------------------------------------------- the plan
def _where(eqn) -> str:
    try:
        from jax._src import source_info_util

        return source_info_util.summarize(eqn.source_info)
    except Exception:  # noqa: BLE001  (best effort: only for the message)
        return "?"


def make_plan(loss_fn: Callable, params: PyTree, x: jax.Array, y: jax.Array) -> GhostPlan:
    """Traces ``loss_fn(params, x[0], y[0])`` once (to a jaxpr) and decides the path.

    Checks every use of every parameter leaf in that jaxpr: it must lie inside a call of a recognised layer that owns
    the leaf; otherwise (or when a layer is refused) the plan is not fast and ``reason`` names the layer or leaf."""
    xi, yi = x[0], y[0]
    box: dict = {}

    def probe(p):
        obs = Observer(jax.tree_util.tree_leaves(p), "probe")
        loss = observed_loss(loss_fn, p, xi, yi, obs)
        box["obs"] = obs
        return loss, [a for a in obs.captured if a is not None]

    jaxpr = jax.make_jaxpr(probe)(params).jaxpr
    obs = box["obs"]
    if obs.problems:
        more = f" (and {len(obs.problems) - 1} more)" if len(obs.problems) > 1 else ""
        return GhostPlan(False, obs.problems[0] + more)
    calls = tuple(obs.calls)
    paths = [jax.tree_util.keystr(p) for p, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
    leaf_of = {v: i for i, v in enumerate(jaxpr.invars)}
    owners: dict = {}
    for k, call in enumerate(calls):
        for leaf in call.leaf_ids:
            owners.setdefault(leaf, set()).add(k)
    used = set()
    for eqn in jaxpr.eqns:
        for v in eqn.invars:
            if not isinstance(v, jex.core.Var) or v not in leaf_of:
                continue
            leaf = leaf_of[v]
            scopes = {int(s) for s in _SCOPE_RE.findall(str(eqn.source_info.name_stack))}
            if not scopes & owners.get(leaf, set()):
                owner = " or ".join(calls[k].name for k in sorted(owners.get(leaf, ()))) or "no recognised layer"
                return GhostPlan(False, f"parameter {paths[leaf]} is used outside the layer that owns it "
                                        f"({owner}): '{eqn.primitive}' at {_where(eqn)}. Ghost clipping needs "
                                        f"every parameter used only inside its own layer's calls (NNX models: "
                                        f"build the loss with ghost_clipping.nnx_loss / NNXLoss)")
            used.add(leaf)
    if any(isinstance(v, jex.core.Var) and v in leaf_of for v in jaxpr.outvars):
        return GhostPlan(False, "a parameter is returned by the loss unchanged")
    # per call: does its captured input depend on the parameters?
    dependent = set(jaxpr.invars)
    is_dep = lambda v: isinstance(v, jex.core.Var) and v in dependent  # noqa: E731  (literals are constants)
    for eqn in jaxpr.eqns:
        if any(is_dep(v) for v in eqn.invars):
            dependent.update(eqn.outvars)
    ghost_outs = iter(jaxpr.outvars[1:])
    fixed = tuple(False if c.kind == MATERIALISED else not is_dep(next(ghost_outs)) for c in calls)
    groups = []
    for leaf in sorted(owners):
        contribs = []
        for k in sorted(owners[leaf]):
            call = calls[k]
            contribs.append((k, call.param_names[call.leaf_ids.index(leaf)]))
        groups.append((leaf, tuple(contribs)))
    return GhostPlan(True, "", calls, tuple(groups), fixed)
