"""Shared fixtures. Expensive ones (TFX pipeline runs) are session-scoped."""
from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import pytest  # noqa: E402

_HOLD_RUN_LOCK = ("import sys, time\n"
                  "from tfx_bridge.runlock import run_lock\n"
                  "with run_lock(sys.argv[1], command='tfx-bridge run (the 02:00 cron)',\n"
                  "              name=sys.argv[2]):\n"
                  "    print('held', flush=True)\n"
                  "    time.sleep(600)\n")


@pytest.fixture
def hold_run_lock():
    """``hold(folder, lock_file_name)``: another process holds that run lock (its
    command: "tfx-bridge run (the 02:00 cron)") until the test ends; returns it."""
    import subprocess
    import sys

    procs = []

    def hold(folder, name):
        proc = subprocess.Popen([sys.executable, "-c", _HOLD_RUN_LOCK, str(folder), name],
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait()

# Files that each take a minute or more, started first: under `--dist loadfile
# --no-loadscope-reorder` (make test) xdist hands out files in collection order;
# by default it orders them by test count, which puts the one-test pipeline
# files last and leaves one worker running one alone at the end.
LONGEST_FIRST = (
    "pipelines/test_lifecycle.py",
    "kubeflow/test_local_run.py",
    "cli/test_cli.py",
    "components/serving_pusher/test_serving.py",
    "components/serving_pusher/test_serving_checks.py",
    "components/serving_pusher/test_serving_refusals.py",
    "cli/test_cli_run_s3.py",
    "pipelines/test_training.py",
    "components/pytorch_model_importer/test_zoo.py",
    "components/pytorch_model_importer/test_zoo_attention.py",
    "components/pytorch_model_importer/test_handover_forms.py",
    "components/pytorch_model_importer/test_component.py",
    "components/pytorch_model_importer/test_convert.py",
)


def pytest_configure(config):
    """pytest names the running test and phase in ``os.environ["PYTEST_CURRENT_TEST"]``,
    rewritten at every setup, call and teardown. Warm child workers are kept per
    environment (``tfx_bridge.child``: what a worker imported TensorFlow with), so that
    variable alone would start a new worker, a TensorFlow import, for every phase of
    every test that loads a model: the suite's largest cost. Nothing here reads it."""
    import _pytest.runner

    _pytest.runner._update_current_test_var = lambda item, when: None


def pytest_collection_modifyitems(session, config, items):
    def rank(item) -> int:
        path = str(item.fspath).replace(os.sep, "/")
        for i, suffix in enumerate(LONGEST_FIRST):
            if path.endswith("tests/" + suffix):
                return i
        return len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the order inside each file is kept


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory):
    """The data pipeline (ParquetExampleGen -> StatisticsGen -> SchemaGen ->
    SchemaGuard with the demo contract) run once under LocalDagRunner over two
    demo span folders."""
    from tfx_bridge.pipelines import demo_data, runner

    workdir = tmp_path_factory.mktemp("demo_run")
    data_root = str(workdir / "data")
    demo_data.write_demo_spans(data_root, spans=[1, 2], rows_per_span=600)
    result = runner.run_data_demo(str(workdir), data_root)
    result["workdir"] = str(workdir)
    result["data_root"] = data_root
    return result


def demo_eval_records(examples_uri: str):
    """The eval split of a demo Examples artifact as numpy columns (plus the label)."""
    import glob

    import numpy as np
    import tensorflow as tf

    files = sorted(glob.glob(os.path.join(examples_uri, "Split-eval", "*.gz")))
    columns = {"item_id": [], "hour": [], "price": [], "user_ctr": [], "clicked": []}
    for record in tf.data.TFRecordDataset(files, compression_type="GZIP"):
        feature = tf.train.Example.FromString(record.numpy()).features.feature
        for name in columns:
            kind = "float_list" if name in ("price", "user_ctr") else "int64_list"
            columns[name].append(getattr(feature[name], kind).value[0])
    return {"item_id": np.array(columns["item_id"], np.int32),
            "hour": np.array(columns["hour"], np.int32),
            "price": np.array(columns["price"], np.float32),
            "user_ctr": np.array(columns["user_ctr"], np.float32),
            "clicked": np.array(columns["clicked"], np.int64)}


def torch_ctr_scores(weights: str, rows):
    """What the research team's CtrMoE computes on ``rows``: (scores, experts)."""
    import torch

    from tfx_bridge.pipelines import demo_models

    model = demo_models.CtrMoE()
    model.load_state_dict(torch.load(weights, map_location="cpu", weights_only=True))
    with torch.no_grad():
        score, experts = model.eval()(*[torch.from_numpy(rows[k]) for k in
                                        ("item_id", "hour", "price", "user_ctr")])
    return score.numpy(), experts.numpy()


def serving_default_feeds(signature, record: bytes) -> dict:
    """A raw tf.Example's features as ``serving_default`` takes them (a batch of one,
    strings as strings, lists as rows)."""
    import tensorflow as tf

    feature = tf.train.Example.FromString(record).features.feature
    feeds = {}
    for name, spec in signature.structured_input_signature[1].items():
        f = feature[name]
        values = list(getattr(f, f.WhichOneof("kind")).value)
        feeds[name] = tf.constant([values] if spec.shape.rank == 2 else values, spec.dtype)
    return feeds


@pytest.fixture
def raw_feeds():
    """:func:`serving_default_feeds`, for tests that feed a Transform-wrapped model."""
    return serving_default_feeds


@pytest.fixture
def ctr_reference():
    """(demo_eval_records, torch_ctr_scores): what a test can know about a demo run."""
    return demo_eval_records, torch_ctr_scores


