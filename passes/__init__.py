"""falcon's MLIR passes, one package each, with their options declared once
(:mod:`falcon_mlir.options`) and registered by name (:mod:`.registry`):

* ``lcma-rewrite`` (:mod:`.lcma_rewrite`): contractions through LCMA plans;
* ``falcon-kernels`` (:mod:`.falcon_kernels`): contractions as falcon's own CUDA kernels, or
  (``arch=x86-avx512``, ``x86-avx2``) f32 GEMMs as its CPU kernel;
* ``falcon-tiles`` (:mod:`.falcon_tiles`): CUDA tile choices;
* ``empty-reduction`` (:mod:`.empty_reduction`): contractions over an empty
  reduction (K = 0) replaced by their init (IREE 3.13 crashes on them).

A pass that cannot do what its input or environment asks raises
:class:`PassError` (one line for the drivers); any other exception is a bug.

Run them with falcon-opt (``--lcma-rewrite=...``, ``--pass-pipeline=...``),
or inside IREE's pipeline through :mod:`falcon_mlir.pipeline.assemble`.
"""


class PassError(Exception):
    """A pass cannot do what its input or environment asks, for a reason that
    is not a bug of falcon's (a kernel Triton cannot compile, a symbol clash in
    the module, an IREE target that does not exist).

    The drivers print it as one line, ``LOCATION: error: MESSAGE`` (falcon-opt;
    the file name where there is no location) or ``PROG: error: LOCATION:
    MESSAGE`` (falcon-compile), not as an internal error. ``MESSAGE`` starts
    with the pass's name (``falcon-kernels: ...``).

    Attributes:
        message: the one-line message.
        location: ``file:line:col`` of the op it concerns, or None.
    """

    def __init__(self, message: str, location=None):
        self.message = " ".join(str(message).split())
        self.location = location
        super().__init__(self.message)

    def line(self) -> str:
        """``LOCATION: MESSAGE`` (``MESSAGE`` without a location)."""
        return f"{self.location}: {self.message}" if self.location else self.message
