"""Compile MLIR with IREE and run it (CPU, or CUDA with falcon's runtime settings).

Used by the tests and the benchmarks to compare a rewritten module with the
original on the same inputs. Compilation uses ``iree.compiler.compile_str``
(llvm-cpu for the host unless flags say otherwise); execution uses
``iree.runtime`` on the ``local-task`` driver.
"""

from __future__ import annotations

import time
from typing import Sequence

import numpy as np

#: iree-compile flags for the host CPU.
CPU_FLAGS = ("--iree-hal-target-device=local",
             "--iree-hal-local-target-device-backends=llvm-cpu",
             "--iree-llvmcpu-target-cpu=host")
#: IREE's best CPU flags (data tiling + microkernels), what benchmarks and the
#: profile calibration compare against (the llvm-cpu backend comes from
#: ``compile_str(target_backends=["llvm-cpu"])``).
BEST_CPU_FLAGS = ("--iree-llvmcpu-target-cpu=host", "--iree-opt-data-tiling=true",
                  "--iree-llvmcpu-enable-ukernels=all")


def compile_mlir(text: str, flags: Sequence[str] = CPU_FLAGS, input_type: str = "auto") -> bytes:
    """Compile MLIR text to a .vmfb (bytes) with iree-compile's in-process API.

    Raises:
        iree.compiler.CompilerToolError: when IREE rejects the module.
    """
    from iree.compiler import compile_str

    return compile_str(text, input_type=input_type, extra_args=list(flags))

#: IREE runtime flags falcon uses on CUDA devices, parsed before the driver is
#: made (:func:`device_config`). IREE 3.13's default (stream-ordered
#: allocations from a CUDA memory pool that returns memory at every sync)
#: pays for mapping each call's transient buffers again: on the H200 grouped
#: Strassen^2 at 16384^3 f32 took 215.5 ms that way and 184.7 ms with these
#: settings (classical 237.3 / 235.5 ms; docs/benchmarks.md). Classical calls
#: change by under 2%.
CUDA_RUNTIME_FLAGS = ("--cuda_async_allocations=false",)
#: HAL allocator stack falcon puts on CUDA devices (buffers reused across calls).
CUDA_ALLOCATORS = ("caching",)


def device_config(driver: str = "local-task", tuned: bool = True):
    """An ``iree.runtime.Config`` for ``driver``.

    On ``cuda`` (or a ``cuda://...`` device URI) with ``tuned`` (the default)
    the device gets falcon's runtime
    settings: :data:`CUDA_RUNTIME_FLAGS` (parsed process-wide; they take effect
    only if no CUDA device was made before in this process) and the caching
    allocator :data:`CUDA_ALLOCATORS`. Other drivers, or ``tuned=False``:
    IREE's defaults (``Config(driver)``).

    Raises:
        RuntimeError: the driver is not available (from ``iree.runtime``).
    """
    import iree.runtime as rt

    name = driver.split(":", 1)[0]
    if name != "cuda" or not tuned:
        return rt.Config(driver)
    rt.flags.parse_flags(*CUDA_RUNTIME_FLAGS)
    drv = rt.get_driver("cuda")
    if "://" in driver:  # a device URI such as cuda://0
        dev = drv.create_device_by_uri(driver, allocators=list(CUDA_ALLOCATORS))
    else:
        dev = drv.create_default_device(allocators=list(CUDA_ALLOCATORS))
    return rt.Config(device=dev)


