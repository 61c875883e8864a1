"""One Llama decoder block from keras-hub, exported to StableHLO.

The block is keras-hub's own ``LlamaTransformerDecoder`` (the layer that
``keras_hub.models.LlamaBackbone`` stacks), run on the JAX backend
(``KERAS_BACKEND=jax``): RMSNorm -> grouped-query self-attention with RoPE and
a causal mask (q/k/v/o projections) -> residual -> RMSNorm -> gated MLP
(``down(up(x) * silu(gate(x)))``) -> residual.  Tested with jax/jaxlib 0.10.2,
keras 3.15.1 and keras-hub 0.32.0.

Default dimensions are Llama-3-8B's, from the public ``config.json`` of
``meta-llama/Meta-Llama-3-8B``: ``hidden_size`` 4096,
``intermediate_size`` 14336, ``num_attention_heads`` 32,
``num_key_value_heads`` 8 (head dim 4096 / 32 = 128), ``rope_theta``
500000.0, ``rms_norm_eps`` 1e-05, ``hidden_act`` silu, no rope scaling.
Nothing is downloaded: the weights are random (:meth:`LlamaBlock.random_weights`).

The exported function is ``main(x, *weights) -> y``, all float32:

- ``x``: ``(batch, tokens, hidden)``, the block's input hidden states;
- ``weights``, in :meth:`LlamaBlock.weight_specs` order (keras' variable
  order): query kernel ``(hidden, heads, head_dim)``, key and value kernels
  ``(hidden, kv_heads, head_dim)``, attention output kernel
  ``(heads, head_dim, hidden)``, attention RMSNorm scale ``(hidden,)``, MLP
  up ("intermediate") kernel ``(hidden, mlp)``, MLP gate kernel
  ``(hidden, mlp)``, MLP down ("output") kernel ``(mlp, hidden)``, MLP
  RMSNorm scale ``(hidden,)``;
- ``y``: ``(batch, tokens, hidden)``.

The weights are arguments (keras' ``stateless_call``), not constants, so the
MLIR text stays small (a few hundred lines) at any size.

Usage::

    from falcon_mlir.models.llama_block import LlamaBlock, LLAMA3_8B
    block = LlamaBlock(LLAMA3_8B.with_tokens(1024))
    text = block.export_mlir()              # StableHLO text, @main
    x = block.random_inputs(seed=0)         # (1, 1024, 4096) float32
    ws = block.random_weights(seed=1)       # list of float32 arrays
    y = block.forward(x, ws)                # keras/JAX forward pass
    y64 = block.reference_f64(x, ws)        # numpy float64 reference
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import List, Sequence, Tuple

import numpy as np

__all__ = ["LlamaConfig", "LLAMA3_8B", "SMALL", "LlamaBlock", "import_keras"]


@dataclasses.dataclass(frozen=True)
class LlamaConfig:
    """Dimensions of one Llama decoder block and of its input.

    Attributes:
        hidden: model width (``hidden_size``).
        intermediate: MLP width (``intermediate_size``).
        heads: query heads (``num_attention_heads``).
        kv_heads: key/value heads (``num_key_value_heads``).
        rope_theta: RoPE base wavelength.
        rms_norm_eps: RMSNorm epsilon.
        tokens: sequence length of the input (prefill).
        batch: batch size of the input.
        name: label used in reports.
        dtype: the layer's dtype (keras: weights, activations and the
            exported function's arguments): ``"float32"``, ``"bfloat16"`` or ``"float16"``.
    """

    hidden: int = 4096
    intermediate: int = 14336
    heads: int = 32
    kv_heads: int = 8
    rope_theta: float = 500000.0
    rms_norm_eps: float = 1e-5
    tokens: int = 1024
    batch: int = 1
    name: str = "llama3-8b"
    dtype: str = "float32"

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def with_tokens(self, tokens: int, batch: int = None) -> "LlamaConfig":
        return dataclasses.replace(self, tokens=int(tokens),
                                   batch=self.batch if batch is None else int(batch))

    def validate(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")
        if self.heads % self.kv_heads:
            raise ValueError(f"heads {self.heads} is not a multiple of kv_heads {self.kv_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head dim {self.head_dim} must be even for RoPE")
        if self.tokens < 1 or self.batch < 1:
            raise ValueError("tokens and batch must be >= 1")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype {self.dtype!r} is not one of {', '.join(DTYPES)}")


#: Layer dtypes the block is built and exported in.
DTYPES = ("float32", "bfloat16", "float16")

#: Llama-3-8B (meta-llama/Meta-Llama-3-8B config.json), 1024 tokens.
LLAMA3_8B = LlamaConfig()

#: A small block with the same structure (grouped-query attention, gated MLP)
#: for tests: hidden 256, MLP 512, 4 heads, 2 kv heads, 32 tokens.
SMALL = LlamaConfig(hidden=256, intermediate=512, heads=4, kv_heads=2, tokens=32,
                    name="llama-small")


def import_keras():
    """Imports keras on the JAX backend and returns ``(keras, decoder_class)``.

    Raises:
        ImportError: jax, keras or keras-hub is missing (the ``models`` extra).
        RuntimeError: keras was already imported with another backend.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # keras-hub pulls in TensorFlow
    os.environ.setdefault("KERAS_BACKEND", "jax")
    with _quiet_stderr():  # TensorFlow's C++ start-up log lines ignore the variable above
        import jax  # noqa: F401  (fail early with a clear ImportError)
        import keras

        if keras.backend.backend() != "jax":
            raise RuntimeError(
                f"keras runs on the {keras.backend.backend()!r} backend; the Llama block needs "
                "KERAS_BACKEND=jax set before keras is first imported")
        from keras_hub.src.models.llama.llama_decoder import LlamaTransformerDecoder

    return keras, LlamaTransformerDecoder


