"""Moved to :mod:`tfx_bridge.torch.examples`; this name keeps working, with a
DeprecationWarning, until tfx-bridge 0.2."""
import warnings

from tfx_bridge.torch.examples import *  # noqa: F401,F403 (the old public names)

warnings.warn("tfx_bridge.torch_examples moved to tfx_bridge.torch.examples; the old name goes in "
              "tfx-bridge 0.2: import from tfx_bridge.torch.examples", DeprecationWarning,
              stacklevel=2)
