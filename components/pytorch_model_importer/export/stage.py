"""Import stage 2: a torch module to ONNX, or a handed-over ONNX file renamed to the
declared signature. No TFX imports; torch and onnx are imported lazily.

The rewrites the export makes are the package's other modules' (docs in
export/__init__.py); this module runs them around ``torch.onnx.export``."""
from __future__ import annotations

import re
import warnings
from typing import List, Optional, Sequence

from tfx_bridge.components.pytorch_model_importer.errors import (
    ImporterConfigError,
    ImporterError,
    ModelSourceError,
)
from tfx_bridge.components.pytorch_model_importer.export import model_frame, traced_batch
from tfx_bridge.components.pytorch_model_importer.rewrite import Rewrite
from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec, make_inputs
from tfx_bridge.components.pytorch_model_importer.source import (
    check_external_data,
    lazy_onnx,
    lazy_torch,
)

DEFAULT_OPSET = 17
MIN_OPSET = 14
MAX_OPSET = 20
# The batch of the sample torch.onnx.export traces with. Python branches on tensor
# values are traced for this sample only: a MoE layer that skips experts no token
# chose (`if top_x.shape[0] == 0: continue`, as transformers writes them) leaves
# those experts out of the graph. A larger, random sample routes tokens to every
# expert of a usual MoE, and the verification catches what it still misses.
EXPORT_BATCH = 32
MAX_TRACE_WARNINGS = 8
UNUSED_INPUT = "unused-input-ignored"  # the report's rewrite kind

def export_onnx(module, inputs: Sequence[TensorSpec], output_names: Sequence[str], path: str,
                opset: int = DEFAULT_OPSET, trace_warnings: Optional[list] = None,
                batch: int = EXPORT_BATCH) -> List[Rewrite]:
    """torch.onnx.export with named inputs/outputs and a dynamic axis per -1.

    Rewrites in force during the export: the fused attention fast path is off
    and fixed-width EmbeddingBags are exported as gather + reduce
    (module_rewrites.py); PyTorch's fused kernels recorded in a TorchScript
    graph (encoder layer, multi-head attention, embedding_bag) are exported as
    standard ops (fused.py), and torch symbolics that export wrongly are
    replaced (symbolic_rewrites.py). The rewrites used are returned for the
    report; torch's TracerWarnings (Python
    control flow on tensor values, frozen for the export sample) are appended to
    ``trace_warnings`` as "file:line: message". ``batch``: the sample's batch.
    """
    torch = lazy_torch()
    onnx = lazy_onnx()
    from tfx_bridge.components.pytorch_model_importer.export import module_rewrites

    if not MIN_OPSET <= opset <= MAX_OPSET:
        raise ImporterConfigError(
            f"opset {opset}: use {MIN_OPSET} to {MAX_OPSET} (default {DEFAULT_OPSET}).")
    sample = make_inputs(inputs, batch=batch)
    args = tuple(torch.from_numpy(sample[s.name]) for s in inputs)
    dynamic = {s.name: {i: ("batch" if i == 0 else f"{s.name}_dim{i}")
                        for i, d in enumerate(s.shape) if d < 0} for s in inputs}
    for name in output_names:
        dynamic[name] = {0: "batch"}
    try:
        applied_symbolics, decomposed, fastpath, export_paths, inlined, bags = _export(
            module, args, inputs, output_names, path, opset, dynamic, trace_warnings)
        retraced = []
    except _ExportFailed as failed:
        e, exported = failed.__cause__, failed.exported
        failure = ModelSourceError(_export_failure(
            e, inputs, lambda kind: _locate(exported, args, kind),
            script=isinstance(module, torch.jit.ScriptModule),
            in_model=lambda: (model_frame.where(e, module),
                              model_frame.runs_eagerly(module, args), batch)))
        unrunnable = traced_batch.fails_in_torch(module, inputs, batch)
        if unrunnable is not None:
            raise ModelSourceError(unrunnable) from e
        again = _retraced(module, args)
        if again is None:
            raise failure from e
        try:
            applied_symbolics, decomposed, fastpath, export_paths, inlined, bags = _export(
                again, args, inputs, output_names, path, opset, dynamic, trace_warnings)
        except _ExportFailed:
            raise failure from e  # the first failure names the user's module
        fastpath = []  # a TorchScript graph's attention ran as recorded; nothing switched
        retraced = [_retrace_rewrite(str(failure))]
    model = onnx.load(path)
    if len(model.graph.output) != len(output_names):
        raise ImporterConfigError(
            f"The model returns {len(model.graph.output)} output(s) but "
            f"{len(output_names)} --output-name were given ({list(output_names)}).")
    onnx.checker.check_model(model)
    onnx.save(onnx.shape_inference.infer_shapes(model), path)
    applied = retraced + list(decomposed) + applied_symbolics + module_rewrites.rewrites(
        fastpath, inlined, export_paths, module_rewrites.dense_names(bags))
    unused = unused_inputs(model, inputs)
    if unused:
        applied.append(unused_rewrite(unused))
    return applied


