"""A training step of the Llama decoder block, exported to StableHLO.

The forward pass is keras-hub's ``LlamaTransformerDecoder``
(:class:`falcon_mlir.models.llama_block.LlamaBlock`), stacked ``layers`` times
(each layer its own weights, the same keras layer object), then a loss, its
gradient by ``jax.value_and_grad`` and a plain SGD update written in JAX::

    y     = block_L(... block_1(x))                      (batch, tokens, hidden)
    loss  = 0.5 * mean over (batch, tokens, hidden) of (y - target)^2
    new_w = w - lr * dloss/dw                            for every weight w

The exported function's arguments and results are float32 (the params are
the master weights); with a ``config.dtype`` of ``bfloat16`` or ``float16``
the blocks compute in that dtype (mixed precision: params and ``x`` cast to
it on the way in, so the projections are bf16 x bf16 contractions, which
IREE and XLA accumulate in float32; ``y`` cast back to float32 for the
loss; the gradients arrive in float32 through the casts and the SGD update
is float32; float16 takes a static loss scale, :data:`LOSS_SCALE`). The
function is::

    main(*params, x, target) -> (loss, *new_params)            # with_grads=False
    main(*params, x, target) -> (loss, *new_params, *grads)    # with_grads=True

``params`` are the layers' weights in :meth:`TrainStep.param_specs` order
(layer 0's nine weights in keras' order, then layer 1's ...); ``x`` and
``target`` are ``(batch, tokens, hidden)``; ``loss`` is a scalar. The returned
params come first so a runner feeds ``outputs[1:1 + len(params)]`` straight
back as the next call's params.

A training step brings contraction forms the forward pass never shows: for a
projection ``Y = X W`` the backward pass computes ``dW = X^T dY`` (reduction
over batch x tokens, the activation transposed) and ``dX = dY W^T`` (the
weight transposed); the attention's batched products appear transposed too.
:func:`classify_contractions` labels each contraction of falcon's report as
forward or backward from JAX's own name stack (autodiff names the ops it
derives ``transpose(jvp(...))``) and names its role (``dW q_proj``,
``dX via q_proj``, ...).

Usage::

    from falcon_mlir.models.train_step import TrainStep
    from falcon_mlir.models.llama_block import SMALL
    ts = TrainStep(SMALL.with_tokens(32), layers=2, lr=0.5)
    text = ts.export_mlir()                 # StableHLO text, @main
    params = ts.random_params(seed=1)       # list of float32 arrays
    x, t = ts.random_batch(step=0, seed=0)  # (batch, tokens, hidden) float32 each
    loss, new_params = ts.step(params, x, t)   # the same step in JAX (jit, CPU)
"""

from __future__ import annotations

import math
import re
from typing import List, Sequence, Tuple

import numpy as np

from falcon_mlir.models.llama_block import LlamaBlock, LlamaConfig

__all__ = ["LOSS_SCALE", "TrainStep", "classify_contractions", "reference_loss"]

#: Default static loss scale per compute dtype: 2^16 for float16 (the usual
#: start of a dynamic scaler; keeps ``dloss/dy`` ~ 2^-24 at 4096 tokens x 4096
#: hidden in f16's normal range with room below its 65504 maximum), none for
#: float32 and bfloat16 (float32's exponent range).
LOSS_SCALE = {"float32": 1.0, "bfloat16": 1.0, "float16": 65536.0}


