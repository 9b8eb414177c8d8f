"""What the catalog's references can check: torch's own float32 error against float64
(the tolerance's floor; the unstable-reference figures) and whether a traced
hand-over is the model at every verification batch size (catalog_run.py)."""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from tfx_bridge.components.pytorch_model_importer import signature
from tfx_bridge.components.pytorch_model_importer.export.traced_batch import error_line
from tfx_bridge.components.pytorch_model_importer.verify import run_torch

BATCHES = (1, 7, 32)


def torch_self_drift(module, specs, batch: int = 7):
    """Max |torch(batch) - torch(row by row)| over the first output, or None."""
    try:
        feeds = signature.make_inputs(specs, batch)
        args = [torch.from_numpy(feeds[s.name]) for s in specs]
        with torch.no_grad():
            whole = module(*args)
            whole = whole[0] if isinstance(whole, (tuple, list)) else whole
            rows = []
            for i in range(batch):
                one = module(*[a[i:i + 1] for a in args])
                rows.append(one[0] if isinstance(one, (tuple, list)) else one)
        return float(np.max(np.abs(whole.numpy() - torch.cat(rows).numpy())))
    except Exception:  # noqa: BLE001 (a model that cannot run row by row: no figure)
        return None


def float64_errors(module, specs, serving_dir: str, outputs, fp32, batch: int = 32) -> dict:
    """Max abs error against torch run in float64, of torch in float32 (``fp32``, the
    first output at ``batch``: ``torch_fp32_error``) and of the SavedModel
    (``savedmodel_fp64_error``); {} when the model does not run in float64."""
    import copy

    import tensorflow as tf

    feeds = signature.make_inputs(specs, batch)
    args = [torch.from_numpy(feeds[s.name]) for s in specs]
    try:
        with torch.no_grad():
            wide = copy.deepcopy(module).double()
            fp64 = wide(*[a.double() if a.is_floating_point() else a for a in args])
        fp64 = (fp64[0] if isinstance(fp64, (tuple, list)) else fp64).numpy()
        serve = tf.saved_model.load(serving_dir).signatures["serving_default"]
        ours = serve(**{k: tf.constant(v) for k, v in feeds.items()})[outputs[0]].numpy()
    except Exception:  # noqa: BLE001 (no float64 figure for this model)
        return {}
    return {"torch_fp32_error": float(np.max(np.abs(fp32 - fp64))),
            "savedmodel_fp64_error": float(np.max(np.abs(ours.astype(np.float64) - fp64)))}


# The float32 reference's own error sets the tolerance's floor only up to this fraction
# of the output's scale: beyond it the model is recorded as an unstable reference.
FLOOR_CAP = 1e-2


def float32_floor(module, specs) -> Optional[float]:
    """Max |torch in float32 - torch in float64| over every float output, at each
    verification batch size on the verification's own inputs: the precision to which a
    float32 reference can check any float32 converter. None where the model does not run
    in float64 or its float32 outputs are not repeatable (a random mask drawn per call)."""
    import copy

    try:
        wide = copy.deepcopy(module).double()
        worst = 0.0
        for b in BATCHES:
            feeds = signature.make_inputs(specs, b)
            wide_feeds = {k: v.astype(np.float64) if v.dtype == np.float32 else v
                          for k, v in feeds.items()}
            narrow, again = run_torch(module, feeds, specs), run_torch(module, feeds, specs)
            exact = run_torch(wide, wide_feeds, specs)
            for x, y, z in zip(narrow, again, exact, strict=True):
                if not np.issubdtype(x.dtype, np.floating):
                    continue
                if not np.array_equal(x, y, equal_nan=True):
                    return None
                if x.size:
                    worst = max(worst, float(np.max(np.abs(x.astype(np.float64) - z))))
    except Exception:  # noqa: BLE001 (no float64 run: the tolerance keeps its default)
        return None
    return worst if np.isfinite(worst) else None


# The batch catalog.hand_over traces and exports at.
HANDOVER_BATCH = 3


def batch_bound(source, specs) -> Optional[str]:
    """Why a traced hand-over (TorchScript, ONNX) is only the model at the batch it was
    traced at: its own runtime (torch, onnxruntime) runs it at HANDOVER_BATCH and fails
    at a verification batch size (a trace freezes what Python computed from its
    example: split sizes, a list as long as the batch). None otherwise, and where the
    runtime fails at the traced batch too (its own limitation, the importer's row)."""
    if source.kind not in ("torchscript", "onnx"):
        return None
    runtime = "torch" if source.kind == "torchscript" else "onnxruntime"
    try:
        if source.kind == "torchscript":
            module = torch.jit.load(source.path).eval()

            def run(feeds):
                return run_torch(module, feeds, specs)
        else:
            import onnxruntime as ort

            session = ort.InferenceSession(source.path, providers=["CPUExecutionProvider"])
            names = {i.name for i in session.get_inputs()}

            def run(feeds):
                return session.run(None, {k: v for k, v in feeds.items() if k in names})
    except Exception:  # noqa: BLE001 (a file its runtime cannot load: the importer's row)
        return None

    def error_at(batch: int) -> Optional[str]:
        try:
            run(signature.make_inputs(specs, batch))
        except Exception as e:  # noqa: BLE001 (the row records it)
            return error_line(e)
        return None

    if error_at(HANDOVER_BATCH) is not None:
        return None
    for batch in BATCHES:
        error = error_at(batch)
        if error is not None:
            return (f"the traced {source.kind} runs in {runtime} at batch {HANDOVER_BATCH} "
                    f"(its example's) but fails at batch {batch}: {error}: the trace froze "
                    "values of its example batch, so it is not the model at other sizes")
    return None