def unused_rewrite(names: Sequence[str]) -> Rewrite:
    """The report's record of declared inputs the ONNX graph does not have."""
    return Rewrite(
        UNUSED_INPUT, list(names),
        "the model never reads these declared inputs, so the exported graph has none; "
        "the serving signatures still take them (clients send them) and ignore them")


class _ExportFailed(Exception):
    """torch.onnx.export raised (the cause); ``exported`` is the module it was given."""

    def __init__(self, exported):
        super().__init__("torch.onnx.export failed")
        self.exported = exported


def _export(module, args, inputs, output_names, path, opset, dynamic, trace_warnings):
    """One torch.onnx.export of ``module`` with every rewrite in force; what it applied.
    A failure of torch's is :class:`_ExportFailed` (ours, ImporterError, pass as they are)."""
    torch = lazy_torch()
    from tfx_bridge.components.pytorch_model_importer.export import (
        fused,
        module_rewrites,
        symbolic_rewrites,
    )

    fastpath = module_rewrites.uses_fastpath_modules(module)
    decomposed = fused.rewrites(module)  # [] unless a TorchScript graph holds fused kernels
    if decomposed:
        fastpath = []  # the fast-path switch changes nothing in an already traced graph
    with fused.onnx_symbolics(), symbolic_rewrites.onnx_symbolics(), \
            module_rewrites.mha_fastpath_off(), \
            module_rewrites.model_export_paths(module) as export_paths, \
            module_rewrites.autograd_functions_inlined() as inlined, \
            module_rewrites.dense_embedding_bags(module) as (exported, bags), \
            module_rewrites.unregistered_parameters_frozen(module) as frozen, \
            torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", torch.jit.TracerWarning)
        if not isinstance(exported, torch.jit.ScriptModule):
            exported = module_rewrites.Positional(exported)
        try:
            torch.onnx.export(exported, args, path, input_names=[s.name for s in inputs],
                              output_names=list(output_names), dynamic_axes=dynamic,
                              opset_version=opset, do_constant_folding=True, dynamo=False)
        except ImporterError:
            raise
        except Exception as e:
            raise _ExportFailed(exported) from e
    applied_symbolics = symbolic_rewrites.rewrites() + module_rewrites.frozen_rewrites(frozen)
    if trace_warnings is not None:
        trace_warnings.extend(_trace_warnings(caught, torch.jit.TracerWarning))
    return applied_symbolics, decomposed, fastpath, export_paths, inlined, bags


def _retraced(module, args):
    """A loaded TorchScript module run op by op for a second export (retrace.py), or None."""
    torch = lazy_torch()
    if not isinstance(module, torch.jit.ScriptModule):
        return None
    from tfx_bridge.components.pytorch_model_importer.export import retrace

    return retrace.retraced(module, args)


def _retrace_rewrite(failure: str) -> Rewrite:
    from tfx_bridge.components.pytorch_model_importer.export import retrace

    first = failure.split(": ", 1)[-1].split(" (at ")[0]
    return Rewrite(retrace.RETRACED, [f"first export: {first}"],
                   "torch.jit.load keeps no tensor shapes and the exporter needed some; the "
                   "module's own graph was run op by op and traced again with the declared "
                   "inputs (the ops and weights it recorded, every shape now known)")


def _trace_warnings(caught, kind) -> List[str]:
    """TracerWarnings as 'file:line: first line', each place once, at most
    MAX_TRACE_WARNINGS (torch's own files left out: the user's lines are the fix)."""
    seen: List[str] = []
    for w in caught:
        where = w.filename.replace("\\", "/")
        if not issubclass(w.category, kind) or "/site-packages/torch/" in where:
            continue
        text = f"{w.filename}:{w.lineno}: {str(w.message).splitlines()[0][:200]}"
        if text not in seen:
            seen.append(text)
    return seen[:MAX_TRACE_WARNINGS]


def export_prefix(module) -> str:
    """The scope prefix export_onnx's wrapper adds to node names ('' for TorchScript)."""
    if module is None or isinstance(module, lazy_torch().jit.ScriptModule):
        return ""
    from tfx_bridge.components.pytorch_model_importer.export import module_rewrites

    return module_rewrites.WRAPPER_ATTRIBUTE + "."


