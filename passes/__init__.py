"""falcon's MLIR passes, one package each, with their options declared once
(:mod:`falcon_mlir.options`) and registered by name (:mod:`.registry`):

* ``lcma-rewrite`` (:mod:`.lcma_rewrite`): contractions through LCMA plans;
* ``falcon-tiles`` (:mod:`.falcon_tiles`): CUDA tile choices.

Run them with falcon-opt (``--lcma-rewrite=...``, ``--pass-pipeline=...``),
or inside IREE's pipeline through :mod:`falcon_mlir.pipeline.assemble`.
"""
