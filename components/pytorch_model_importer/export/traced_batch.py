"""A TorchScript module torch itself cannot run at the export's batch size.

torch.jit.trace freezes what Python computed from its example (split sizes from
``.tolist()``, a list as long as the batch), so such a file runs only at the batch
it was traced with, and no export of it serves another: the import is refused
naming that cause, the batch sizes it runs at and the state_dict as the fix.
"""
from __future__ import annotations

from typing import Optional, Sequence

from tfx_bridge.components.pytorch_model_importer.signature import TensorSpec, make_inputs
from tfx_bridge.components.pytorch_model_importer.source import lazy_torch


def error_line(error: Exception) -> str:
    r"""A runtime's error as one line: its type and its last line (the TorchScript
    interpreter's and onnxruntime's messages end with the cause).

    >>> error_line(RuntimeError("in forward\nRuntimeError: shape '[1]' is invalid"))
    "RuntimeError: shape '[1]' is invalid"
    >>> error_line(ValueError("bad size"))
    'ValueError: bad size'
    """
    lines = [ln.strip() for ln in str(error).splitlines() if ln.strip()]
    last = lines[-1] if lines else ""
    # The TorchScript interpreter's last line already names the error's type.
    named = last.startswith(f"{type(error).__name__}: ")
    return (last if named else f"{type(error).__name__}: {last}")[:300]


def fails_in_torch(module, inputs: Sequence[TensorSpec], batch: int) -> Optional[str]:
    """For a TorchScript module torch itself cannot run at the export's batch size:
    the message naming that cause and the batch sizes (of 1-8) it does run at; else None.

    torch.jit.trace freezes what Python computed from its example (split sizes from
    ``.tolist()``, a list as long as the batch), so such a file runs only at the batch
    it was traced with: no export of it serves another."""
    torch = lazy_torch()
    if not isinstance(module, torch.jit.ScriptModule):
        return None

    def error_at(b: int) -> Optional[str]:
        feeds = make_inputs(inputs, batch=b)
        try:
            with torch.no_grad():
                module(*[torch.from_numpy(feeds[s.name]) for s in inputs])
        except Exception as e:  # noqa: BLE001  (the cause is reported, not raised)
            return error_line(e)
        return None

    error = error_at(batch)
    if error is None:
        return None
    runs = [b for b in range(1, 9) if error_at(b) is None]
    return (f"torch itself cannot run this TorchScript module at batch {batch} ({error}); "
            + (f"it runs at batch {', '.join(map(str, runs))} of 1-8: "
               if runs else "it runs at no batch size of 1-8 either: ")
            + "torch.jit.trace froze values computed from its example batch (split sizes, "
            "a list as long as the batch) into the graph. Hand over the model as a "
            "state_dict with --module-class: the importer exports the Python module "
            "itself, at a batch size of its own.")