def _export_failure(error: Exception, inputs: Sequence[TensorSpec], locate=None,
                    script: bool = False, in_model=None) -> str:
    """What torch.onnx.export's error means for the user: the op, where the model
    calls it, the cause (a torch limitation, a shape the exporter cannot know, a
    TorchScript graph without shapes) and the fix for that cause.

    ``locate(kind)``: where the model calls op ``kind`` ("at file:line in fn(),
    PyTorch module ..."), for torch's "Exporting the operator ... is not
    supported", which names neither. ``script``: the model came as TorchScript.
    ``in_model()``: (where the model's own code raised, the error torch raises on the
    same sample without the exporter or None, the sample's batch), for an error the
    model's forward raised while traced.
    """
    text = str(error)
    first = next((ln for ln in text.splitlines() if ln.strip()), type(error).__name__)
    if "embedding_bag" in text:
        return (f"torch.onnx.export cannot export this compiled nn.EmbeddingBag ({first[:200]})."
                " Hand over the state_dict with --module-class: the importer then exports "
                "fixed-width bags as gather + reduce (padding_idx included).")
    names = re.search(r"number of output names provided \((\d+)\) exceeded number of "
                      r"outputs \((\d+)\)", text)
    if names:
        return (f"{names.group(1)} output names are declared, but forward() returns "
                f"{names.group(2)} output(s): declare one --output-name (output_names entry) "
                "per returned tensor, in order.")
    # torch.jit.save keeps no shapes in the graph: symbolics that need a rank fail there,
    # and some fail inside torch (an IndexError on a shape list) rather than say so.
    other_forms = ("the TorchScript file keeps no tensor shapes, which the exporter "
                   "needs here: hand over the same model as a state_dict (--state-dict "
                   "with --module-class) or as ONNX exported from the Python module")
    op = _symbolic_failure(text)
    unsupported = re.match(r"Exporting the operator '([\w:.]+)'", text)
    if op is not None and unsupported and locate is not None:
        where = locate(unsupported.group(1))
        op = f"{op} ({where})" if where else op
    if op is not None:
        if re.search(r"unknown (rank|shape)|rank is unknown|shape is unknown", text):
            cause = other_forms if script else (
                "the exporter cannot know this tensor's rank (its shape depends on the "
                "data): give it a fixed rank on that line (e.g. reshape to known sizes)")
        elif unsupported:
            cause = ("torch's exporter has no ONNX form for it at this opset (a torch "
                     "limitation): write that line with other ops, or export the model to "
                     "ONNX yourself where torch can (a newer opset, the dynamo exporter) "
                     "and hand over the file")
        elif re.search(r"bitwise|__(or|and|xor|not)_", text):
            cause = "cast integer masks to bool before |, & or ~ on that line"
        else:
            cause = ("write that line with ops the exporter supports, or export the model "
                     "to ONNX yourself and hand over the file")
        return f"torch.onnx.export refused the model: {op}. Cause and fix: {cause}."
    if script:
        return (f"torch.onnx.export failed inside torch on this TorchScript graph "
                f"({type(error).__name__}: {first[:300]}): {other_forms}.")
    declared = ", ".join(s.to_text() for s in inputs)
    line, eager, batch = in_model() if in_model is not None else (None, None, None)
    if line is None:
        return (f"torch.onnx.export failed: {type(error).__name__}: {first[:500]}. Cause: "
                "raised outside the model's own code (in calling forward() or in torch's "
                f"exporter). Check the declared inputs ({declared}) match forward()'s "
                "arguments in order.")
    if eager is not None:
        cause = (f"the model's own code rejects the export's sample input ({declared} at "
                 f"batch {batch}): torch raises {eager} on it without the exporter. "
                 "Declare input shapes the model accepts (fixed sizes where its code "
                 "needs them)")
    else:
        cause = ("that line runs eagerly on the same sample but fails under tracing (it "
                 "takes another path when traced, or turns a tensor into a Python number "
                 "the trace then fixes): write it with tensor ops, or export the model to "
                 "ONNX yourself and hand over the file")
    return (f"torch.onnx.export failed in the model's forward: {type(error).__name__}: "
            f"{first[:300]} ({line}). Cause and fix: {cause}.")


_SCOPE = re.compile(r"scope: (\S+)")
_DEFINED = re.compile(r"\(node defined in (.+?)\((\d+)\): (\w+)")
_GENERIC_TAIL = re.compile(r"\s*Please (feel free to request|report an issue).*", re.S)


def _symbolic_failure(text: str) -> Optional[str]:
    """torch's symbolic error as 'what, where': the reason without its graph dump and
    generic tail, the source line that called the op, and the PyTorch module by
    qualified name and class (from the node's scope); None for other errors."""
    if "[Caused by the value" not in text and "node defined in" not in text \
            and not text.startswith("Exporting the operator"):
        return None
    reason = _GENERIC_TAIL.sub("", text.split("[Caused by", 1)[0]).strip().rstrip(".")
    defined = _DEFINED.search(text)
    scope = _SCOPE.search(text)
    where = _where(scope.group(1) if scope else "", defined.groups() if defined else None)
    return reason + (f" ({', '.join(where)})" if where else "")


