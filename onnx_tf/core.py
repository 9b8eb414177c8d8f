"""ONNX -> TF, op by op in ONNX semantics: the interpreter of tfx-bridge's own converter.

No TFX imports; TensorFlow and onnx are imported by the caller's process
(the ``onnx`` extra). Why a converter of our own: onnx2tf converts to NHWC for
TFLite and its layout heuristics break inside transformer and vision graphs.
Here every value keeps ONNX's meaning. Ops that need TF's channel-last kernels
(Conv, pooling) run channel-last, so the graph runs on TF's stock CPU kernels
(no oneDNN-only NCHW Conv2D), and their outputs stay channel-last through the
layout-free ops after them (layout.py: a value is held with a permutation of
ONNX's axes; a handler that needs ONNX's layout gets it from ``Node.t``, built
once per value). Graph inputs, outputs and subgraphs see ONNX's layout.

How a graph becomes a SavedModel:

- The graph is interpreted inside one ``tf.function`` trace. Each node's
  handler (registered with :func:`op`, one module per op family) maps its
  inputs to outputs with TF ops. Dynamic dimensions flow through
  ``tf.shape`` and are never frozen.
- Values known at conversion time (initializers, ``Constant`` nodes and
  whatever is computed only from them: shape arithmetic over constants) are
  numpy arrays and are folded eagerly by the same handlers, so attributes
  that TF needs as Python values (axes, perms, pads) stay static. A large
  constant becomes a tracked ``tf.Variable`` when a TF op uses it, so every
  weight is saved with the model.
- After every node, the output's static shape and dtype are checked against
  ONNX's own shape inference (and the shape set from it): a handler that
  computes the wrong shape is caught at the node, not three ops later.
- Every attribute a node carries must be one its handler declares, and each
  handler refuses the variants it does not implement by name
  (:class:`Unsupported`); ``check.check_model`` finds those before tracing.
  Element types and their carrier dtypes are in dtypes.py.

Size: the interpreter (graph walk, constant folding, static-shape checks and
the handler contract) is one mechanism every op module relies on; ``convert``
and ``save`` are its entry points.
"""
from __future__ import annotations

import dataclasses
import hashlib
import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from tfx_bridge.onnx_tf import layout
from tfx_bridge.onnx_tf.check import attr_value, check_model, iter_nodes
from tfx_bridge.onnx_tf.dtypes import as_carrier, carrier_of, tf_dtype
from tfx_bridge.onnx_tf.errors import ConversionFailed, Problem, Unsupported
from tfx_bridge.onnx_tf.layout import Permuted
from tfx_bridge.onnx_tf.lazy import tf as _tf
from tfx_bridge.onnx_tf.registry import ONNX_DOMAINS, REGISTRY, REQUIRED

CONVERTER = "tfx-bridge"
# Constants at least this large become tf.Variables when a TF op uses them (weights);
# smaller ones are embedded in the graph (shapes, axes, scalars).
VARIABLE_MIN_ELEMENTS = 1024
# A folded constant larger than this is computed in the graph instead (no huge
# constants in saved_model.pb).
FOLD_MAX_ELEMENTS = 1 << 22


def is_const(value) -> bool:
    return isinstance(value, np.ndarray)


