"""Real model code exported to MLIR, for end-to-end runs of falcon's rewrite.

:mod:`falcon_mlir.models.llama_block`: one Llama decoder block (attention with
q/k/v/o projections, gated MLP) from keras-hub on the JAX backend, exported to
StableHLO with the weights as function arguments.

:mod:`falcon_mlir.models.main_job`: the main job (``python3 tools/run_model.py``):
that block compiled by plain IREE and by falcon, run, timed and compared.

These modules need the ``models`` extra (jax, keras, keras-hub); importing
this package itself needs nothing beyond falcon-mlir's own dependencies.
"""

__all__ = ["llama_block", "main_job"]