def _where(scope: str, defined: Optional[tuple]) -> List[str]:
    """"at file:line in fn()" and "PyTorch module 'a.b' (Class)" from a traced node's
    scope ("pkg.Outer::/pkg.Inner::block") and (file, line, function)."""
    where = []
    if defined:
        where.append(f"at {defined[0].rsplit('/', 1)[-1]}:{defined[1]} in {defined[2]}()")
    mods = [part.split("::", 1) for part in scope.split("/") if "::" in part]
    mods = [m for m in mods if not m[0].endswith("." + _wrapper_class())]
    names = [name for _, name in mods[1:] if name]  # the root's name is our attribute
    if mods:
        where.append(f"PyTorch module {'.'.join(names) or '(root)'!r} "
                     f"({mods[-1][0].rsplit('.', 1)[-1]})")
    return where


_FRAME = re.compile(r"^(.+?)\((\d+)\): (\w+)$")


def _locate(module, args, kind: str) -> Optional[str]:
    """Where ``module`` calls op ``kind``: traced again with torch.onnx's module scopes
    (only when the export failed), the first such node's source line and module."""
    torch = lazy_torch()
    trace = torch.jit._trace
    # Each module by its attribute name, as torch.onnx.export scopes them.
    scopes = {m: torch._C._jit_onnx_create_full_scope_name(torch.typename(type(m)),
                                                           name.rsplit(".", 1)[-1])
              for name, m in module.named_modules()}
    before = trace._trace_module_map
    trace._trace_module_map = scopes
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph, _ = torch.jit._get_trace_graph(module, args)
    except Exception:  # noqa: BLE001 (locating is best effort: the export's error stands)
        return None
    finally:
        trace._trace_module_map = before
    node = next((n for n in graph.nodes() if n.kind() == kind), None)
    if node is None:
        return None
    frame = _FRAME.match(str(node.sourceRange()).splitlines()[0].strip()) \
        if str(node.sourceRange()).strip() else None
    where = _where(node.scopeName(), frame.groups() if frame else None)
    return ", ".join(where) or None


def _wrapper_class() -> str:
    """The class export_onnx wraps a module in (its scope is not the user's)."""
    from tfx_bridge.components.pytorch_model_importer.export import module_rewrites

    return module_rewrites.Positional.__name__


def unused_inputs(model, inputs: Sequence[TensorSpec]) -> List[str]:
    """Declared inputs the exported ONNX ``model`` does not have: torch.onnx.export
    leaves out an input the model never reads (a text model ignoring
    ``attention_mask``)."""
    graph = model.graph
    present = {i.name for i in graph.input} - {t.name for t in graph.initializer}
    return [s.name for s in inputs if s.name not in present]


def rename_onnx_io(src: str, dst: str, inputs: Sequence[TensorSpec],
                   output_names: Sequence[str]) -> List[str]:
    """A copy of an ONNX file whose outputs carry the declared names; returns the
    declared inputs the graph does not have. The graph's inputs must be the declared
    ones, in order, less those: torch.onnx.export leaves out an input the model never
    reads, so the file a user exported lacks it, as our own export's graph does."""
    onnx = lazy_onnx()
    check_external_data(src)
    model = onnx.load(src)
    graph_inputs = [i.name for i in model.graph.input
                    if i.name not in {t.name for t in model.graph.initializer}]
    declared = [s.name for s in inputs]
    unused = [d for d in declared if d not in graph_inputs]
    if not graph_inputs or graph_inputs != [d for d in declared if d in graph_inputs]:
        raise ImporterConfigError(
            f"{src}: graph inputs are {graph_inputs}; declared inputs are {declared}. Declare "
            "them with the graph's names, in order.")
    if len(model.graph.output) != len(output_names):
        raise ImporterConfigError(
            f"{src} has {len(model.graph.output)} outputs "
            f"({[o.name for o in model.graph.output]}); {len(output_names)} --output-name given.")
    rename = {o.name: new for o, new in zip(model.graph.output, output_names, strict=True)}
    for node in model.graph.node:
        for i, name in enumerate(node.output):
            if name in rename:
                node.output[i] = rename[name]
        for i, name in enumerate(node.input):
            if name in rename:
                node.input[i] = rename[name]
    for o in model.graph.output:
        o.name = rename[o.name]
    onnx.checker.check_model(model)
    onnx.save(model, dst)
    return unused

