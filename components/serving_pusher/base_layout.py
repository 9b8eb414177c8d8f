"""The serving base path's layout and defaults: file names, labels, targets, images.
"""
from __future__ import annotations

MODELS_CONFIG = "models.config"
BATCHING_FILE = "batching_parameters.txt"
MONITORING_FILE = "monitoring.config"
K8S_MANIFEST = "serving.k8s.yaml"
STATE_FILE = ".state.json"
LOCK_FILE = ".push.lock"
STAGING_PREFIX = ".staging-"
WARMUP_DIR = "assets.extra"
WARMUP_FILE = "tf_serving_warmup_requests"
# The push result inside the PushedModel folder.
PUSH_REPORT = "push.json"
MAX_WARMUP = 1000
DEFAULT_WARMUP_RECORDS = 10
DEFAULT_KEEP_VERSIONS = 5
LABELS = ("stable", "canary")
TARGETS = ("cpu", "gpu")
SERVING_IMAGE = {"cpu": "tensorflow/serving:2.16.1", "gpu": "tensorflow/serving:2.16.1-gpu"}
PROMETHEUS_PATH = "/monitoring/prometheus/metrics"
# Where the manifest mounts the base path inside the server container; models.config
# names every model's base_path under it.
SERVER_MOUNT = "/models"

# BatchingParameters defaults (TF Serving's batching guide): small batches and
# a short timeout on CPU, where latency dominates; bigger on GPU.
BATCHING_DEFAULTS = {
    "cpu": {"max_batch_size": 32, "batch_timeout_micros": 1000, "max_enqueued_batches": 100,
            "num_batch_threads": 4, "pad_variable_length_inputs": True},
    "gpu": {"max_batch_size": 128, "batch_timeout_micros": 2000, "max_enqueued_batches": 1000,
            "num_batch_threads": 8, "pad_variable_length_inputs": True},
}
BATCHING_FIELDS = {"max_batch_size", "batch_timeout_micros", "max_enqueued_batches",
                    "num_batch_threads", "pad_variable_length_inputs", "allowed_batch_sizes",
                    "thread_pool_name", "enable_large_batch_splitting",
                    "max_execution_batch_size"}
