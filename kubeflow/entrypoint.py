"""The command every Kubeflow task of the compiled spec runs: a TFX container module
(the executor runner, or ExampleGen's driver) with ``s3://`` readable and a clean exit.

    python -m tfx_bridge.kubeflow.entrypoint \\
        tfx.orchestration.kubeflow.v2.container.kubeflow_v2_run_executor ARGS...

Stock TFX code (StatisticsGen, Evaluator, the driver's span lookup, the
executor runner's own artifact handling) reads ``s3://`` through
``tf.io.gfile``, which needs tensorflow-io registered in the process. When the
task's arguments name an ``s3://`` path this registers it (configured from the
AWS variables, :func:`tfx_bridge.storage.objectstore.enable_tfio`), runs the module as
``__main__``, and ends the process with the module's exit code without C++
teardown: tensorflow-io 0.37.1 aborts the exit of a process that used its S3
filesystem (tensorflow/io#2039), which Kubeflow would record as a failed task.
Without ``s3://`` it only runs the module.
"""
from __future__ import annotations

import runpy
import sys
import traceback
from typing import List, Optional

from tfx_bridge.storage import objectstore


def main(argv: Optional[List[str]] = None) -> None:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv:
        print("usage: python -m tfx_bridge.kubeflow.entrypoint MODULE [ARGS...]",
              file=sys.stderr)
        sys.exit(2)
    module, args = argv[0], argv[1:]
    s3 = any("s3://" in a for a in args)
    if s3:
        objectstore.enable_tfio()
    sys.argv = [module, *args]
    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if not isinstance(e.code, (int, type(None))):
            print(e.code, file=sys.stderr)
    except BaseException:  # noqa: BLE001  (printed as Python would, then the exit code 1)
        traceback.print_exc()
        code = 1
    if s3:
        objectstore.exit_now(code)
    sys.exit(code)


if __name__ == "__main__":
    main()