class ReferenceHandover:
    """How the research team hands over each reference model, written to a folder."""

    kinds = {"mlp": "state_dict", "cnn": "torchscript", "transformer": "torchscript",
             "moe": "state_dict", "embedding": "onnx"}

    def __call__(self, name: str, folder: str):
        import torch

        from tfx_bridge.components.pytorch_model_importer import signature
        from tfx_bridge.components.pytorch_model_importer.source import ModelSource
        from tfx_bridge.pipelines import demo_models

        cls, kwargs, inputs, _ = demo_models.REFERENCE_MODELS[name]
        model = demo_models.build(name)
        kind = self.kinds[name]
        specs = signature.parse_input_specs(inputs)
        sample = tuple(torch.from_numpy(v) for v in signature.make_inputs(specs, 3).values())
        if kind == "state_dict":
            path = os.path.join(folder, f"{name}.pt")
            torch.save(model.state_dict(), path)
            return ModelSource(
                kind, path, f"tfx_bridge.pipelines.demo_models:{cls.__name__}", kwargs)
        if kind == "torchscript":
            path = os.path.join(folder, f"{name}.torchscript")
            torch.jit.trace(model, sample).save(path)
            return ModelSource(kind, path)
        path = os.path.join(folder, f"{name}.onnx")
        torch.onnx.export(model, sample, path, input_names=[s.name for s in specs],
                          dynamic_axes={s.name: {0: "b"} for s in specs}, opset_version=17)
        return ModelSource(kind, path)


class _ReferenceImports:
    """name -> ImportResult, each reference model imported on first use, once per
    session (a test worker converts only the models its tests ask for)."""

    def __init__(self, tmp_path_factory):
        self._factory = tmp_path_factory
        self._done = {}

    def __getitem__(self, name: str):
        if name not in self._done:
            from tfx_bridge.components.pytorch_model_importer import convert
            from tfx_bridge.components.pytorch_model_importer.config import ImporterConfig
            from tfx_bridge.pipelines import demo_models

            _, _, inputs, outputs = demo_models.REFERENCE_MODELS[name]
            folder = str(self._factory.mktemp(f"ref_{name}"))
            config = ImporterConfig.of_source(ReferenceHandover()(name, folder), inputs, outputs)
            self._done[name] = convert.import_model(config, os.path.join(folder, "model"))
        return self._done[name]


@pytest.fixture(scope="session")
def reference_imports(tmp_path_factory):
    """Every reference model imported once per session (importer and optimizer tests
    share them): name -> ImportResult; the Model folder is its serving_dir's parent."""
    pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")
    return _ReferenceImports(tmp_path_factory)


@pytest.fixture(scope="session")
def reference_handover():
    return ReferenceHandover()


def _cli_in_child(*args, env=None, timeout=300):
    """``tfx-bridge ARGS`` in a fresh Python process: a hang or a crash shows as a
    timeout or a signal, not as a stuck or dead test run."""
    import subprocess
    import sys

    code = f"from tfx_bridge import cli; cli.entry({list(args)!r})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=timeout)


@pytest.fixture
def cli_in_child():
    return _cli_in_child


def _atomic_conditional_puts() -> None:
    """S3 makes a conditional PutObject (If-None-Match / If-Match) atomic; moto's
    server checks, then writes, on concurrent request threads, so under load two
    creators of one key could both succeed. One put at a time, as S3 behaves."""
    import threading

    from moto.s3.responses import S3Response

    if getattr(S3Response.put_object, "_atomic", False):
        return
    lock, put = threading.Lock(), S3Response.put_object

    def put_object(self, *args, **kwargs):
        with lock:
            return put(self, *args, **kwargs)

    put_object._atomic = True
    S3Response.put_object = put_object


@pytest.fixture(scope="session")
def s3_server():
    """An S3-compatible server (moto's server mode) on 127.0.0.1 for the session,
    with the standard AWS variables pointing at it (what users set)."""
    moto_server = pytest.importorskip("moto.server", reason="needs the [dev] extra (moto)")
    import logging

    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # a line per request otherwise
    _atomic_conditional_puts()
    server = moto_server.ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {"AWS_ACCESS_KEY_ID": "test-key", "AWS_SECRET_ACCESS_KEY": "test-secret",
           "AWS_REGION": "us-east-1", "AWS_ENDPOINT_URL": f"http://{host}:{port}"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield env
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        server.stop()


@pytest.fixture
def s3_bucket(s3_server, request):
    """A fresh bucket; yields its ``s3://name`` root."""
    import re

    import boto3

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    name = f"t-{name}-{os.getpid()}"[:63]
    boto3.client("s3", endpoint_url=s3_server["AWS_ENDPOINT_URL"]).create_bucket(Bucket=name)
    return f"s3://{name}"


def _save_scaled_model(path: str, scale: float = 2.0, input_name: str = "x",
                       dtype: str = "float32", asset_mb: int = 0) -> str:
    """A tiny SavedModel: serving_default(x: float32[None, 4]) -> score = sum(x) * scale;
    ``input_name`` and ``dtype`` change its contract, ``asset_mb`` adds an asset that big."""
    import numpy as np
    import tensorflow as tf

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(scale)

        @tf.function(input_signature=[tf.TensorSpec([None, 4], dtype, name=input_name)])
        def serve(self, x):
            return {"score": tf.reduce_sum(tf.cast(x, tf.float32), axis=1) * self.w}

    m = M()
    tf.saved_model.save(m, path, signatures={"serving_default": m.serve})
    if asset_mb:
        with open(os.path.join(path, "assets", "blob.bin"), "wb") as f:
            f.write(np.random.default_rng(0).bytes(asset_mb << 20))
    return path


@pytest.fixture(scope="session")
def scaled_saved_model():
    """Makes tiny SavedModels (pushes, copies, contract changes): _save_scaled_model."""
    return _save_scaled_model
