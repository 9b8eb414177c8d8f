"""Op handlers, one module per family; importing this package registers them all."""
from tfx_bridge.components.pytorch_model_importer.to_tf.core import add_fixes  # noqa: E402
from tfx_bridge.components.pytorch_model_importer.to_tf.ops import (  # noqa: F401
    control,
    conv,
    elementwise,
    linalg,
    loss,
    norm,
    pool,
    resample,
    tensor,
)

add_fixes(control.OP_FIXES)
