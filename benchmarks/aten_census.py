"""Census of the aten ops models use, against what the exporter can do with them at
the importer's opset (17).

Every model of the catalogs (``catalog.py``: torch_nn, transformers, torchvision,
each built as the catalog builds it; torchvision at 64 px) and of the test zoo
(``tests/components/pytorch_model_importer/zoo.py``) is traced as users trace
them (``model.eval(); with torch.no_grad(): torch.jit.trace(...)``) on the
catalog's own sample inputs; the graph goes through the passes torch.onnx runs
before its symbolics (inlining, in-place removal, constant folding), and its
``aten::`` node kinds are counted. Each op is then classified:

- ``ours, torch has none``: the importer registers the only symbolic for it
  during the export (export/symbolic_rewrites.py, fused.py);
- ``ours over torch's``: ours replaces torch's for the export (for some calls:
  complex values, integer operands..., leaving the rest to torch's);
- ``torch``: torch 2.5's TorchScript exporter has a symbolic at this opset or
  below (torch.onnx's registry, looked up as the exporter looks it up; a
  symbolic can still refuse some calls);
- ``none``: neither, so a model reaching it is refused at export.

A symbolic that exists can still export some calls wrongly or refuse them (a rank
it cannot know, an argument it does not take): those show up in the catalog runs
(``import_models.py --catalog``), by op and cause. Writes
benchmarks/results/aten_census.jsonl (one line per model: its ops) and prints a
markdown table, one row per op that is not plain ``torch`` (with how many models
use it), then the totals.

    nice .venv/bin/python benchmarks/aten_census.py [--family torch_nn,zoo] [--opset 17]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import warnings

BENCH_DIR = os.path.dirname(os.path.abspath(__file__))
ZOO_DIR = os.path.join(BENCH_DIR, os.pardir, "tests", "components", "pytorch_model_importer")
RESULTS = os.path.join(BENCH_DIR, "results", "aten_census.jsonl")
# Python-level plumbing a traced graph holds that no export maps to an ONNX op.
PLUMBING = {"aten::Int", "aten::Float", "aten::ScalarImplicit", "aten::size",
            "aten::__getitem__", "aten::dim", "aten::len", "aten::detach"}


def _models(families):
    """(family, name, module, input specs) for every model that builds."""
    sys.path[:0] = [BENCH_DIR, ZOO_DIR]
    import catalog
    from catalog_base import Excluded, NotBuilt, Skipped

    for family in families:
        if family == "zoo":
            import zoo

            for name, entry in zoo.ZOO.items():
                if entry.handover != "onnx":
                    yield family, name, entry.build(), entry.inputs
            continue
        for name in catalog.names(family):
            try:
                catalog.precheck(family, name)
                built = catalog.build(family, name, 64 if family == "torchvision" else None)
            except (Excluded, NotBuilt, Skipped) as e:
                print(f"  {family} {name}: not built ({type(e).__name__})", file=sys.stderr)
                continue
            except Exception as e:  # noqa: BLE001  (a builder's failure is the model's row)
                print(f"  {family} {name}: build failed: {e!r}"[:200], file=sys.stderr)
                continue
            yield family, name, built.module, built.inputs


def _ops(module, specs) -> collections.Counter:
    import torch

    from tfx_bridge.components.pytorch_model_importer import signature

    parsed = signature.parse_input_specs(specs)
    args = tuple(torch.from_numpy(v) for v in signature.make_inputs(parsed, 3).values())
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # What torch.onnx.export traces an eager module into: parameters as inputs.
        graph, _ = torch.jit._get_trace_graph(module.eval(), args)
    # The passes torch.onnx runs before it looks symbolics up (utils._optimize_graph):
    # in-place copies become index_put, constants fold, tuples go.
    torch._C._jit_pass_inline(graph)
    for name in ("_jit_pass_lower_all_tuples", "_jit_pass_constant_propagation",
                 "_jit_pass_dce", "_jit_pass_cse", "_jit_pass_canonicalize_graph_fuser_ops"):
        getattr(torch._C, name)(graph)
    torch._C._jit_pass_peephole(graph, True)
    torch._C._jit_pass_fuse_addmm(graph)
    torch._C._jit_pass_onnx_remove_inplace_ops_for_onnx(graph, None)
    torch._C._jit_pass_onnx_preprocess(graph)
    torch._C._jit_pass_prepare_division_for_onnx(graph)
    found = collections.Counter()

    def walk(block):
        for node in block.nodes():
            if node.kind().startswith("aten::") and node.kind() not in PLUMBING:
                found[node.kind()] += 1
            for inner in node.blocks():
                walk(inner)

    walk(graph)
    return found


def _lookup(name: str, opset: int):
    """The symbolic the exporter calls for a node of kind ``name``: as torch.onnx's
    ``_run_symbolic_function`` does, one trailing underscore is dropped first (in-place
    ``add_`` is ``add``; ``__and__`` is registered as ``__and_``)."""
    from torch.onnx._internal import registration

    group = registration.registry.get_function_group(name[:-1] if name.endswith("_")
                                                     else name)
    return group.get(opset) if group is not None else None


def _classify(names, opset: int):
    """{op: kind}: "torch" (torch's symbolic), "ours, torch has none", "ours over
    torch's" (a replacement registered for the export), or "none"."""
    from tfx_bridge.components.pytorch_model_importer.export import fused, symbolic_rewrites

    torchs = {name: _lookup(name, opset) is not None for name in names}
    out = {}
    with fused.onnx_symbolics(), symbolic_rewrites.onnx_symbolics():
        for name in names:
            fn = _lookup(name, opset)
            if fn is None:
                out[name] = "none"
            elif (getattr(fn, "__module__", "") or "").startswith("tfx_bridge"):
                out[name] = "ours over torch's" if torchs[name] else "ours, torch has none"
            else:
                out[name] = "torch"
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="torch_nn,zoo,transformers,torchvision")
    parser.add_argument("--opset", type=int, default=17)
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args()
    per_model = {}
    for family, name, module, specs in _models(args.family.split(",")):
        try:
            per_model[(family, name)] = _ops(module, specs)
        except Exception as e:  # noqa: BLE001  (a model that does not trace is named)
            print(f"  {family} {name}: trace failed: {e!r}"[:200], file=sys.stderr)
        print(f"  {family} {name}: {len(per_model.get((family, name), {}))} ops",
              file=sys.stderr)
    users = collections.Counter()
    for ops in per_model.values():
        users.update(set(ops))
    kinds = _classify(sorted(users), args.opset)
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as f:
        for (family, name), ops in per_model.items():
            f.write(json.dumps({"family": family, "name": name, "opset": args.opset,
                                "ops": dict(sorted(ops.items())),
                                "none": sorted(o for o in ops if kinds[o] == "none")}) + "\n")
    print(f"| op | exporter at opset {args.opset} | models using it |")
    print("|---|---|---|")
    order = ("none", "ours, torch has none", "ours over torch's", "torch")
    for op in sorted(users, key=lambda o: (order.index(kinds[o]), -users[o], o)):
        if kinds[op] != "torch":
            print(f"| `{op}` | {kinds[op]} | {users[op]} |")
    totals = collections.Counter(kinds.values())
    blocked = sum(1 for ops in per_model.values() if any(kinds[o] == "none" for o in ops))
    ours = totals["ours, torch has none"] + totals["ours over torch's"]
    print(f"\n{len(per_model)} models, {len(users)} distinct aten ops: "
          f"{totals['torch']} torch's only, {ours} ours ({totals['ours, torch has none']} "
          f"where torch has none), {totals['none']} with no symbolic; {blocked} models use "
          f"an op with none.")


if __name__ == "__main__":
    main()