class Module:
    """A compiled module loaded into an ``iree.runtime`` context.

    Args:
        vmfb: the compiled module (bytes).
        driver: IREE HAL driver name (``"local-task"``, ``"cuda"``).
        config: an ``iree.runtime.Config`` to share (one device and allocator
            for many modules; a new one per module otherwise, from
            :func:`device_config`).
        parameters: key -> numpy array: the values of the module's parameter-backed globals
            (:func:`falcon_mlir.parameters.with_weight_parameters`), served in ``scope``; the
            module's initializer (IREE's hoisted work on them) runs here, once.
        scope: the parameters' scope.
        parameter_types: what the module reads (:func:`falcon_mlir.parameters.parameter_types` of
            its source): each array is checked against it first.

    Raises:
        ValueError: ``parameters`` that do not match ``parameter_types``.
        RuntimeError: the module reads parameters and none (or not its scope) were given (one
            line saying so), or anything else IREE's loader raises.
    """

    def __init__(self, vmfb: bytes, driver: str = "local-task", config=None,
                 parameters=None, scope: str = "model", parameter_types=None):
        import iree.runtime as rt

        self._config = config if config is not None else device_config(driver)
        self._ctx = rt.SystemContext(config=self._config)
        if parameters is not None:
            from falcon_mlir.parameters import parameters_module

            self._parameters = dict(parameters)
            self._ctx.add_vm_module(parameters_module(self._ctx.instance, self._parameters, scope,
                                                      types=parameter_types))
        self._vm = rt.VmModule.copy_buffer(self._ctx.instance, vmfb)
        try:
            self._ctx.add_vm_module(self._vm)
        except (RuntimeError, ValueError) as e:  # (iree.runtime raises ValueError for a missing module)
            if "io_parameters" in str(e) or "no provider registered" in str(e):
                raise RuntimeError(f"the module reads IREE parameters that were not given (pass "
                                   f"parameters= and scope=, or iree-run-module's --parameters=SCOPE=FILE): "
                                   f"{str(e).strip().splitlines()[0]}") from None
            raise
        self.functions = self._ctx.modules[self._vm.name]
        self._transients = {}  # function name -> its transient storage (call_with_transients)

    @property
    def device(self):
        """The ``iree.runtime`` HAL device the module runs on."""
        return self._config.device

    def on_device(self, *arrays) -> list:
        """The numpy ``arrays`` copied to the module's device (``DeviceArray`` list),
        to time calls without the host-to-device copies."""
        import iree.runtime as rt

        return [rt.asdevicearray(self._config.device, a) for a in arrays]

    def __call__(self, name: str, *args):
        """Call exported function ``name`` on numpy arrays; returns numpy array(s)."""
        out = self.functions[name](*args)
        if isinstance(out, (tuple, list)):
            return tuple(np.asarray(o.to_host()) for o in out)
        return np.asarray(out.to_host())

    def transients_size(self, name: str):
        """Bytes of transient storage function ``name`` states (IREE's external transients,
        :func:`with_external_transients`), or None where it states no constant size."""
        size = self._function(name).reflection.get(TRANSIENTS_SIZE)
        return None if size is None else int(size)

    def _function(self, name: str):
        fn = self._vm.lookup_function(name)
        if fn is None:
            raise ValueError(f"the module has no function {name!r}")
        return fn

    def call_with_transients(self, name: str, *args) -> np.ndarray:
        """Call ``name``, a function compiled with IREE's external transients (its last argument a
        ``!hal.buffer {iree.abi.transients}``, :func:`with_external_transients`), on ``args``
        (``DeviceArray`` s, :meth:`on_device`), its transient memory in one buffer of the size the
        module states, allocated on the first call and reused: no allocation, and no page faults, in the
        steady state. Returns the single result on the host.

        Raises:
            ValueError: no function ``name``; it states no constant transient size (no such argument,
                or a size that depends on the inputs); another number of inputs than it takes.
            TypeError: an input is not a device array.
        """
        import iree.runtime as rt

        fn = self._function(name)
        size = self.transients_size(name)
        if size is None:
            raise ValueError(f"function {name!r} states no constant transient size ({TRANSIENTS_SIZE}): "
                             "compile it with with_external_transients")
        expected = len(fn.reflection.get("iree.abi.declaration", "").split("%input")) - 2  # but the storage
        if expected >= 0 and len(args) != expected:
            raise ValueError(f"function {name!r} takes {expected} inputs besides its transient storage, "
                             f"got {len(args)}")
        if not all(hasattr(a, "_buffer_view") for a in args):
            raise TypeError(f"call_with_transients({name!r}): the inputs must be device arrays (Module.on_device)")
        if name not in self._transients:
            self._transients[name] = self.device.allocator.allocate_buffer(
                memory_type=rt.MemoryType.DEVICE_LOCAL, allowed_usage=rt.BufferUsage.DEFAULT,
                allocation_size=max(size, 64))
        storage = self._transients[name]
        arg_list = rt.VmVariantList(len(args) + 1)
        for a in args:
            arg_list.push_ref(a._buffer_view)
        arg_list.push_ref(storage)
        results = rt.VmVariantList(1)
        self._ctx.vm_context.invoke(fn, arg_list, results)
        return np.asarray(rt.DeviceArray(self.device, results.get_as_object(0, rt.HalBufferView)).to_host())

    def time(self, name: str, *args, repeat: int = 5, warmup: int = 1) -> list:
        """Wall-clock seconds of ``repeat`` calls (after ``warmup`` calls), results synced to host."""
        dev_args = self.on_device(*args)
        for _ in range(warmup):
            self(name, *dev_args)
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            self(name, *dev_args)
            times.append(time.perf_counter() - t0)
        return times


#: The reflection key of a function's transient storage size (bytes) when it does not depend on the inputs.
TRANSIENTS_SIZE = "iree.abi.transients.size.constant"