class Node:
    """One node as its handler sees it: inputs (numpy constants or tf tensors), attributes
    with defaults filled in, the opset, and helpers that refuse by name."""

    def __init__(self, graph: GraphRun, proto, inputs: List[Any], folding: bool):
        self.graph = graph
        self.proto = proto
        self.op_type = proto.op_type
        self.name = proto.name
        self.opset = graph.converter.opset
        self.inputs = inputs
        self.folding = folding
        # Channel-last values may leave this node only in the main graph's traced body
        # (subgraphs and folded constants keep ONNX's layout).
        self.layout_ok = graph.converter.channel_last and not folding and graph.parent is None
        definition = REGISTRY[proto.op_type]
        self.attrs = {k: v for k, v in definition.attrs.items() if v is not REQUIRED}
        self.attrs.update({a.name: attr_value(a) for a in proto.attribute})
        self.protos = {a.name: a for a in proto.attribute}

    # -- attributes
    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def refuse(self, variant: str, fix: str = ""):
        raise Unsupported(variant, fix)

    # -- inputs
    @property
    def n(self) -> int:
        return len(self.inputs)

    def has(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def value(self, i: int):
        if not self.has(i):
            return None
        value = self.inputs[i]
        return self.t(i) if isinstance(value, Permuted) else value

    def t(self, i: int):
        """Input ``i`` as a tf.Tensor in ONNX's layout (a large constant as its tracked
        variable)."""
        value = self.inputs[i]
        if is_const(value):
            return self.graph.converter.tensor(value, self.folding)
        if isinstance(value, Permuted):
            return value.logical(cache=self.graph.parent is None)
        return value

    def physical(self, i: int):
        """(tensor, perm) of input ``i``: its tensor as held (``perm`` None when that is
        ONNX's layout), for handlers that can use another axis order."""
        value = self.inputs[i]
        if isinstance(value, Permuted) and self.layout_ok:
            return value.physical, value.perm
        return self.t(i), None

    def held_as(self, i: int, perm):
        """Input ``i`` in axis order ``perm`` (``transpose(logical, perm)``): as held when
        it already is, else transposed once per value and shared by its consumers."""
        tf = _tf()
        perm = tuple(perm)
        value = self.inputs[i]
        if isinstance(value, Permuted) and value.perm == perm and self.layout_ok:
            return value.physical
        if isinstance(value, Permuted) and self.layout_ok:  # held to held: one move
            x, perm = value.physical, tuple(value.perm.index(a) for a in perm)
        else:
            x = self.t(i)
        if not self.layout_ok:
            return tf.transpose(x, perm)
        key = (x.ref(), perm)
        if key not in self.graph.transposed:
            self.graph.transposed[key] = layout.merged_transpose(x, perm)
        return self.graph.transposed[key]

    def emit(self, tensor, perm):
        """An output computed in axis order ``perm``: kept so where channel-last values
        may flow, else turned into ONNX's layout."""
        value = Permuted(tensor, perm)
        return value if self.layout_ok else value.logical()

    def ts(self) -> list:
        return [self.t(i) for i in range(len(self.inputs)) if self.has(i)]

    def const(self, i: int, what: str) -> np.ndarray:
        """Input ``i`` as a numpy value known at conversion time, or a refusal."""
        value = self.maybe_const(i)
        if value is None:
            raise Unsupported(
                f"{what} (input {i}) is computed at run time; this converter needs it as a "
                "constant", "compute it from constants or shapes only (not tensor values)")
        return value

    def maybe_const(self, i: int) -> Optional[np.ndarray]:
        if not self.has(i):
            return None
        value = self.inputs[i]
        if is_const(value):
            return value
        if isinstance(value, Permuted):
            return None
        static = _tf().get_static_value(value)
        return None if static is None else np.asarray(static)

    def shape(self, i: int) -> List[Optional[int]]:
        """Static shape of input ``i`` (None for unknown dims); refused if the rank is unknown."""
        value = self.inputs[i]
        if is_const(value):
            return list(value.shape)
        shape = value.shape
        if shape.rank is None:
            raise Unsupported(f"input {i} has an unknown rank",
                              "give the graph static ranks (run onnx shape inference)")
        return shape.as_list()

    def rank(self, i: int) -> int:
        return len(self.shape(i))

    def dyn_shape(self, i: int, dtype=None):
        """Shape of input ``i`` as an int64 (or ``dtype``) tensor, static where known."""
        tf = _tf()
        dtype = dtype or tf.int64
        value = self.inputs[i]
        if is_const(value):
            return np.array(value.shape, dtype.as_numpy_dtype)
        if isinstance(value, Permuted):
            return value.dyn_shape(dtype)
        static = value.shape
        if static.is_fully_defined():
            return np.array(static.as_list(), dtype.as_numpy_dtype)
        return tf.shape(value, out_type=dtype)

    def dtype(self, i: int):
        value = self.inputs[i]
        return _tf().as_dtype(value.dtype)

    def subgraph(self, name: str):
        return self.protos[name].g

    def run_subgraph(self, name: str, inputs: Sequence[Any] = ()):
        """Runs the graph attribute ``name`` (If/Loop bodies), seeing this graph's values."""
        return self.graph.run_sub(self.protos[name].g, inputs)


def sanitize(name: str) -> str:
    """A TF-valid signature argument name for an ONNX input name."""
    clean = re.sub(r"[^A-Za-z0-9_]", "_", name)
    return clean if re.match(r"[A-Za-z]", clean) else "input_" + clean


def _readers(graph) -> Dict[str, List[Tuple[Optional[Any], int]]]:
    """Value name -> every (node, input index) reading it in ``graph`` and its
    subgraphs; a graph output (of the graph or a subgraph) reads it as ``(None, -1)``."""
    from onnx import AttributeProto
    readers: Dict[str, List[Tuple[Optional[Any], int]]] = {}
    outputs = [out.name for out in graph.output]
    for n in iter_nodes(graph):
        for i, name in enumerate(n.input):
            if name:
                readers.setdefault(name, []).append((n, i))
        for a in n.attribute:
            subs = [a.g] if a.type == AttributeProto.GRAPH else a.graphs
            outputs += [out.name for sub in subs for out in sub.output]
    for name in outputs:
        readers.setdefault(name, []).append((None, -1))
    return readers


class Converter:
    """Converts one ONNX ModelProto (already shape-inferred)."""

    def __init__(self, model, channel_last: bool = True):
        import onnx
        self.model = model
        self.channel_last = channel_last
        self.opset = next((o.version for o in model.opset_import if o.domain in ONNX_DOMAINS),
                          None)
        if self.opset is None:
            raise ConversionFailed([Problem("(model)", "", "no ai.onnx opset import")])
        self.variables: List[Any] = []
        self._variable_of: Dict[tuple, Any] = {}
        self.value_info: Dict[str, Any] = {}
        for vi in list(model.graph.value_info) + list(model.graph.output) + list(
                model.graph.input):
            self.value_info[vi.name] = vi
        self.onnx = onnx
        self._readers: Optional[Dict[str, List[Tuple[Optional[Any], int]]]] = None

    def readers(self, name: str) -> List[Tuple[Optional[Any], int]]:
        """Every (node proto, input index) reading value ``name``, subgraphs included;
        ``(None, -1)`` for a graph output. Built once per model, on first use."""
        if self._readers is None:
            self._readers = _readers(self.model.graph)
        return self._readers.get(name, [])

    # -- constants
    def tensor(self, array: np.ndarray, folding: bool = False):
        """A numpy constant as a TF tensor: large ones as (cached) tracked variables.

        Variables are keyed by content: tf.function traces the body twice when it
        creates variables (the second time to check none are new), and the same
        weights must map to the same variable both times.
        """
        tf = _tf()
        if folding or array.size < VARIABLE_MIN_ELEMENTS or array.dtype == np.bool_:
            return tf.constant(array)
        array = np.ascontiguousarray(array)
        key = (str(array.dtype), array.shape,
               hashlib.blake2b(array.view(np.uint8).reshape(-1), digest_size=16).digest())
        if key not in self._variable_of:
            with tf.init_scope():
                var = tf.Variable(array, trainable=False, name=f"w{len(self.variables)}")
            self.variables.append(var)
            self._variable_of[key] = var
        return tf.convert_to_tensor(self._variable_of[key])

    # -- static shape/dtype expectations from ONNX shape inference
    def expected(self, name: str, vi=None):
        vi = vi if vi is not None else self.value_info.get(name)
        if vi is None or not vi.type.HasField("tensor_type"):
            return None, None
        tt = vi.type.tensor_type
        dtype = tt.elem_type or None
        if not tt.HasField("shape"):
            return dtype, None
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        return dtype, dims


class GraphRun:
    """Runs one (sub)graph's nodes; values seen from enclosing graphs via ``parent``."""

    def __init__(self, converter: Converter, parent: Optional[GraphRun] = None):
        self.converter = converter
        self.parent = parent
        self.values: Dict[str, Any] = {}
        self.producers: Dict[str, Any] = {}  # value name -> the NodeProto that made it
        self.transposed: Dict[tuple, Any] = {}  # (tensor ref, perm) -> its transpose
        # a MatMul's output ref -> (its 2-D product, output shape), see ops/matmul.py
        self.flat_matmuls: Dict[Any, tuple] = {}
        # A subgraph's own value_info: its names may shadow the enclosing graph's.
        self.value_info: Dict[str, Any] = {}

    def _scoped(self, table: str, name: str) -> Tuple[bool, Any]:
        """(found, entry) of ``name`` in this run's ``table`` or the nearest
        enclosing run's: a subgraph's names shadow the enclosing graph's."""
        run = self
        while run is not None:
            entries = getattr(run, table)
            if name in entries:
                return True, entries[name]
            run = run.parent
        return False, None

    def value_info_of(self, name: str):
        found, info = self._scoped("value_info", name)
        return info if found else self.converter.value_info.get(name)

    def lookup(self, name: str):
        found, value = self._scoped("values", name)
        if not found:
            raise KeyError(name)
        return value

    def run_sub(self, graph, inputs: Sequence[Any]):
        sub = GraphRun(self.converter, self)
        for vi in list(graph.input) + list(graph.value_info) + list(graph.output):
            sub.value_info[vi.name] = vi
        for spec, value in zip(graph.input, inputs, strict=False):
            sub.values[spec.name] = value
        sub.run(graph)
        return [logical(sub.lookup(o.name), cache=False) for o in graph.output]

    def run(self, graph) -> None:
        from onnx import numpy_helper
        for init in graph.initializer:
            self.values[init.name] = as_carrier(numpy_helper.to_array(init), init.data_type)
        for node in graph.node:
            self.run_node(node)

    def producer(self, name: str) -> Tuple[Optional[Any], Optional[GraphRun]]:
        """``(node, run)``: the NodeProto that made value ``name`` (enclosing graphs
        included) and the run that ran it, where its inputs are to be looked up (a
        subgraph's names may shadow the enclosing graph's); ``(None, None)`` for a
        graph input, an initializer or an unknown name."""
        run = self
        while run is not None:
            if name in run.producers:
                return run.producers[name], run
            if name in run.values:
                return None, None
            run = run.parent
        return None, None

    def run_node(self, proto) -> None:
        tf = _tf()
        for name in proto.output:
            self.producers[name] = proto
        definition = REGISTRY.get(proto.op_type)
        if definition is None or proto.domain not in ONNX_DOMAINS:
            raise Unsupported("no converter for this op", "")
        inputs = [self.lookup(name) if name else None for name in proto.input]
        fold = definition.fold and all(v is None or is_const(v) for v in inputs) \
            and sum(v.size for v in inputs if v is not None) <= FOLD_MAX_ELEMENTS \
            and proto.op_type not in ("If", "Loop", "Scan")
        outputs = None
        if fold:
            with tf.init_scope():
                outputs = _as_list(definition.handler(Node(self, proto, inputs, True)))
                outputs = [None if o is None else np.asarray(o) for o in outputs]
            if any(o is not None and o.size > FOLD_MAX_ELEMENTS for o in outputs):
                outputs = None
        if outputs is None and self.parent is None and any(
                isinstance(v, Permuted) for v in inputs):
            outputs = self._run_permuted(proto, definition, inputs)
        if outputs is None:
            with tf.name_scope(_scope_name(proto)):
                outputs = _as_list(definition.handler(Node(self, proto, inputs, False)))
        if len(outputs) < len([o for o in proto.output if o]):
            raise Unsupported(f"the handler gave {len(outputs)} outputs for "
                              f"{len(proto.output)} declared")
        for name, value in zip(proto.output, outputs, strict=False):
            if not name:
                continue
            self.values[name] = self._checked(name, value)

    def _run_permuted(self, proto, definition, inputs) -> Optional[list]:
        """A layout-free op run on its inputs' physical tensors (see layout.py); None
        when the op or its form is not known to be layout-free."""
        tf = _tf()
        perm = next(v.perm for v in inputs if isinstance(v, Permuted))
        how = layout.plan(Node(self, proto, inputs, False), perm)
        if how is None:
            return None
        physical, overrides, out_perm = how
        node = Node(self, proto, physical, False)
        node.attrs.update(overrides)
        with tf.name_scope(_scope_name(proto)):
            outputs = _as_list(definition.handler(node))
        identity = tuple(range(len(out_perm)))
        return [o if o is None or out_perm == identity else
                Permuted(self.converter.tensor(o) if is_const(o) else o, out_perm)
                for o in outputs]

    def _checked(self, name: str, value):
        """The output with ONNX's inferred static shape set; a disagreement is refused."""
        tf = _tf()
        if value is None:
            raise Unsupported(f"output {name!r} was not computed")
        elem, dims = self.converter.expected(name, self.value_info_of(name))
        carrier = carrier_of(elem) if elem else None
        permuted = value if isinstance(value, Permuted) else None
        inferred = dims  # ONNX's order, for the message
        if permuted is not None:  # ONNX's shape in the held axis order
            if dims is not None:
                if len(dims) != len(permuted.perm):
                    raise Unsupported(f"output {name!r} has rank {len(permuted.perm)}, ONNX "
                                      f"infers {len(dims)}")
                dims = [dims[a] for a in permuted.perm]
            value = permuted.physical
        if is_const(value):
            if carrier is not None and value.dtype != carrier:
                raise Unsupported(f"output {name!r} is {value.dtype}, ONNX infers "
                                  f"{carrier.name}")
            if dims is not None and (len(dims) != value.ndim or any(
                    d is not None and d != s for d, s in zip(dims, value.shape, strict=True))):
                raise Unsupported(f"output {name!r} has shape {list(value.shape)}, ONNX infers "
                                  f"{dims}")
            return value
        if not isinstance(value, (tf.Tensor, tf.Variable)):
            value = tf.convert_to_tensor(value)
        if carrier is not None and value.dtype != tf.as_dtype(carrier):
            raise Unsupported(f"output {name!r} is {value.dtype.name}, ONNX infers "
                              f"{carrier.name}")
        if dims is not None:
            try:
                value.set_shape(dims)
            except ValueError:
                # Said in ONNX's axis order, whatever order the tensor is held in.
                shape = value.shape if permuted is None else permuted.shape
                raise Unsupported(f"output {name!r} has shape {shape}, ONNX infers "
                                  f"{inferred}") from None
        if permuted is not None:
            permuted.physical = value
            return permuted
        return value


def logical(value, cache: bool = True):
    """A value in ONNX's layout (a :class:`Permuted` one transposed)."""
    return value.logical(cache) if isinstance(value, Permuted) else value


def _scope_name(proto) -> str:
    raw = proto.name or (proto.op_type + "_" + (proto.output[0] if proto.output else ""))
    clean = re.sub(r"[^A-Za-z0-9_.\-]", "_", raw).lstrip("_.-")
    return (clean or proto.op_type)[:120]


def _as_list(result) -> list:
    return list(result) if isinstance(result, (list, tuple)) else [result]


# --------------------------------------------------------------------------- convert


@dataclasses.dataclass
class Converted:
    """A converted graph: a tf.Module with ``serve`` (a concrete function) and its
    variables, plus the signature's input names (ONNX name -> TF argument name)."""

    module: Any
    serve: Any
    input_names: Dict[str, str]
    output_names: List[str]


def _input_specs(model, dynamic: Optional[Dict[str, Sequence[Optional[int]]]] = None):
    tf = _tf()
    initializers = {t.name for t in model.graph.initializer}
    specs = []
    for vi in model.graph.input:
        if vi.name in initializers:
            continue
        tt = vi.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
        if dynamic and vi.name in dynamic:
            dims = list(dynamic[vi.name])
        specs.append((vi.name, tf.TensorSpec(dims, tf_dtype(tt.elem_type),
                                             name=sanitize(vi.name))))
    return specs


def load_for_conversion(path: str):
    """The ONNX model at ``path`` with shapes inferred (data propagation on)."""
    import onnx
    model = onnx.load(path)
    try:
        return onnx.shape_inference.infer_shapes(model, data_prop=True)
    except Exception:  # inference is an aid; the converter checks what it computes itself
        return model


def convert(model, dynamic: Optional[Dict[str, Sequence[Optional[int]]]] = None, *,
            channel_last: bool = True, fold_batch_norm: bool = True) -> Converted:
    """Converts a (shape-inferred) ModelProto; raises ConversionFailed naming every node.

    ``channel_last``: convolution and pooling outputs stay channel-last through the
    layout-free ops after them (layout.py); ``fold_batch_norm``: Conv ->
    BatchNormalization pairs become one Conv (fold.py). Neither changes the signature
    or (beyond float rounding) the values.
    """
    import tensorflow as tf

    from tfx_bridge.onnx_tf import ops  # noqa: F401
    from tfx_bridge.onnx_tf.fold import fold_batch_norms

    problems = check_model(model)
    if problems:
        raise ConversionFailed(problems)
    if fold_batch_norm:
        model = fold_batch_norms(model)
    converter = Converter(model, channel_last)
    specs = _input_specs(model, dynamic)
    outputs = [o.name for o in model.graph.output]
    failure: List[Problem] = []
    from onnx import numpy_helper
    # Decoded once: tf.function traces the body twice when it creates variables.
    initializers = {init.name: as_carrier(numpy_helper.to_array(init), init.data_type)
                    for init in model.graph.initializer}

    def body(*args):
        run = GraphRun(converter)
        for (name, _), arg in zip(specs, args, strict=True):
            run.values[name] = arg
        current = None
        try:
            run.values.update(initializers)
            for node in model.graph.node:
                current = node
                run.run_node(node)
        except Unsupported as e:
            failure.append(_problem(current, e, run))
            raise
        except Exception as e:  # a TF op refusing what a handler built: name the node
            first = (str(e).strip().splitlines() or [""])[0][:300]
            failure.append(_problem(current, Unsupported(
                f"conversion error: {type(e).__name__}: {first}"), run))
            raise Unsupported(first) from e
        result = {}
        for name in outputs:
            value = logical(run.lookup(name))
            value = converter.tensor(value) if is_const(value) else value
            result[name] = tf.identity(value, name=sanitize(name))
        return result

    fn = tf.function(body, input_signature=[s for _, s in specs], autograph=False)
    try:
        concrete = fn.get_concrete_function()
    except Unsupported as e:
        raise ConversionFailed(failure or [Problem("(graph)", "", str(e))]) from e
    module = tf.Module()
    module.weights = list(converter.variables)
    module.serve = fn
    return Converted(module, concrete, {n: s.name for n, s in specs}, outputs)


def _problem(node, error: Unsupported, run: GraphRun) -> Problem:
    if node is None:
        return Problem("(graph)", "", error.variant, error.fix)
    shapes = []
    for name in node.input:
        if not name:
            continue
        try:
            value = run.lookup(name)
        except KeyError:
            continue
        shape = list(value.shape) if is_const(value) else value.shape
        shapes.append(f"{name}: {shape}")
    return Problem(node.op_type, node.name, error.variant, error.fix, ", ".join(shapes))


def save(converted: Converted, out_dir: str) -> None:
    """Writes the SavedModel with ``serving_default`` (ONNX input and output names)."""
    import tensorflow as tf
    tf.saved_model.save(converted.module, out_dir,
                        signatures={"serving_default": converted.serve})
