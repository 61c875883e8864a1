"""IR helpers shared by falcon's passes: contraction recognition
(:mod:`falcon_mlir.ir.contraction`) and locations, and small tensor builders
(:mod:`falcon_mlir.ir.builders`)."""
