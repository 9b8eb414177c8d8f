"""tfx-bridge: TFX components that carry PyTorch models into TF Serving.

The repository keeps the user's layout (components/, pipelines/, kubeflow/, cli/,
schemas/ at the top); package_dir maps them under the import name
``tfx_bridge`` so executor class paths compiled into Kubeflow specs are
unambiguous (``tfx_bridge.components.parquet_example_gen.executor.Executor``).
"""
import os

from setuptools import setup

_HERE = os.path.dirname(os.path.abspath(__file__))

_TOP = {
    "tfx_bridge": "tfx_bridge",
    "tfx_bridge.components": "components",
    "tfx_bridge.pipelines": "pipelines",
    "tfx_bridge.kubeflow": "kubeflow",
    "tfx_bridge.schemas": "schemas",
    "tfx_bridge.cli": "cli",
    "tfx_bridge.onnx_tf": "onnx_tf",
}


def _packages():
    """Every folder with an __init__.py under the mapped roots."""
    packages = []
    package_dir = {}
    for name, root in _TOP.items():
        for dirpath, _, files in os.walk(os.path.join(_HERE, root)):
            if "__init__.py" not in files or "__pycache__" in dirpath:
                continue
            rel = os.path.relpath(dirpath, os.path.join(_HERE, root))
            sub = name if rel == "." else name + "." + rel.replace(os.sep, ".")
            packages.append(sub)
            package_dir[sub] = os.path.relpath(dirpath, _HERE)
    return packages, package_dir


_PACKAGES, _PACKAGE_DIR = _packages()

setup(
    name="tfx-bridge",
    version="0.1.0",
    description="TFX components: Parquet ingestion, dtype contracts, "
    "PyTorch->SavedModel import, TF-TRT optimization, TF Serving pushes.",
    long_description=open(os.path.join(_HERE, "README.md"), encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10,<3.11",
    packages=_PACKAGES,
    package_dir=_PACKAGE_DIR,
    package_data={"tfx_bridge.schemas": ["*.pbtxt", "*.yaml", "*.json"]},
    include_package_data=True,
    install_requires=[
        "tfx>=1.16,<1.17",
        "tensorflow>=2.16,<2.17",
        "tfx-bsl>=1.16,<1.17",
        "tensorflow-data-validation>=1.16,<1.17",
        "tensorflow-serving-api>=2.16,<2.17",
        "apache-beam[gcp]>=2.61,<2.68",
        "dill>=0.3.1.1,<0.3.2",
        "pyarrow>=10,<11",
        "numpy>=1.22,<2",
        "protobuf>=3.20.3,<4",
        "psutil>=5",
        "google-crc32c>=1.5",  # TFRecord checksums (tfx_bridge.artifacts.tfrecord)
        "pyyaml>=5",
        "matplotlib>=3.7,<3.11",
    ],
    extras_require={
        # The torch/onnx side (PyTorchModelImporter): heavy, so optional.
        "onnx": [
            "torch>=2.2,<2.6",
            "onnx>=1.14,<1.18",
            "onnxruntime>=1.16,<1.20",
            "onnx2tf==1.24.1",
            "onnxsim==0.4.36",
            "onnx-graphsurgeon==0.5.2",
            "sng4onnx==1.0.5",
            "sne4onnx==1.0.15",
            "tf-keras>=2.16,<2.17",
        ],
        # Test-only: the importer's zoo of mainstream architectures (random weights,
        # nothing downloaded).
        "zoo": ["torchvision>=0.20,<0.21", "transformers>=4.40,<4.47"],
        # Compiling pipelines for Kubeflow Pipelines (KubeflowV2DagRunner).
        "kfp": ["kfp>=2.5,<2.6"],
        # s3:// paths. boto3 is what tfx-bridge's own cores use; Beam's s3
        # filesystem ([aws]) serves Beam pipelines; tensorflow-io registers s3://
        # with tf.io.gfile for stock TFX components in the same process.
        "s3": ["boto3>=1.34", "apache-beam[aws]", "tensorflow-io==0.37.1"],
        # moto's server mode: the S3-compatible server the tests start on 127.0.0.1.
        "dev": ["pytest>=7", "pytest-xdist>=3.5", "ruff>=0.4", "moto[server]>=5.1"],
    },
    entry_points={"console_scripts": ["tfx-bridge=tfx_bridge.cli.main:entry"]},
)
