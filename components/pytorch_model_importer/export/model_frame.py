"""Where in the model's own code an export failed, and whether torch fails there too.

torch.onnx.export runs the model's forward to trace it, so an error the model's
Python raises (a reshape to sizes computed from the sample, an assert on a shape)
surfaces as an export failure. The traceback still holds the model's frames: the
innermost one outside torch is the line, and the innermost ``self`` that is one of
the model's modules names the module. Running the same sample eagerly tells the
two causes apart: the model rejects that input (torch raises it too), or the line
behaves otherwise only under tracing.
"""
from __future__ import annotations

import os
import traceback
from typing import Optional

from tfx_bridge.components.pytorch_model_importer.source import lazy_torch

# The importer's own folder: its frames (the export's call) are not the model's.
_IMPORTER = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


def where(error: BaseException, module) -> Optional[str]:
    """"at file:line in fn(), PyTorch module 'a.b' (Class)" for the innermost frame of
    the model's own code in ``error``'s traceback; None when it has none."""
    torch = lazy_torch()
    names = {id(m): name for name, m in module.named_modules()} \
        if isinstance(module, torch.nn.Module) else {}
    not_model = (_IMPORTER, os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)
    line, owner = None, None
    for frame, lineno in traceback.walk_tb(error.__traceback__):
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(not_model) and not frame.f_code.co_filename.startswith("<"):
            line = f"at {os.path.basename(path)}:{lineno} in {frame.f_code.co_name}()"
        this = frame.f_locals.get("self")
        if this is not None and id(this) in names:
            owner = f"PyTorch module {names[id(this)] or '(root)'!r} ({type(this).__name__})"
    parts = [p for p in (line, owner) if p]
    return ", ".join(parts) if line else None


def runs_eagerly(module, args) -> Optional[str]:
    """None when ``module`` runs ``args`` eagerly; else its error, one line."""
    torch = lazy_torch()
    try:
        with torch.no_grad():
            module(*args)
    except Exception as e:  # noqa: BLE001  (the model's own failure is the answer)
        text = next((ln.strip() for ln in str(e).splitlines() if ln.strip()), "")
        return f"{type(e).__name__}: {text[:200]}"
    return None