def _close(text: str, i: int, where: str) -> int:
    """The index just past the bracket that closes the one at ``text[i]`` (``(``, ``<``, ``{`` or ``[``),
    brackets inside ``"..."`` strings skipped.

    Raises:
        ValueError: the text ends first (``where`` names the function in the message).
    """
    pairs = {"(": ")", "<": ">", "{": "}", "[": "]"}
    stack, j = [], i
    while j < len(text):
        ch = text[j]
        if ch == '"':
            j += 1
            while j < len(text) and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
        elif ch in pairs and (ch != "<" or not stack or stack[-1] == ">"):
            stack.append(pairs[ch])
        elif ch == ">" and stack and stack[-1] == ">" and text[j - 1] != "-":
            stack.pop()
        elif ch in ")}]":
            if not stack or stack[-1] != ch:
                raise ValueError(f"with_external_transients: {where}: unbalanced {ch!r}")
            stack.pop()
        j += 1
        if not stack:
            return j
    raise ValueError(f"with_external_transients: {where}: the text ends inside a bracket")


def with_external_transients(text: str, func: str = "main") -> str:
    """``text`` with its ``func`` given IREE's external transients: a last argument ``%falcon_transients:
    !hal.buffer {iree.abi.transients}`` and its single result passed through ``hal.tensor.transients``,
    so that iree-compile places every transient allocation of the function in that buffer and states its
    size (:data:`TRANSIENTS_SIZE`; IREE 3.13). The call then allocates nothing
    (:meth:`Module.call_with_transients`). Text-level (brackets matched, strings skipped): ``func`` must be
    a ``func.func`` with one tensor result, written ``-> (T {attrs})`` or ``-> T``, optionally
    ``attributes {...}``, and one ``return`` (``func.return``) in its body.

    Raises:
        ValueError: no such function, not one tensor result, not one ``return`` in its body, unbalanced
            brackets, or the function has the argument already.
    """
    import re

    where = f"@{func}"
    m = re.search(r"func\.func\s+(?:public\s+|private\s+)?@" + re.escape(func) + r"\(", text)
    if not m:
        raise ValueError(f"with_external_transients: no func.func @{func}")
    i = _close(text, m.end() - 1, where)  # past the argument list's ")"
    args = text[m.end():i - 1]
    if "%falcon_transients" in args:
        raise ValueError(f"with_external_transients: {where} has the transients argument already")
    arrow = re.match(r"\s*->\s*", text[i:])
    if not arrow:
        raise ValueError(f"with_external_transients: {where} has not one tensor result")
    k = i + arrow.end()
    if text.startswith("(", k):
        results_end = _close(text, k, where)
        results = text[k + 1:results_end - 1].strip()
    else:
        results_end = _close(text, text.index("<", k), where) if text.startswith("tensor<", k) else k
        results = text[k:results_end]
    if not results.startswith("tensor<") or _close(results, 6, where) != len(results.split(" {")[0].rstrip()):
        raise ValueError(f"with_external_transients: {where} has not one tensor result")
    rest = re.match(r"\s*(?:attributes\s*)?", text[results_end:])
    body_start = results_end + rest.end()
    if rest.group(0).strip():  # attributes {...}, then the body
        body_start = _close(text, body_start, where)
        body_start += len(text[body_start:]) - len(text[body_start:].lstrip())
    if not text.startswith("{", body_start):
        raise ValueError(f"with_external_transients: {where} has no body")
    j = _close(text, body_start, where)
    body = text[body_start:j]
    returns = list(re.finditer(r"(?<![\w.])(?:func\.)?return\b", body))  # not stablehlo.return etc.
    r = re.compile(r"(?:func\.)?return\s+(%[\w#.$-]+)\s*:\s*").match(body, returns[0].start()) if len(returns) == 1 else None
    if r is None or not body.startswith("tensor<", r.end()):
        raise ValueError(f"with_external_transients: {where} needs exactly one return of one tensor")
    type_end = _close(body, r.end() + 6, where)
    ty = body[r.end():type_end]
    line_start = body.rfind("\n", 0, r.start()) + 1
    indent = body[line_start:r.start()] if not body[line_start:r.start()].strip() else "  "
    new_ret = (f"%falcon_transients_result = hal.tensor.transients {r.group(1)} : {ty} from %falcon_transients : "
               f"!hal.buffer\n{indent}return %falcon_transients_result : {ty}")
    body = body[:r.start()] + new_ret + body[type_end:]
    sig = text[m.start():m.end()] + (args + ", " if args.strip() else "") + \
        "%falcon_transients: !hal.buffer {iree.abi.transients})"
    return text[:m.start()] + sig + text[i:body_start] + body + text[j:]


def run_mlir(text: str, name: str, *args, flags: Sequence[str] = CPU_FLAGS):
    """Compile ``text`` for the host and call ``name`` on ``args`` (numpy arrays)."""
    return Module(compile_mlir(text, flags))(name, *args)
