"""Per-example clipping of flax networks without per-example gradients ("ghost clipping").

DP-SGD (Abadi et al. 2016, Algorithm 1) needs ``sum_i clip_C(grad l_i)`` with
``clip_C(g) = g min(1, C / ||g||)`` and ``||g||`` the global l2 norm over all
parameters. Materialising every per-example gradient (``vmap(grad)``) costs
``B x |params|`` memory and time. Every supported layer's per-example gradient
is instead a function of two small per-example tensors that one batched pass
already computes: the layer's input ``a_i`` and the gradient ``delta_i`` of the
example's loss with respect to the layer's output.

Ghost layers (norm from ``a_i`` and ``delta_i``, no per-example gradient):

* dense layers (linen ``Dense``/``DenseGeneral``, NNX ``Linear``/``LinearGeneral``,
  also inside ``MultiHeadDotProductAttention``/``SelfAttention``/NNX
  ``MultiHeadAttention``) ``y = a W + b`` applied at ``T`` positions (the
  contracted axes flattened to ``K``, the feature axes to ``C``):
  ``grad_W = A_i^T D_i`` (``A_i [T, K]``, ``D_i [T, C]``), ``grad_b = sum_t D_it``.
  Squared norm ``||a_i||^2 ||delta_i||^2`` for ``T = 1`` (Goodfellow 2015), else
  the Gram form ``sum_{t,s} (a_t . a_s)(delta_t . delta_s)`` (Li et al. 2022,
  "Large language models can be strong differentially private learners",
  Sec. 4) or the materialised ``||A_i^T D_i||^2``, whichever costs fewer flops
  (the per-layer choice of Bu et al. 2023, "Differentially private optimization
  on large model at small cost", mixed ghost clipping);
* convolutions (linen/NNX ``Conv``): the same identity on unfolded input patches
  (``A_i [P, k k c_in]``, P output positions; Rochette et al. 2019, Bu et al. 2023);
* embeddings (``Embed``): ``grad_E = onehot(idx_i)^T D_i``, squared norm
  ``sum_{t,s} [idx_t = idx_s] (delta_t . delta_s)``; ``Embed.attend``
  (``y = q E^T``): ``grad_E = D_i^T Q_i``, a dense layer with the roles of input
  and output swapped; a tied embedding/read-out (``__call__`` and ``attend`` on
  one table) adds the cross term ``2 sum_{t,s} D^attend_s[idx_t] (delta_t . q_s)``.

Materialised layers (no ghost identity; the layer's own per-example gradient,
``B x |layer|`` floats, is formed layer by layer): every other flax module
that owns parameters and no parametrised submodules (``LayerNorm``, ``RMSNorm``,
``GroupNorm``, grouped/masked/circular convolutions, ``ConvTranspose``,
``Einsum``, ``BatchNorm`` with running averages, custom leaf modules), and the
biases of the layers above. The per-example gradient comes from zero
perturbations added to the layer's parameters *inside* the one batched pass
(``params + z_i`` for example ``i``; the backward pass to ``z`` is the
per-example gradient of this layer only), so any leaf module works, whatever
its arguments.

Weight sharing: a layer called several times, NNX modules sharing a
``Variable``, and a tied embedding/read-out are handled parameter by
parameter: the per-example gradient of a shared parameter is the sum of its
calls' contributions (stacked along the position axis for the Gram form); a
parameter shared by layers of different kinds is materialised.

Refused (``GhostPlan.fast`` False with a reason naming the layer or parameter;
the default path then runs ``vmap(grad)``, ``require_fast=True`` raises
``GhostFallbackError``): layers called inside a JAX transformation within the
loss (``nn.scan``/``nn.remat``/``nn.vmap``/``nn.jit``, their NNX
counterparts, ``jax.lax.scan``/``jax.checkpoint``/``jax.jit``), parameters used
outside the layer that owns them (``emb.embedding`` read directly, weight decay
inside the loss, NNX state merged by the loss itself instead of through
``NNXLoss``), modules that own parameters and also have parametrised
submodules, ``BatchNorm`` in training mode (its batch statistics couple the
examples). These checks are exact, not heuristic: every use of every
parameter in the traced loss (its jaxpr) must lie inside a recognised layer
call that owns the parameter, so no model can silently get a wrong norm.

The algorithm: one batched forward pass with zero "perturbation" tensors
added to every ghost layer's output (and to every materialised layer's
parameters), capturing the ghost layers' inputs; one backward pass to the
perturbations (activation gradients only, no weight gradients) gives every
``delta_i`` and every materialised per-example layer gradient; the norms above
give the clip factors ``f_i = w_i min(1, C / ||g_i||)``; the clipped sum is, per
layer, the weight gradient of the batch with output cotangents ``f_i delta_i``
(``A^T diag(f) D`` for a dense layer), which costs what the non-private
backward pass spends on weight gradients. No per-example gradient of the whole
model is formed.

Flax NNX: wrap the per-example loss as ``NNXLoss(graphdef, loss, rest)``
(``loss(model, x, y)`` on the merged model; ``rest``: the non-parameter state)
or build it with ``nnx_loss(model, loss)``, which splits the model and returns
``(loss_fn, params)``. ``loss_fn(params, x, y)`` is an ordinary per-example loss
(usable with ``vmap(grad)``, optax, the engine) and the ghost functions
recognise it and observe the NNX layers' calls.

Gradient differences (DIFF2, Murata & Suzuki 2023, Algorithm 1 step 2):
``grad l_i(w) - grad l_i(w')`` of a dense layer is
``A^T (D - D') + (A - A')^T D'``, i.e. again one "dense layer" whose factors are
``[A; A - A']`` and ``[D - D'; D']`` stacked along the position axis, so its norm
uses the same identities; when the layer's input does not depend on the
parameters (``GhostPlan.fixed_inputs``: a first layer sees the data) the
difference is just ``A^T (D - D')``. ``layer_passes`` / ``clipped_difference_from_passes``
let DIFF2 carry the previous iterate's pass instead of recomputing it. (Expanding ``||A^T D||^2 - 2<A^T D, A'^T D'> + ||A'^T D'||^2``
instead would cancel catastrophically in float32 when ``w' ~ w``.)

The semantics are those of ``dpjax.primitives.clipping.per_example_clipped_sum``;
the result's ``fast_path`` says which path ran.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
import re
from collections.abc import Mapping
from typing import Any, Callable, NamedTuple

import flax.linen as nn
import jax
import jax.extend as jex
import jax.numpy as jnp
from flax import nnx
from flax.core.tracers import current_trace
from flax.linen import dtypes as linen_dtypes
from flax.nnx.nn import dtypes as nnx_dtypes

from dpjax.primitives import clipping

PyTree = Any
_TINY = 1e-30  # the norm floor of clipping.clip_to_norm (factor min(1, C / max(norm, floor)))
_HIGHEST = jax.lax.Precision.HIGHEST
_SCOPE = "dpjax_ghost_"
_SCOPE_RE = re.compile(_SCOPE + r"(\d+)")
GHOST_KINDS = ("dense", "conv", "embed", "attend")
MATERIALISED = "materialised"


class GhostClippedSum(NamedTuple):
    """``ClippedSum`` plus which path computed it.

    Attributes:
      total, count, sensitivity: as in ``dpjax.primitives.clipping.ClippedSum``.
      fast_path: True when ghost norms ran, False for the ``vmap(grad)`` fallback
        (a Python bool at trace time; an array once returned from ``jit``).
    """

    total: PyTree
    count: jax.Array
    sensitivity: Any
    fast_path: Any


class GhostFallbackError(ValueError):
    """Raised with ``require_fast=True`` when the model is not fully supported."""


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
class _Call:
    """One call of a parametrised layer, in execution order.

    ``kind``: ``dense``/``conv``/``embed``/``attend`` (ghost) or ``materialised``;
    ``param_names``/``leaf_ids``: the layer's parameters and their positions in
    ``tree_leaves(params)``; ``out_shape``: output shape for one example (ghost
    layers; ``()`` for materialised ones); ``name``: type and path, for messages.
    """

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

    ``fast`` says whether ghost clipping applies; ``reason`` why not; ``calls``
    the parametrised layer calls in execution order; ``leaf_groups`` per
    parameter leaf used by some layer, ``(leaf, ((call, role), ...))``: the calls
    contributing to its gradient; ``fixed_inputs`` per call, whether its input
    does not depend on the parameters (e.g. the data).
    """

    fast: bool
    reason: str
    calls: tuple[_Call, ...] = ()
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
        default_promote = getattr(module, "promote_dtype", None) is nnx_dtypes.promote_dtype
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
class _Observer:
    """Sees every call of a parametrised layer while the loss of one example runs.

    ``mode="probe"``: records the calls (``calls``) and anything unsupported
    (``problems``). ``mode="capture"``: replays ``plan.calls`` adding the
    perturbations ``z`` and collecting the ghost layers' inputs.
    """

    def __init__(self, leaves, mode: str, plan: GhostPlan | None = None, z=None):
        self.ids = {id(leaf): i for i, leaf in enumerate(leaves)}
        self.mode = mode
        self.plan = plan
        self.z = z
        self.calls: list[_Call] = []
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

    def _probe_call(self, ops, module, method, args, kwargs, own) -> _Call | None:
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
        return _Call(kind, name, method, names, tuple(self.ids[id(own[n])] for n in names), (), None, spec,
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
    ``graphdef, params, *rest = nnx.split(model, nnx.Param, ...)``; ``loss(model, x, y)``
    returns the scalar loss of one example. It is an ordinary ``loss_fn`` (for
    ``vmap(grad)``, optax, the engine); ghost clipping recognises it and observes
    the NNX layers' calls on its own merged copy of the model. ``nnx_loss`` builds
    one from a model.
    """

    graphdef: Any
    loss: Callable
    rest: tuple = ()

    def __call__(self, params, x, y):
        return self.loss(nnx.merge(self.graphdef, params, *self.rest), x, y)

    def _observed(self, params, x, y, observer: _Observer):
        model = nnx.merge(self.graphdef, params, *self.rest)
        layers = [(path, node) for path, node in nnx.iter_graph(model)
                  if isinstance(node, nnx.Module) and (_NNX.own(node, observer.ids) or _NNX.param_like(node))]
        for path, node in layers:
            observer.nnx_paths[id(node)] = "/".join(str(p) for p in path)
            node.__class__ = _hooked_class(type(node))
        _NNX_ACTIVE.append(observer)
        try:
            return self.loss(model, x, y)
        finally:
            _NNX_ACTIVE.pop()


def nnx_loss(model, loss: Callable, params_filter=nnx.Param) -> tuple[NNXLoss, PyTree]:
    """``(loss_fn, params)`` for an NNX ``model``: ``params`` is the state selected by
    ``params_filter`` (default ``nnx.Param``), ``loss_fn(params, x, y) = loss(model', x, y)``
    with ``model'`` the model carrying ``params``. Example::

        loss_fn, params = nnx_loss(model, lambda m, x, y: optax.softmax_cross_entropy_with_integer_labels(m(x), y))
        res = ghost_clipped_sum(loss_fn, params, x, y, clip_norm=1.0, require_fast=True)
        nnx.update(model, jax.tree.map(lambda p, g: p - lr * g, params, res.total))
    """
    if not isinstance(model, nnx.Module):
        raise TypeError(f"model={type(model).__name__} must be a flax.nnx.Module (for a graphdef and state "
                        f"use NNXLoss(graphdef, loss, rest) directly)")
    graphdef, params, rest = nnx.split(model, params_filter, ...)
    return NNXLoss(graphdef, loss, (rest,)), params


def _observed_loss(loss_fn, params, xi, yi, observer: _Observer):
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

    Checks every use of every parameter leaf in that jaxpr: it must lie inside
    a call of a recognised layer that owns the leaf; otherwise (or when a layer
    is refused) the plan is not fast and ``reason`` names the layer or leaf.
    """
    xi, yi = x[0], y[0]
    box: dict = {}

    def probe(p):
        obs = _Observer(jax.tree_util.tree_leaves(p), "probe")
        loss = _observed_loss(loss_fn, p, xi, yi, obs)
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


# ----------------------------------------------------------------------------- one pass
def _capture(loss_fn, params, x, y, plan: GhostPlan):
    """One forward + one backward pass to the perturbations.

    Returns ``(inputs, deltas)``, lists over ``plan.calls``: for a ghost layer
    the batched input ``[B, ...]`` and output gradient of each example's own
    loss; for a materialised layer ``None`` and the tuple of its per-example
    parameter gradients ``[B, *leaf.shape]`` (in ``param_names`` order).
    """
    batch = x.shape[0]
    leaves = jax.tree_util.tree_leaves(params)
    zeros = []
    for c in plan.calls:
        if c.kind == MATERIALISED:
            zeros.append(tuple(jnp.zeros((batch,) + leaves[i].shape, leaves[i].dtype) for i in c.leaf_ids))
        else:
            zeros.append(jnp.zeros((batch,) + c.out_shape, c.out_dtype))

    def per_example(z, xi, yi):
        obs = _Observer(leaves, "capture", plan, z)
        loss = _observed_loss(loss_fn, params, xi, yi, obs)
        return loss, obs.captured

    losses, vjp_fn, inputs = jax.vjp(lambda z: jax.vmap(per_example)(z, x, y), zeros, has_aux=True)
    (deltas,) = vjp_fn(jnp.ones_like(losses))
    return inputs, deltas


def _patches(spec: ConvSpec, a):
    """Unfolded input patches ``[B, P, c_in prod(kernel)]`` of a convolution."""
    rank = len(spec.kernel_size)
    batch = a.shape[0]
    a = a.reshape((-1,) + a.shape[a.ndim - rank - 1:])
    spatial = "DHW"[3 - rank:] if rank <= 3 else None
    dn = ("N" + spatial + "C", spatial + "IO", "N" + spatial + "C")
    p = jax.lax.conv_general_dilated_patches(
        a, spec.kernel_size, spec.strides, spec.padding, lhs_dilation=spec.input_dilation,
        rhs_dilation=spec.kernel_dilation, dimension_numbers=dn, precision=_HIGHEST)
    return p.reshape(batch, -1, p.shape[-1])


def _conv_dn(rank):
    spatial = "DHW"[3 - rank:] if rank <= 3 else None
    return ("N" + spatial + "C", spatial + "IO", "N" + spatial + "C")


def _dense_a(spec: DenseSpec, a):
    """Layer input ``[B, ...]`` as ``[B, T, K]`` (contracted axes last, in kernel order)."""
    n = len(spec.axes)
    a = jnp.moveaxis(a, [ax + 1 for ax in spec.axes], list(range(a.ndim - n, a.ndim)))
    k = math.prod(a.shape[a.ndim - n:])
    return a.reshape(a.shape[0], -1, k)


def _flat_d(call: _Call, d):
    """Output gradient ``[B, *out]`` as ``[B, T, C]`` (C: the feature axes)."""
    nf = call.spec.n_features if call.kind == "dense" else 1
    c = math.prod(call.out_shape[len(call.out_shape) - nf:]) if call.out_shape else 1
    return d.reshape(d.shape[0], -1, c)


def _embed_index(call: _Call, idx):
    """Token ids ``[B, T]`` with negative ids wrapped (as ``jnp.take``) and
    out-of-range ids set to ``num_embeddings`` (their gradient is zero)."""
    v = call.spec.num_embeddings
    idx = idx.reshape(idx.shape[0], -1).astype(jnp.int32)
    if v == 1:  # flax broadcasts the single row
        return jnp.zeros_like(idx)
    idx = jnp.where(idx < 0, idx + v, idx)
    return jnp.where((idx >= 0) & (idx < v), idx, v)


def _contribution(call: _Call, role: str, a, d):
    """One call's contribution to one leaf's per-example gradient:
    ``("outer", A [B,T,K], D [B,T,C], layout)`` (gradient ``A^T D`` in ``layout``),
    ``("index", idx [B,T], D [B,T,F], V)`` or ``("vec", G [B, F])``."""
    if call.kind == MATERIALISED:
        g = d[call.param_names.index(role)]
        return ("vec", g.reshape(g.shape[0], -1))
    if role == "bias":
        return ("vec", jnp.sum(_flat_d(call, d), axis=1))
    if call.kind == "dense":
        return ("outer", _dense_a(call.spec, a), _flat_d(call, d), "plain")
    if call.kind == "conv":
        return ("outer", _patches(call.spec, a), _flat_d(call, d), ("conv", call.spec.kernel_size))
    if call.kind == "embed":
        return ("index", _embed_index(call, a), _flat_d(call, d), call.spec.num_embeddings)
    # attend: grad_E = D^T Q, i.e. (Q^T D)^T with Q the query [T, F], D the output gradient [T, V]
    return ("outer", a.reshape(a.shape[0], -1, a.shape[-1]), _flat_d(call, d), "transposed")


def _materialise(t: int, k: int, c: int) -> bool:
    """Per-example ``A^T D`` costs T K C flops, its Gram-form norm T^2 (K + C)."""
    return t > 1 and t * (k + c) > k * c


def _materialise_index(t: int, v: int, f: int) -> bool:
    """Scattering ``onehot(idx)^T D`` keeps ``V F`` floats per example, the Gram form
    ``T^2`` (and costs ``T^2 F`` flops against ``(T + V) F``): materialise only when
    the table is no larger than the Gram matrix (memory decides; a vocabulary-sized
    per-example table would dominate the step's memory)."""
    return v * f <= t * t


def _dense_of(contrib, shape):
    """A contribution's per-example gradient ``[B, *shape]`` (the leaf's layout)."""
    kind = contrib[0]
    if kind == "vec":
        return contrib[1].reshape((contrib[1].shape[0],) + tuple(shape))
    if kind == "index":
        _, idx, d, v = contrib
        b = jnp.arange(idx.shape[0])[:, None]
        g = jnp.zeros((idx.shape[0], v, d.shape[-1]), d.dtype).at[b, idx].add(d, mode="drop")
        return g.reshape((idx.shape[0],) + tuple(shape))
    _, a, d, layout = contrib
    g = jnp.einsum("btk,btc->bkc", a, d, precision=_HIGHEST)
    if layout == "transposed":
        g = jnp.swapaxes(g, 1, 2)
    elif layout != "plain":  # conv patches are (c_in, *window)-major: to (*window, c_in, c_out)
        window = layout[1]
        g = jnp.moveaxis(g.reshape((g.shape[0], -1) + tuple(window) + (g.shape[-1],)), 1, -2)
    return g.reshape((g.shape[0],) + tuple(shape))


def _layer_parts(plan: GhostPlan, leaves, inputs, deltas):
    """Per leaf group, the factors of its per-example gradient (for the norm):
    ``("vec", G [B,F])`` (materialised), ``("outer", A, D, fixed)`` (grad = A^T D or its
    transpose; ``fixed``: A does not depend on params), ``("embed", idx, D, fixed, V)``,
    or ``("tied", embed part, outer part)``. Also returns ``{leaf: G [B, *leaf.shape]}``
    for the materialised leaves (reused by the clipped sum)."""
    parts, mats = [], {}
    for leaf, contribs in plan.leaf_groups:
        shape = leaves[leaf].shape
        cs = [(_contribution(plan.calls[k], role, inputs[k], deltas[k]), plan.fixed_inputs[k]) for k, role in contribs]
        kinds = {c[0][0] for c in cs}
        layouts = {c[0][3] for c in cs if c[0][0] == "outer"}
        part = None
        if kinds == {"outer"} and len(layouts) == 1 and len({(c[0][1].shape[2], c[0][2].shape[2]) for c in cs}) == 1:
            a = jnp.concatenate([c[0][1] for c in cs], axis=1)
            d = jnp.concatenate([c[0][2] for c in cs], axis=1)
            if not _materialise(a.shape[1], a.shape[2], d.shape[2]):
                part = ("outer", a, d, all(f for _, f in cs))
        elif kinds == {"index"}:
            idx = jnp.concatenate([c[0][1] for c in cs], axis=1)
            d = jnp.concatenate([c[0][2] for c in cs], axis=1)
            if not _materialise_index(idx.shape[1], cs[0][0][3], d.shape[2]):
                part = ("embed", idx, d, all(f for _, f in cs), cs[0][0][3])
        elif kinds == {"index", "outer"} and layouts == {"transposed"}:  # tied embedding and read-out
            ix = [c for c in cs if c[0][0] == "index"]
            ou = [c for c in cs if c[0][0] == "outer"]
            idx = jnp.concatenate([c[0][1] for c in ix], axis=1)
            dx = jnp.concatenate([c[0][2] for c in ix], axis=1)
            a = jnp.concatenate([c[0][1] for c in ou], axis=1)
            d = jnp.concatenate([c[0][2] for c in ou], axis=1)
            v = ix[0][0][3]
            if not _materialise_index(idx.shape[1], v, dx.shape[2]) and not _materialise(a.shape[1], a.shape[2],
                                                                                          d.shape[2]):
                part = ("tied", ("embed", idx, dx, all(f for _, f in ix), v), ("outer", a, d, all(f for _, f in ou)))
        if part is None:  # the materialised gradient of this leaf: sum of its contributions
            g = sum(_dense_of(c, shape) for c, _ in cs)
            mats[leaf] = g
            part = ("vec", g.reshape(g.shape[0], -1))
        parts.append(part)
    return parts, mats


def _difference_parts(parts, prev_parts) -> list:
    """Factors of ``grad l_i(w) - grad l_i(w')`` from those at ``w`` and ``w'``."""

    def diff(p, q):
        if p[0] == "vec":
            return ("vec", p[1] - q[1])
        if p[0] == "embed":
            if p[3]:  # same ids at both iterates
                return ("embed", p[1], p[2] - q[2], True, p[4])
            return ("embed", jnp.concatenate([p[1], q[1]], 1), jnp.concatenate([p[2], -q[2]], 1), False, p[4])
        if p[0] == "tied":
            return ("tied", diff(p[1], q[1]), diff(p[2], q[2]))
        if p[3]:  # the layer sees the data itself: A = A', so the difference is A^T (D - D')
            return ("outer", p[1], p[2] - q[2], True)
        # A^T D - A'^T D' = A^T (D - D') + (A - A')^T D'
        return ("outer", jnp.concatenate([p[1], p[1] - q[1]], 1), jnp.concatenate([p[2] - q[2], q[2]], 1), False)

    return [diff(p, q) for p, q in zip(parts, prev_parts)]


def _outer_sq_norms(a, d):
    """``||A_i^T D_i||_F^2`` per example, by the cheaper of the Gram and materialised forms."""
    t, k, c = a.shape[1], a.shape[2], d.shape[2]
    if t == 1:
        return jnp.sum(jnp.square(a[:, 0]), -1) * jnp.sum(jnp.square(d[:, 0]), -1)
    if t <= 4 and not _materialise(t, k, c):  # tiny Gram (e.g. a DIFF2 difference, T = 2): fused
        # elementwise products, not B batched 2x2 matrix products
        gram_a = jnp.sum(a[:, :, None, :] * a[:, None, :, :], axis=-1)
        gram_d = jnp.sum(d[:, :, None, :] * d[:, None, :, :], axis=-1)
        return jnp.sum(gram_a * gram_d, axis=(1, 2))
    if not _materialise(t, k, c):
        gram_a = jnp.einsum("btk,bsk->bts", a, a, precision=_HIGHEST)
        gram_d = jnp.einsum("btc,bsc->bts", d, d, precision=_HIGHEST)
        return jnp.sum(gram_a * gram_d, axis=(1, 2))
    return jnp.sum(jnp.square(jnp.einsum("btk,btc->bkc", a, d, precision=_HIGHEST)), axis=(1, 2))


def _embed_sq_norms(idx, d, v):
    same = (idx[:, :, None] == idx[:, None, :]) & (idx[:, :, None] < v)
    gram = jnp.einsum("btf,bsf->bts", d, d, precision=_HIGHEST)
    return jnp.sum(jnp.where(same, gram, 0.0), axis=(1, 2))


def _sq_norms(parts):
    total = 0.0
    for p in parts:
        if p[0] == "vec":
            total = total + jnp.sum(jnp.square(p[1]), axis=-1)
        elif p[0] == "embed":
            total = total + _embed_sq_norms(p[1], p[2], p[4])
        elif p[0] == "tied":
            (_, idx, dx, _, v), (_, q, dv, _) = p[1], p[2]
            # <onehot(idx)^T Dx, Dv^T Q> = sum_{t,s} Dv[s, idx_t] (Dx_t . Q_s)
            picked = jnp.take_along_axis(dv, jnp.broadcast_to(jnp.minimum(idx, v - 1)[:, None, :],
                                                              dv.shape[:2] + idx.shape[1:]), axis=2)
            picked = jnp.where((idx < v)[:, None, :], picked, 0.0)  # [B, S, T]
            cross = jnp.einsum("bst,btf,bsf->b", picked, dx, q, precision=_HIGHEST)
            total = total + _embed_sq_norms(idx, dx, v) + _outer_sq_norms(q, dv) + 2.0 * cross
        else:
            total = total + _outer_sq_norms(p[1], p[2])
    return jnp.maximum(total, 0.0)  # the Gram form can round below 0 for a zero gradient


def _weight_grad(call: _Call, role: str, a, cot, shape):
    """``sum_i`` of one call's contribution to one leaf with output cotangents ``cot``
    (the batch's weight gradient of this call; ``a``: its masked inputs)."""
    if role == "bias":
        return jnp.sum(_flat_d(call, cot), axis=(0, 1)).reshape(shape)
    if call.kind == "dense":
        a2, d2 = _dense_a(call.spec, a), _flat_d(call, cot)
        return jnp.einsum("btk,btc->kc", a2, d2).reshape(shape)
    if call.kind == "conv":
        spec = call.spec
        rank = len(spec.kernel_size)
        lhs = a.reshape((-1,) + a.shape[a.ndim - rank - 1:])
        out = cot.reshape((-1,) + cot.shape[cot.ndim - rank - 1:])

        def conv(kernel):
            return jax.lax.conv_general_dilated(lhs, kernel, spec.strides, spec.padding,
                                                lhs_dilation=spec.input_dilation, rhs_dilation=spec.kernel_dilation,
                                                dimension_numbers=_conv_dn(rank))

        _, vjp = jax.vjp(conv, jnp.zeros(shape, out.dtype))
        return vjp(out)[0]
    if call.kind == "embed":
        idx = _embed_index(call, a).reshape(-1)
        d2 = _flat_d(call, cot)
        return jnp.zeros(shape, d2.dtype).at[idx].add(d2.reshape(-1, d2.shape[-1]), mode="drop")
    # attend: grad_E = sum_t D_t^T q_t
    return jnp.einsum("btv,btf->vf", _flat_d(call, cot), a.reshape(a.shape[0], -1, a.shape[-1])).reshape(shape)


def _weighted_layer_sums(plan: GhostPlan, params, inputs, deltas, coef, mats, skip=frozenset(), rows=None) -> PyTree:
    """``sum_i coef_i grad l_i`` as a params pytree: per ghost layer, the batch's weight
    gradient with output cotangents ``coef_i delta_i`` (``A^T diag(coef) D`` for dense),
    ``sum_i coef_i G_i`` where the per-example gradient was materialised. Calls in
    ``skip`` contribute nothing (outside ``mats``). ``rows`` (default ``coef != 0``):
    the rows whose inputs are used; pass the data mask so that inputs shared by a
    vmapped batch of runs (the data) stay shared instead of being masked once per run."""
    leaves, treedef = jax.tree_util.tree_flatten(params)
    out = [jnp.zeros_like(leaf) for leaf in leaves]
    keep = coef != 0  # masked rows add nothing, even if NaN
    used = keep if rows is None else rows
    for leaf, g in mats.items():
        weighted = jnp.where(keep.reshape((-1,) + (1,) * (g.ndim - 1)), g, jnp.zeros_like(g))
        out[leaf] = jnp.tensordot(coef.astype(g.dtype), weighted, axes=1).astype(leaves[leaf].dtype)
    cots, ins = {}, {}
    for leaf, contribs in plan.leaf_groups:
        if leaf in mats:
            continue
        for k, role in contribs:
            if k in skip:
                continue
            if k not in cots:
                d, a = deltas[k], inputs[k]
                c = coef.reshape((-1,) + (1,) * (d.ndim - 1)).astype(d.dtype)
                cots[k] = jnp.where(c != 0, c * d, jnp.zeros_like(d))
                ins[k] = jnp.where(used.reshape((-1,) + (1,) * (a.ndim - 1)), a, jnp.zeros_like(a))
            g = _weight_grad(plan.calls[k], role, ins[k], cots[k], leaves[leaf].shape)
            out[leaf] = out[leaf] + g.astype(out[leaf].dtype)
    return jax.tree_util.tree_unflatten(treedef, out)


def _clip_coefficients(sq_norms, clip_norm, weights):
    """``w_i min(1, C / ||g_i||)``, exactly 0 where ``w_i = 0`` (even for a NaN padding row)."""
    factor = jnp.minimum(1.0, clip_norm / jnp.maximum(jnp.sqrt(sq_norms), _TINY))
    return jnp.where(weights != 0, weights * factor, jnp.zeros_like(factor))


def _weights(mask, batch, dtype=jnp.float32):
    return jnp.ones((batch,), dtype) if mask is None else mask.astype(dtype)


def _resolve(plan: GhostPlan, require_fast: bool, force_fallback: bool) -> bool:
    if force_fallback:
        return False
    if not plan.fast and require_fast:
        raise GhostFallbackError(f"require_fast=True but ghost clipping cannot run: {plan.reason}")
    return plan.fast


def per_example_grad_norms(loss_fn: Callable, params: PyTree, x: jax.Array, y: jax.Array, *,
                           require_fast: bool = False):
    """Global l2 norms ``||grad loss_fn(params, x_i, y_i)||`` for every example.

    Returns ``(norms [B], fast_path)``.
    """
    plan = make_plan(loss_fn, params, x, y)
    if not _resolve(plan, require_fast, False):
        grads = clipping.per_example_grads(loss_fn, params, x, y)
        return jax.vmap(clipping.global_norm)(grads), False
    leaves = jax.tree_util.tree_leaves(params)
    inputs, deltas = _capture(loss_fn, params, x, y, plan)
    return jnp.sqrt(_sq_norms(_layer_parts(plan, leaves, inputs, deltas)[0])), True


def ghost_clipped_sum(
    loss_fn: Callable,
    params: PyTree,
    x: jax.Array,
    y: jax.Array,
    clip_norm,
    mask: jax.Array | None = None,
    neighboring: str = "replace-one",
    *,
    require_fast: bool = False,
    force_fallback: bool = False,
) -> GhostClippedSum:
    """``sum_i mask_i clip_C(grad loss_fn(params, x_i, y_i))`` by ghost norms.

    Same quantity (to float rounding) and sensitivity as
    ``clipping.per_example_clipped_sum``; ``mask`` may hold 0/1 padding flags
    or non-negative multiplicities. ``clip_norm=None`` or ``inf`` sums unclipped.
    ``require_fast=True`` raises ``GhostFallbackError`` instead of falling back
    to ``vmap(grad)``; ``force_fallback=True`` runs the fallback (reference).
    ``loss_fn`` may be an ``NNXLoss`` (flax NNX models, see ``nnx_loss``).
    """
    sensitivity = clipping.sensitivity_of_clipped_sum(jnp.inf if clip_norm is None else clip_norm, neighboring)
    plan = make_plan(loss_fn, params, x, y)
    if not _resolve(plan, require_fast, force_fallback):
        bound = jnp.inf if clip_norm is None else clip_norm
        res = clipping.per_example_clipped_sum(loss_fn, params, x, y, bound, mask, neighboring)
        return GhostClippedSum(res.total, res.count, sensitivity, False)
    weights = _weights(mask, x.shape[0])
    inputs, deltas = _capture(loss_fn, params, x, y, plan)
    if clip_norm is None:
        coef = weights
        mats = _materialised_leaves(plan, jax.tree_util.tree_leaves(params), inputs, deltas)
    else:
        parts, mats = _layer_parts(plan, jax.tree_util.tree_leaves(params), inputs, deltas)
        coef = _clip_coefficients(_sq_norms(parts), clip_norm, weights)
    total = _weighted_layer_sums(plan, params, inputs, deltas, coef, mats, rows=weights != 0)
    return GhostClippedSum(total, jnp.sum(weights), sensitivity, True)


def _materialised_leaves(plan: GhostPlan, leaves, inputs, deltas):
    """``{leaf: G [B, *leaf.shape]}`` for the leaves a materialised layer uses (an
    unclipped sum needs no norms; the ghost layers' sums come from their
    weight-gradient pass)."""
    mats = {}
    for leaf, contribs in plan.leaf_groups:
        if any(plan.calls[k].kind == MATERIALISED for k, _ in contribs):
            mats[leaf] = sum(_dense_of(_contribution(plan.calls[k], role, inputs[k], deltas[k]), leaves[leaf].shape)
                             for k, role in contribs)
    return mats


def layer_passes(loss_fn: Callable, params: PyTree, x: jax.Array, y: jax.Array, plan: GhostPlan):
    """``(inputs, deltas)`` of every layer call at ``params`` (one forward
    and one activation-gradient backward pass); ``plan`` from ``make_plan``.
    DIFF2 carries these from one round to the next (the previous iterate's pass)."""
    return _capture(loss_fn, params, x, y, plan)


def carried_passes(plan: GhostPlan, passes):
    """``passes`` without the layer inputs that do not depend on the parameters
    (they are the same at every iterate, so carrying them would only cost memory)."""
    inputs, deltas = passes
    return [None if f else a for a, f in zip(inputs, plan.fixed_inputs)], deltas


def clipped_difference_from_passes(plan: GhostPlan, params: PyTree, prev_params: PyTree, passes, prev_passes,
                                   clip_norm, weights, use_difference=True) -> PyTree:
    """``sum_i weights_i clip_C(grad l_i(params) - grad l_i(prev_params))`` from the
    two iterates' ``layer_passes`` (``prev_passes`` may come from ``carried_passes``).

    A layer whose input is the data (``plan.fixed_inputs``) has the difference
    ``A^T (D - D')``: its norm is ``||a_i||^2 ||d_i - d'_i||^2`` and its clipped sum
    one weight-gradient pass with cotangents ``f_i (d_i - d'_i)``.
    ``use_difference=False`` clips the plain gradients at ``params``.
    """
    inputs, deltas = passes
    prev_inputs = [a if f or q is None else q for a, q, f in zip(inputs, prev_passes[0], plan.fixed_inputs)]
    prev_deltas = prev_passes[1]
    parts, mats = _layer_parts(plan, jax.tree_util.tree_leaves(params), inputs, deltas)
    prev_parts, prev_mats = _layer_parts(plan, jax.tree_util.tree_leaves(prev_params), prev_inputs, prev_deltas)
    sq = jnp.where(use_difference, _sq_norms(_difference_parts(parts, prev_parts)), _sq_norms(parts))
    coef = _clip_coefficients(sq, clip_norm, weights)
    coef_prev = jnp.where(use_difference, coef, jnp.zeros_like(coef))
    # one weight-gradient pass for data-input layers: cotangents coef (D - [use] D')
    merged = frozenset(k for k, f in enumerate(plan.fixed_inputs) if f)
    deltas_eff = [d - jnp.where(use_difference, q, jnp.zeros_like(q)) if k in merged else d
                  for k, (d, q) in enumerate(zip(deltas, prev_deltas))]
    rows = weights != 0  # masked rows add nothing, even if NaN (coefficients are 0 there too)
    cur = _weighted_layer_sums(plan, params, inputs, deltas_eff, coef, mats, rows=rows)
    prev = _weighted_layer_sums(plan, prev_params, prev_inputs, prev_deltas, coef_prev, prev_mats, skip=merged, rows=rows)
    return jax.tree_util.tree_map(jnp.subtract, cur, prev)


def clipped_difference_sum(
    loss_fn: Callable,
    params: PyTree,
    prev_params: PyTree,
    x: jax.Array,
    y: jax.Array,
    clip_norm,
    mask: jax.Array | None = None,
    *,
    use_difference=True,
    require_fast: bool = False,
    force_fallback: bool = False,
) -> GhostClippedSum:
    """``sum_i mask_i clip_C(grad l_i(params) - grad l_i(prev_params))`` (DIFF2,
    Murata & Suzuki 2023, Algorithm 1 step 2), without forming either gradient.

    ``use_difference`` (bool, may be traced): False clips the plain gradients at
    ``params`` instead (a DIFF2 restart round). Replace-one sensitivity ``2C``.
    """
    sensitivity = clipping.sensitivity_of_clipped_sum(clip_norm, "replace-one")
    static_plain = isinstance(use_difference, bool) and not use_difference
    plan = make_plan(loss_fn, params, x, y)
    weights = _weights(mask, x.shape[0])
    if not _resolve(plan, require_fast, force_fallback):
        g = clipping.per_example_grads(loss_fn, params, x, y)
        if not static_plain:
            g_prev = clipping.per_example_grads(loss_fn, prev_params, x, y)
            g = jax.tree_util.tree_map(lambda u, v: jnp.where(use_difference, u - v, u), g, g_prev)
        res = clipping.clipped_sum(g, clip_norm, mask)
        return GhostClippedSum(res.total, res.count, sensitivity, False)
    passes = _capture(loss_fn, params, x, y, plan)
    if static_plain:
        inputs, deltas = passes
        parts, mats = _layer_parts(plan, jax.tree_util.tree_leaves(params), inputs, deltas)
        coef = _clip_coefficients(_sq_norms(parts), clip_norm, weights)
        return GhostClippedSum(_weighted_layer_sums(plan, params, inputs, deltas, coef, mats, rows=weights != 0),
                               jnp.sum(weights), sensitivity, True)
    prev_passes = _capture(loss_fn, prev_params, x, y, plan)
    total = clipped_difference_from_passes(plan, params, prev_params, passes, prev_passes, clip_norm, weights,
                                           use_difference)
    return GhostClippedSum(total, jnp.sum(weights), sensitivity, True)


def clipped_difference_mean(loss_fn, params, prev_params, x, y, clip_norm, mask, count, *, use_difference=True):
    """DIFF2's ClippedMean (Algorithm 2) of per-record gradient differences
    (or of gradients when ``use_difference`` is False), divided by the true
    record count ``count``."""
    res = clipped_difference_sum(loss_fn, params, prev_params, x, y, clip_norm, mask, use_difference=use_difference)
    return jax.tree_util.tree_map(lambda t: t / jnp.asarray(count, t.dtype), res.total)
