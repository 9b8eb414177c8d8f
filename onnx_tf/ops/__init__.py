"""Op handlers, one module per family; importing this package registers them all.

Modules ending in ``_util`` hold helpers shared by a family's modules, no handlers.
"""
from tfx_bridge.onnx_tf.ops import (  # noqa: F401
    activation,
    arithmetic,
    cast,
    control,
    conv,
    detection,
    expand_pad,
    gather_scatter,
    grid_sample,
    index,
    logic,
    loss,
    matmul,
    norm,
    pool,
    quantize,
    random_ops,
    recurrent,
    reduce,
    resample,
    scan,
    shape,
)
from tfx_bridge.onnx_tf.registry import add_fixes  # noqa: E402

add_fixes(control.OP_FIXES)