class TrainStep:
    """A loss, its gradient and an SGD update over ``layers`` Llama blocks.

    Args:
        config: the block's sizes and the batch's (tokens, batch); its
            ``dtype`` is the blocks' compute dtype (float32, or bfloat16 /
            float16 with float32 master params, see the module doc).
        layers: number of stacked blocks (>= 1), each with its own weights.
        lr: the SGD learning rate (> 0).
        with_grads: also return the gradients (for tests; costs one more
            copy of the weights per step).
        loss_scale: static loss scale (> 0): the gradient is taken of
            ``loss * loss_scale`` and divided by it in float32 (the returned
            loss, grads and update are unscaled). ``None``: :data:`LOSS_SCALE`
            of the dtype (float16's 2^-24 smallest subnormal would flush the
            backward pass's ``dloss/dy = (y - target) / (batch * tokens *
            hidden)`` to zero at Llama sizes).

    Raises:
        ValueError: a dtype :class:`LlamaConfig` does not know, ``layers < 1``,
            ``lr <= 0`` or ``loss_scale <= 0``.
    """

    def __init__(self, config: LlamaConfig, layers: int = 1, lr: float = 0.5,
                 with_grads: bool = False, loss_scale: float = None):
        config.validate()
        if int(layers) < 1:
            raise ValueError(f"layers must be >= 1, not {layers}")
        if not float(lr) > 0:
            raise ValueError(f"lr must be > 0, not {lr}")
        self.loss_scale = float(LOSS_SCALE[config.dtype] if loss_scale is None else loss_scale)
        if not self.loss_scale > 0:
            raise ValueError(f"loss_scale must be > 0, not {loss_scale}")
        self.block = LlamaBlock(config)
        self.config = config
        self.layers = int(layers)
        self.lr = float(lr)
        self.with_grads = bool(with_grads)

    # -- shapes and data -----------------------------------------------------
    @property
    def per_layer(self) -> int:
        """Weights per block (9)."""
        return len(self.block.weight_specs())

    def param_specs(self) -> List[Tuple[str, Tuple[int, ...]]]:
        """``(name, shape)`` of each param argument, in argument order; names
        are ``layer{i}/`` + keras' variable path."""
        return [(f"layer{i}/{n}", s) for i in range(self.layers) for n, s in self.block.weight_specs()]

    def random_params(self, seed: int = 1) -> List[np.ndarray]:
        """float32 initial params: layer ``i`` gets
        :meth:`LlamaBlock.random_weights` with seed ``seed + 1000 * i``."""
        out = []
        for i in range(self.layers):
            out.extend(self.block.random_weights(seed + 1000 * i))
        return out

    def random_batch(self, step: int = 0, seed: int = 0) -> Tuple[np.ndarray, np.ndarray]:
        """The batch of training step ``step``: ``x`` standard normal
        ``(batch, tokens, hidden)`` float32 from ``default_rng((seed, step))``
        and ``target = 0.5 * x + 0.1 * roll(x, 1, tokens)`` (the blocks learn
        to halve their input and mix in the previous token)."""
        rng = np.random.default_rng((int(seed), int(step)))
        x = rng.standard_normal(self.block.input_shape, dtype=np.float32)
        t = np.float32(0.5) * x + np.float32(0.1) * np.roll(x, 1, axis=1)
        return x, t

    # -- the step ------------------------------------------------------------
    def _loss_fn(self):
        import jax.numpy as jnp

        block, n = self.block._fn(), self.per_layer
        dt = jnp.dtype(self.config.dtype)

        def loss(params, x, target):
            y = x.astype(dt)
            for i in range(self.layers):
                y = block(y, *[w.astype(dt) for w in params[i * n:(i + 1) * n]])
            d = y.astype(jnp.float32) - target
            return 0.5 * jnp.mean(d * d)

        return loss

    def _step_fn(self):
        import jax

        loss_fn, lr, with_grads, scale = self._loss_fn(), self.lr, self.with_grads, self.loss_scale
        if scale != 1.0:
            unscaled = loss_fn

            def loss_fn(params, x, target):
                return unscaled(params, x, target) * scale

        def step(params, x, target):
            loss, grads = jax.value_and_grad(loss_fn)(params, x, target)
            if scale != 1.0:
                loss, grads = loss / scale, [g / scale for g in grads]
            new = [w - lr * g for w, g in zip(params, grads)]
            return (loss, new, grads) if with_grads else (loss, new)

        return step

    def _arg_specs(self):
        import jax
        import jax.numpy as jnp

        f32 = jnp.float32
        act = jax.ShapeDtypeStruct(self.block.input_shape, f32)
        return [jax.ShapeDtypeStruct(s, f32) for _, s in self.param_specs()], act, act

    def lowered(self):
        """``jax.jit(step).lower(...)`` at the config's shapes."""
        import jax

        return jax.jit(self._step_fn()).lower(*self._arg_specs())

    def export_mlir(self, debug_info: bool = False, platforms: Sequence[str] = ()) -> str:
        """StableHLO text of ``main(*params, x, target) -> (loss, *new_params[, *grads])``
        (see the module doc). ``debug_info``: keep JAX's locations (name
        stacks), as :func:`classify_contractions` reads them. ``platforms``:
        lower for these JAX platforms (``("cuda",)``: JAX's CPU lowering
        rejects f16 x f16 -> f32 dots) instead of the default device's.
        keras' attention asks for f32 accumulation of its bf16/f16 products
        through ``dot_general``'s ``algorithm`` attribute, which IREE 3.13
        rejects; it is removed (as :meth:`LlamaBlock.export_mlir` does)."""
        import jax

        if platforms:
            lowered = jax.jit(self._step_fn()).trace(*self._arg_specs()).lower(
                lowering_platforms=tuple(platforms))
        else:
            lowered = self.lowered()
        return re.sub(r", algorithm = <[^>]*>", "", lowered.as_text(debug_info=debug_info))

    def export_serialized(self, platforms: Sequence[str] = ("cuda",)) -> bytes:
        """The step as a serialized ``jax.export`` artifact for ``platforms``:
        ``jax.export.deserialize(b).call(params, x, target)`` (params a list)
        returns ``(loss, new_params[, grads])`` (the JAX/XLA peer of the
        compiled step on the same device)."""
        import jax

        exp = jax.export.export(jax.jit(self._step_fn()), platforms=list(platforms))(*self._arg_specs())
        return bytes(exp.serialize())

    def step(self, params: Sequence[np.ndarray], x: np.ndarray, target: np.ndarray):
        """The step in JAX on the CPU (jit): ``(loss, new_params[, grads])``,
        numpy float32."""
        import jax

        out = jax.jit(self._step_fn())(list(params), x, target)
        conv = [float(out[0])] + [[np.asarray(a) for a in part] for part in out[1:]]
        return tuple(conv)


