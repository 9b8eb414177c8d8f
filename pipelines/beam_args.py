"""Moved to :mod:`tfx_bridge.beam` (every Beam option in one place); this name keeps
working, with a DeprecationWarning, until tfx-bridge 0.2."""
import warnings

from tfx_bridge.beam import direct_runner_args, object_store_args, sdk_image  # noqa: F401

warnings.warn("tfx_bridge.pipelines.beam_args moved to tfx_bridge.beam; the old name goes in "
              "tfx-bridge 0.2: import from tfx_bridge.beam", DeprecationWarning, stacklevel=2)
