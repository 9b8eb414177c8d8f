"""tfx-bridge: custom TFX components that carry PyTorch models into TF Serving.

Subpackages:
  tfx_bridge.components  ParquetExampleGen and the other components.
  tfx_bridge.pipelines   demo data, pipelines and runners.
  tfx_bridge.kubeflow    Kubeflow Pipelines compile entry.
  tfx_bridge.cli         the ``tfx-bridge`` console script.
"""

__version__ = "0.1.0"
