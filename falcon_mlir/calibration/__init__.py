"""Calibration: measuring a hardware profile and fitting the cost model's
factors to measured plans. Unlike :mod:`falcon_mlir.decision`, which only
predicts, this part compiles and runs modules."""
