"""Moved to :mod:`tfx_bridge.torch.training`; this name keeps working, with a
DeprecationWarning, until tfx-bridge 0.2."""
import warnings

from tfx_bridge.torch.training import *  # noqa: F401,F403 (the old public names)

warnings.warn("tfx_bridge.torch_training moved to tfx_bridge.torch.training; the old name goes in "
              "tfx-bridge 0.2: import from tfx_bridge.torch.training", DeprecationWarning,
              stacklevel=2)
