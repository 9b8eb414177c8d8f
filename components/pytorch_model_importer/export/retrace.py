"""A loaded TorchScript module re-traced with the declared inputs, so that every
value of its graph has a shape again.

``torch.jit.load`` keeps a traced model's ops but not the shapes the tracer saw,
and torch.onnx.export needs some of them: ``unflatten`` then ``transpose`` in
the cross-attention of ``nn.MultiheadAttention`` (an ``nn.TransformerDecoder``)
is refused as "transpose for tensor of unknown rank". The same model exports
when handed over eagerly, because tracing records every shape. So the graph is
traced again: :func:`retraced` inlines the module's ``forward`` graph, runs it
node by node in Python under ``torch.jit.trace`` (each aten op through its
Python binding, which the tracer records with the shapes it computes, sizes
staying dynamic), and returns that trace. A graph with control flow
(``prim::If``/``prim::Loop``, which a scripted, not traced, model has) or an op
without a binding is left as it is (None): the export's own error stands.

Example (not run here: it needs a TorchScript file)::

    again = retraced(torch.jit.load("model.pt"), (torch.randn(2, 5, 16),))
    torch.onnx.export(again or module, args, "model.onnx")
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import torch

# Where aten ops have their Python bindings taking aten's own argument order
# (``torch.stft``'s Python wrapper does not; ``torch._C._VariableFunctions.stft`` does).
RETRACED = "torchscript-retraced"  # the report's rewrite kind
_NAMESPACES = ("_VariableFunctions", "_nn", "_linalg", "_special", "_fft")
_STRUCTURE = {"prim::If", "prim::Loop", "prim::CallFunction", "prim::CallMethod",
              "prim::PythonOp", "prim::RaiseException"}


# TorchScript keeps these enums as ints; the Python bindings take the torch objects.
_SCALAR_TYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                 torch.float16, torch.float32, torch.float64, torch.complex32,
                 torch.complex64, torch.complex128, torch.bool, torch.qint8, torch.quint8,
                 torch.qint32, torch.bfloat16)
# By argument name: a parsed schema types these arguments as int.
_ENUMS = {
    "dtype": _SCALAR_TYPES,
    "memory_format": (torch.contiguous_format, torch.preserve_format, torch.channels_last,
                      torch.channels_last_3d),
    "layout": (torch.strided, torch.sparse_coo),
}


def _typed(argument, value):
    if argument.name in _ENUMS and isinstance(value, int) and not isinstance(value, bool):
        return _ENUMS[argument.name][value]
    return value


class _Unsupported(Exception):
    """A node the interpreter cannot run: the module is left as it was."""


def _binding(name: str) -> Optional[Callable]:
    for namespace in _NAMESPACES:
        fn = getattr(getattr(torch._C, namespace, None), name, None)
        if callable(fn):
            return fn
    return None


def _call(node, values: List[Any]) -> Any:
    kind = node.kind()
    name = kind.split("::", 1)[1]
    schema = torch._C.parse_schema(node.schema()) if node.schema() != "(no schema)" else None
    if schema is None:
        raise _Unsupported(kind)
    args, kwargs = [], {}
    for argument, value in zip(schema.arguments, values, strict=True):
        value = _typed(argument, value)
        if argument.kwarg_only:
            kwargs[argument.name] = value
        else:
            args.append(value)
    fn = _binding(name)
    if fn is not None:
        try:
            return fn(*args, **kwargs)
        except TypeError:
            pass  # a binding of another signature: the Tensor method below
    method = getattr(args[0], name, None) if args and isinstance(args[0], torch.Tensor) \
        else None
    if method is None:
        raise _Unsupported(kind)
    return method(*args[1:], **kwargs)


def _run_node(node, env: Dict[Any, Any]) -> None:
    kind = node.kind()
    ins = [env[v] for v in node.inputs()]
    outs = list(node.outputs())
    if kind == "prim::Constant":
        result: Any = outs[0].toIValue()
    elif kind == "prim::GetAttr":
        result = getattr(ins[0], node.s("name"))
    elif kind == "prim::ListConstruct":
        result = list(ins)
    elif kind == "prim::TupleConstruct":
        result = tuple(ins)
    elif kind in ("prim::ListUnpack", "prim::TupleUnpack"):
        for value, item in zip(outs, ins[0], strict=True):
            env[value] = item
        return
    elif kind == "prim::TupleIndex" or kind == "aten::__getitem__":
        result = ins[0][ins[1]]
    elif kind == "prim::NumToTensor":
        # Traced sizes are already 0-dim tensors: keeping them keeps them dynamic.
        result = ins[0] if isinstance(ins[0], torch.Tensor) else torch.tensor(ins[0])
    elif kind in ("aten::Int", "aten::Float", "aten::ScalarImplicit", "aten::Bool"):
        result = ins[0]  # the consuming op's binding reads a 0-dim tensor as the number
    elif kind == "aten::size" and len(ins) == 1:
        result = ins[0].size()
    elif kind == "aten::size":
        result = ins[0].size(ins[1])
    elif kind == "prim::device":
        result = ins[0].device
    elif kind == "prim::dtype":
        result = ins[0].dtype
    elif kind == "aten::dim":
        result = ins[0].dim()
    elif kind == "aten::len":
        result = len(ins[0])
    elif kind.startswith("aten::"):
        result = _call(node, ins)
    else:
        raise _Unsupported(kind)
    if len(outs) == 1:
        env[outs[0]] = result
    else:
        for value, item in zip(outs, result, strict=True):
            env[value] = item


class _Interpreted(torch.nn.Module):
    """The module's inlined graph as a Python forward (traced, never scripted)."""

    def __init__(self, module, graph):
        super().__init__()
        self.module = module
        self._graph = graph

    def forward(self, *args):
        inputs = list(self._graph.inputs())
        env: Dict[Any, Any] = {inputs[0]: self.module}
        for value, arg in zip(inputs[1:], args, strict=True):
            env[value] = arg
        for node in self._graph.nodes():
            _run_node(node, env)
        outputs = [env[v] for v in self._graph.outputs()]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)


def retraced(module, args: tuple):
    """``module`` (a ScriptModule) as an eager module that runs its own graph node by node
    (what torch.onnx.export traces with every shape), checked to run on ``args``; None
    when its graph has control flow or an op the interpreter cannot run."""
    graph = module.forward.graph.copy()
    torch._C._jit_pass_inline(graph)
    if any(node.kind() in _STRUCTURE for node in graph.nodes()):
        return None
    interpreted = _Interpreted(module, graph)
    try:
        with torch.no_grad():
            torch.jit.trace(interpreted, args, check_trace=False)
    except (_Unsupported, RuntimeError, TypeError, ValueError, IndexError):
        return None
    return interpreted