# -- a float64 reference ------------------------------------------------------
def reference_loss(config: LlamaConfig, layers: int, params, x, target, xp=None):
    """The training loss written from keras-hub's code (as
    :meth:`LlamaBlock.reference_f64`) in ``xp`` (``jax.numpy`` by default, so
    that ``jax.grad`` differentiates it; run it under ``jax.enable_x64`` with
    float64 arrays for a float64 reference). ``params`` as
    :meth:`TrainStep.param_specs`; returns a scalar."""
    if xp is None:
        import jax.numpy as xp
    c = config
    d = c.head_dim
    inv = 1.0 / (float(c.rope_theta) ** (np.arange(0, d, 2, dtype=np.float64) / d))
    ang = np.arange(c.tokens, dtype=np.float64)[:, None] * inv[None, :]
    ang = np.concatenate([ang, ang], axis=-1)
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    group = c.heads // c.kv_heads
    causal = np.tril(np.ones((c.tokens, c.tokens), dtype=bool))

    def rms(h, scale):
        return h / xp.sqrt(xp.mean(h * h, axis=-1, keepdims=True) + c.rms_norm_eps) * scale

    def rope(t):  # (B, T, heads, d)
        t1, t2 = t[..., : d // 2], t[..., d // 2:]
        return t * cos + xp.concatenate([-t2, t1], axis=-1) * sin

    def block(h0, wq, wk, wv, wo, s_att, w_up, w_gate, w_down, s_ffn):
        h = rms(h0, s_att)
        q = rope(xp.einsum("btm,muh->btuh", h, wq))
        k = xp.repeat(rope(xp.einsum("btm,mvh->btvh", h, wk)), group, axis=2)
        v = xp.repeat(xp.einsum("btm,mvh->btvh", h, wv), group, axis=2)
        s = xp.einsum("bquh,bkuh->buqk", q, k) / math.sqrt(d)
        s = xp.where(causal[None, None], s, -xp.inf)
        s = xp.exp(s - xp.max(s, axis=-1, keepdims=True))
        s = s / xp.sum(s, axis=-1, keepdims=True)
        a = xp.einsum("buqk,bkuh->bquh", s, v)
        h1 = h0 + xp.einsum("bquh,uhm->bqm", a, wo)
        h = rms(h1, s_ffn)
        gate = h @ w_gate
        return h1 + ((h @ w_up) * (gate / (1.0 + xp.exp(-gate)))) @ w_down

    n = len(params) // layers
    y = x
    for i in range(layers):
        y = block(y, *params[i * n:(i + 1) * n])
    dlt = y - target
    return 0.5 * xp.mean(dlt * dlt)


# -- forward / backward classification ------------------------------------------
_DOT = re.compile(r"=\s*stablehlo\.dot_general\b")
_LOCREF = re.compile(r"loc\((#loc\d*)\)\s*$")
_LOCDEF = re.compile(r"^(#loc\d*)\s*=\s*loc\((.*)\)\s*$")
_ARG = re.compile(r"%arg(\d+)\b")

#: keras-hub variable names -> the usual Llama projection names.
_LAYER_NAMES = {
    "query": "q_proj", "key": "k_proj", "value": "v_proj", "attention_output": "o_proj",
    "feedforward_gate_dense": "gate_proj", "feedforward_intermediate_dense": "up_proj",
    "feedforward_output_dense": "down_proj",
}


def _short(name: str) -> str:
    """``layer0/.../query/kernel`` -> ``layer0 q_proj``."""
    parts = name.split("/")
    key = parts[-2] if len(parts) >= 2 else name
    short = _LAYER_NAMES.get(key, key)
    return (parts[0] + " " + short) if parts[0].startswith("layer") and len(parts) > 2 else short


def classify_contractions(report: Sequence[dict], text: str, debug_text: str,
                          param_names: Sequence[str]) -> List[dict]:
    """Forward/backward label and role of each report entry.

    ``report``: falcon's report for the module compiled from ``text`` (the
    StableHLO of :meth:`TrainStep.export_mlir`, locations ``name:line:col``);
    ``debug_text``: the same export with ``debug_info=True``;
    ``param_names``: :meth:`TrainStep.param_specs`' names.

    The k-th ``stablehlo.dot_general`` of ``text`` is the k-th of
    ``debug_text`` (the same lowering); its JAX location's name stack holds
    ``transpose(`` when autodiff derived it: that op is ``backward``, any
    other ``forward``. Roles: a forward op reading a param is that
    projection (``q_proj``); a backward op reading a param is ``dX via
    <proj>`` (the weight transposed); a backward op whose result reaches a
    param's SGD update (:func:`_updated_params`) is ``dW <proj>`` (reduction
    over batch x tokens); other ops are ``attention`` products (``attention
    (grad)`` backward). Entries whose line is no
    dot_general get ``phase`` ``"?"``.

    Returns one dict per report entry: ``{"phase": "forward"|"backward"|"?",
    "role": str}``.

    Raises:
        ValueError: the two texts hold different numbers of dot_general ops.
    """
    lines = text.splitlines()
    dot_lines = [i + 1 for i, ln in enumerate(lines) if _DOT.search(ln)]
    dbg_lines = debug_text.splitlines()
    defs = {}
    for ln in dbg_lines:
        m = _LOCDEF.match(ln)
        if m:
            defs[m.group(1)] = m.group(2)
    dbg_dots = [ln for ln in dbg_lines if _DOT.search(ln)]
    if len(dbg_dots) != len(dot_lines):
        raise ValueError(f"{len(dot_lines)} dot_general ops in the text but {len(dbg_dots)} "
                         "in the debug text: not the same lowering")

    def loc_text(ref: str, depth: int = 0) -> str:
        body = defs.get(ref, "")
        if depth < 8:  # names nest: loc("name"(#loc12))
            for inner in re.findall(r"#loc\d*", body):
                body += " " + loc_text(inner, depth + 1)
        return body

    updates = _updated_params(text)
    out = []
    for r in report:
        m = re.search(r":(\d+):\d+$", str(r.get("location", "")))
        line_no = int(m.group(1)) if m else -1
        if line_no not in dot_lines:
            out.append({"phase": "?", "role": ""})
            continue
        k = dot_lines.index(line_no)
        ref = _LOCREF.search(dbg_dots[k])
        backward = bool(ref) and "transpose(" in loc_text(ref.group(1))
        line = lines[line_no - 1]
        ops = re.match(r"\s*(%[\w#]+),\s*(%[\w#]+)", line.split("dot_general", 1)[1])
        reads = [int(o[4:]) for o in (ops.groups() if ops else ()) if re.fullmatch(r"%arg\d+", o)]
        params = [param_names[a] for a in reads if a < len(param_names)]
        dw = updates.get(line_no) if backward else None
        if params:
            role = ("dX via " if backward else "") + _short(params[0])
        elif dw is not None and dw < len(param_names):
            role = "dW " + _short(param_names[dw])
        else:
            role = "attention" + (" (grad)" if backward else "")
        out.append({"phase": "backward" if backward else "forward", "role": role})
    return out


_DEF = re.compile(r"^\s*(%[\w.$-]+)(?::\d+)?\s*=\s*([\w.]+)\s*(.*)$")
_USE = re.compile(r"%[\w.$-]+")
#: ops a weight gradient passes through between its dot_general and the update
_PASS = ("stablehlo.transpose", "stablehlo.reshape", "stablehlo.multiply", "stablehlo.add",
         "stablehlo.convert", "stablehlo.broadcast_in_dim")


def _updated_params(text: str) -> dict:
    """``{line of a dot_general: index of the param its result updates}``:
    the dot_general lines of ``@main`` whose result reaches a
    ``stablehlo.subtract %argN, ...`` (the SGD update) through
    :data:`_PASS` ops only (never through another dot_general or a call), at
    most 6 ops away. That is what makes a contraction a weight gradient dW."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if "func.func public @main(" in ln), None)
    if start is None:
        return {}
    users: dict = {}
    defs = {}
    for i in range(start + 1, len(lines)):
        if lines[i].startswith("  }"):
            break
        m = _DEF.match(lines[i])
        if not m:
            continue
        name, op, rest = m.groups()
        defs[name] = (i + 1, op, rest)
        for u in set(_USE.findall(rest.split(" : ", 1)[0])):
            users.setdefault(u, []).append(name)
    out = {}
    for name, (line_no, op, _) in defs.items():
        if op != "stablehlo.dot_general":
            continue
        frontier, seen = [name], {name}
        for _ in range(6):
            nxt = []
            for v in frontier:
                for u in users.get(v, []):
                    if u in seen:
                        continue
                    seen.add(u)
                    _, uop, urest = defs[u]
                    sub = re.match(r"\s*%arg(\d+),\s*(%[\w.$-]+)", urest)
                    if uop == "stablehlo.subtract" and sub and sub.group(2) == v:
                        out[line_no] = int(sub.group(1))
                        break
                    if uop in _PASS:
                        nxt.append(u)
                if line_no in out:
                    break
            if line_no in out or not nxt:
                break
            frontier = nxt
    return out