class _quiet_stderr:
    """Sends file descriptor 2 to a temporary file for the ``with`` body and
    replays what was written there if the body raises."""

    def __enter__(self):
        import sys
        import tempfile

        try:
            sys.stderr.flush()
            self._saved = os.dup(2)
        except (OSError, ValueError, AttributeError):
            self._saved = None
            return self
        self._tmp = tempfile.TemporaryFile()
        os.dup2(self._tmp.fileno(), 2)
        return self

    def __exit__(self, exc_type, exc, tb):
        if self._saved is None:
            return False
        import sys

        try:
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.dup2(self._saved, 2)
        os.close(self._saved)
        if exc_type is not None:
            self._tmp.seek(0)
            os.write(2, self._tmp.read())
        self._tmp.close()
        return False


def library_versions() -> dict:
    """Versions of the libraries the block comes from."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("jax", "jaxlib", "keras", "keras-hub"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            out[name] = None
    return out


class LlamaBlock:
    """keras-hub's ``LlamaTransformerDecoder`` built at ``config``'s sizes.

    The keras layer is built with zero-initialised kernels (cheap at 8B
    sizes); real values always come in as arguments.
    """

    def __init__(self, config: LlamaConfig = LLAMA3_8B):
        config.validate()
        self.config = config
        keras, Decoder = import_keras()
        c = config
        self.layer = Decoder(
            intermediate_dim=c.intermediate,
            num_query_heads=c.heads,
            num_key_value_heads=c.kv_heads,
            rope_max_wavelength=c.rope_theta,
            layer_norm_epsilon=c.rms_norm_eps,
            activation="silu",
            kernel_initializer="zeros",
            dtype=c.dtype,
            name="llama_decoder",
        )
        self.layer.build((c.batch, c.tokens, c.hidden))
        self._jitted = None  # jit(): made on first use
        if self.layer.non_trainable_variables:
            raise RuntimeError("unexpected non-trainable variables in the keras layer")

    # -- shapes --------------------------------------------------------------
    @property
    def input_shape(self) -> Tuple[int, int, int]:
        c = self.config
        return (c.batch, c.tokens, c.hidden)

    def weight_specs(self) -> List[Tuple[str, Tuple[int, ...]]]:
        """``(name, shape)`` of each weight argument, in argument order."""
        return [(v.path, tuple(int(d) for d in v.shape)) for v in self.layer.trainable_variables]

    # -- data ----------------------------------------------------------------
    def random_weights(self, seed: int = 1) -> List[np.ndarray]:
        """float32 weights from ``numpy.random.default_rng(seed)``: kernels
        ``normal * 0.02`` (Llama's ``initializer_range``), RMSNorm scales
        ``1 + normal * 0.02`` (float32 whatever the layer's dtype: cast them
        with :func:`cast_inputs` for a bf16 block)."""
        rng = np.random.default_rng(seed)
        out = []
        for name, shape in self.weight_specs():
            w = rng.standard_normal(shape, dtype=np.float32)
            w *= np.float32(0.02)
            if name.endswith("scale"):
                w += np.float32(1.0)
            out.append(w)
        return out

    def random_inputs(self, seed: int = 0) -> np.ndarray:
        """Input hidden states ``(batch, tokens, hidden)`` float32, standard normal."""
        rng = np.random.default_rng(seed)
        return rng.standard_normal(self.input_shape, dtype=np.float32)

    # -- export and run ------------------------------------------------------
    def _fn(self):
        layer = self.layer

        def block(x, *weights):
            y, _ = layer.stateless_call(list(weights), [], x)
            return y

        return block

    def jit(self):
        """The block as one ``jax.jit`` function ``f(x, *weights) -> y`` (the
        keras layer on JAX; arguments and result as in the module doc, in the
        layer's dtype). Made once per block and reused: the export traces it,
        :meth:`forward` and the main job's JAX/XLA peer call it (XLA compiles
        it for the arguments' device on the first call)."""
        if self._jitted is None:
            import jax

            self._jitted = jax.jit(self._fn())
        return self._jitted

    def arg_specs(self) -> list:
        """``jax.ShapeDtypeStruct`` of ``x`` and of each weight, in argument order."""
        import jax
        import jax.numpy as jnp

        t = jnp.dtype(self.config.dtype)
        return ([jax.ShapeDtypeStruct(self.input_shape, t)]
                + [jax.ShapeDtypeStruct(s, t) for _, s in self.weight_specs()])

    def export_mlir(self) -> str:
        """StableHLO text of ``main(x, *weights) -> y`` (see the module doc).
        Compile with ``--iree-input-type=stablehlo`` (or ``auto``).

        In bf16, keras' attention asks for f32 accumulation through
        ``dot_general``'s ``algorithm`` attribute, which IREE 3.13's StableHLO
        import rejects ("failed to legalize operation 'stablehlo.dot_general'");
        the attribute is removed from the text: those products keep their f32
        result type, so IREE still accumulates them in f32."""
        import re

        text = self.jit().lower(*self.arg_specs()).as_text()
        return re.sub(r", algorithm = <[^>]*>", "", text)

    def export_serialized(self, platforms=("cuda",)) -> bytes:
        """The block as a serialized ``jax.export`` artifact for ``platforms``
        (a machine with only JAX runs it: ``jax.export.deserialize(b).call``),
        the peer of falcon's module on the same device."""
        import jax

        exp = jax.export.export(self.jit(), platforms=list(platforms))(*self.arg_specs())
        return bytes(exp.serialize())

    def forward(self, x: np.ndarray, weights: Sequence[np.ndarray]) -> np.ndarray:
        """The library's own forward pass (keras layer on JAX, :meth:`jit`, on
        JAX's default device: the CPU here); a numpy array ``(batch, tokens, hidden)``."""
        return np.asarray(self.jit()(x, *weights))

    def reference_f64(self, x: np.ndarray, weights: Sequence[np.ndarray]) -> np.ndarray:
        """The same block in float64 numpy, written from keras-hub's code
        (RoPE rotate-half, keys/values repeated per query group, causal
        softmax, SiLU-gated MLP).  Returns float64 ``(batch, tokens, hidden)``."""
        c = self.config
        names = [n.rsplit("/", 2)[-2] + "/" + n.rsplit("/", 1)[-1] for n, _ in self.weight_specs()]
        w = dict(zip(names, weights))

        def W(key):
            return np.asarray(w[key], dtype=np.float64)

        def rms(h, scale):
            return h / np.sqrt(np.mean(h * h, axis=-1, keepdims=True) + c.rms_norm_eps) * scale

        d = c.head_dim
        inv = 1.0 / (float(c.rope_theta) ** (np.arange(0, d, 2, dtype=np.float64) / d))
        ang = np.arange(c.tokens, dtype=np.float64)[:, None] * inv[None, :]
        ang = np.concatenate([ang, ang], axis=-1)  # (T, d)
        cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]

        def rope(t):  # (T, heads, d)
            t1, t2 = t[..., : d // 2], t[..., d // 2:]
            return t * cos + np.concatenate([-t2, t1], axis=-1) * sin

        group = c.heads // c.kv_heads
        causal = np.tril(np.ones((c.tokens, c.tokens), dtype=bool))
        out = np.empty(self.input_shape, dtype=np.float64)
        for b in range(c.batch):
            x0 = np.asarray(x[b], dtype=np.float64)
            h = rms(x0, W("self_attention_layernorm/scale"))
            q = rope(np.einsum("tm,muh->tuh", h, W("query/kernel"), optimize=True))
            k = rope(np.einsum("tm,mvh->tvh", h, W("key/kernel"), optimize=True))
            v = np.einsum("tm,mvh->tvh", h, W("value/kernel"), optimize=True)
            k = np.repeat(k, group, axis=1)
            v = np.repeat(v, group, axis=1)
            s = np.einsum("quh,kuh->uqk", q, k, optimize=True) / math.sqrt(d)
            s = np.where(causal[None], s, -np.inf)
            s = np.exp(s - s.max(axis=-1, keepdims=True))
            s /= s.sum(axis=-1, keepdims=True)
            a = np.einsum("uqk,kuh->quh", s, v, optimize=True)
            x1 = x0 + np.einsum("quh,uhm->qm", a, W("attention_output/kernel"), optimize=True)
            h = rms(x1, W("feedforward_layernorm/scale"))
            gate = h @ W("feedforward_gate_dense/kernel")
            up = h @ W("feedforward_intermediate_dense/kernel")
            act = gate / (1.0 + np.exp(-gate))
            out[b] = x1 + (up * act) @ W("feedforward_output_dense/kernel")
        return out
