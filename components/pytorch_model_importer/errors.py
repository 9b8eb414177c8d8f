"""Typed errors of PyTorchModelImporter."""
from tfx_bridge.errors import BridgeError, CheckFailed


class ImporterError(BridgeError):
    """Base class of the importer's configuration and input errors."""


class ImporterConfigError(ImporterError):
    """Bad configuration: input specs, output names, module class, opset. Fix and rerun."""


class ModelSourceError(ImporterError):
    """The model cannot be loaded or exported (missing file, wrong state_dict keys)."""


class ConversionError(ImporterError):
    """ONNX -> TF conversion failed; the message names the op, node and the change to make."""


class NotEquivalent(CheckFailed):
    """The converted SavedModel does not compute what the source computed.

    Raised after the Model artifact is written with blessed=0 and its report;
    the message holds the per-output error table.
    """


def missing_extra(package: str, error: ImportError) -> ImporterError:
    """A missing heavy dependency, naming the extra that brings it."""
    return ImporterError(
        f"{package} is not installed ({error}); PyTorchModelImporter needs the onnx extra: "
        "pip install 'tfx-bridge[onnx]' -c constraints.txt")
