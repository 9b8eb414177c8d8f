"""Op handlers, one module per family; importing this package registers them all."""
from tfx_bridge.onnx_tf.ops import (  # noqa: F401
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
from tfx_bridge.onnx_tf.registry import add_fixes  # noqa: E402

add_fixes(control.OP_FIXES)
