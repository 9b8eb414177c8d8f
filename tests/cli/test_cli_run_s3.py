"""The whole pipeline under LocalDagRunner with every root on s3://, through the CLI
(`tfx-bridge run`), against an S3-compatible server on 127.0.0.1."""
from __future__ import annotations

import json
import os

import pytest

torch = pytest.importorskip("torch", reason="needs the [onnx] extra (torch)")

import tensorflow as tf  # noqa: E402
from google.protobuf import text_format  # noqa: E402
from tensorflow_serving.config import model_server_config_pb2  # noqa: E402

from tfx_bridge.artifacts import tfrecord  # noqa: E402
from tfx_bridge.pipelines import demo_data, train_demo_model  # noqa: E402
from tfx_bridge.storage import fs  # noqa: E402

pytestmark = pytest.mark.s3


@pytest.mark.slow
def test_cli_run_with_every_root_on_s3_pushes_a_loadable_version(tmp_path, s3_bucket,
                                                                 s3_server, cli_in_child):
    data = fs.join(s3_bucket, "data")
    spans = demo_data.write_demo_spans(data, spans=[1, 2], rows_per_span=300)
    research = fs.join(s3_bucket, "research", "span-2")
    train_demo_model.train(spans[-1], research, steps=60)
    root, serving_base = fs.join(s3_bucket, "root"), fs.join(s3_bucket, "serving")
    env = {k: v for k, v in os.environ.items() if not k.startswith("S3_")}
    env.update(s3_server)  # only the standard AWS variables
    work = str(tmp_path / "work")
    proc = cli_in_child("run", "--data-root", data, "--model-source", research,
                        "--serving-base-path", serving_base, "--workdir", work,
                        "--pipeline-root", root, "--optimizer-iterations", "10", "--json",
                        "--quiet", env=env, timeout=900)
    # Exit 0, not 134: tensorflow-io was used (stock components on s3) and the CLI
    # ends without the teardown that aborts.
    assert proc.returncode == 0, proc.stderr[-3000:] + open(
        os.path.join(work, "pipeline.log")).read()[-3000:]
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["span"] == 2 and summary["schema_guard"]["blessed"] == 1
    assert summary["pushed"] and summary["pushed_version"] == 1, summary["push_reason"]
    assert summary["pushed_path"] == fs.join(serving_base, "ctr", "1")
    assert set(summary["prediction"]) >= {"score"}
    # Every artifact went to the s3 pipeline root; only MLMD, the log and the run lock
    # (released: empty) are local.
    assert sorted(os.listdir(work)) == [".tfx-bridge-run.lock", "metadata.sqlite",
                                        "pipeline.log"]
    assert os.path.getsize(os.path.join(work, ".tfx-bridge-run.lock")) == 0
    produced = fs.listdir(fs.join(root))
    assert {"ParquetExampleGen", "StatisticsGen", "Evaluator", "ServingPusher"} <= set(
        produced), produced
    # The pushed version, read back from s3, answers a serialized eval record.
    config = text_format.Parse(fs.read_text(fs.join(serving_base, "models.config")),
                               model_server_config_pb2.ModelServerConfig())
    assert dict(config.model_config_list.config[0].version_labels) == {"stable": 1}
    examples = fs.glob(fs.join(root, "ParquetExampleGen", "examples", "*", "Split-eval",
                               "*.gz"))
    record = next(tfrecord.read_batches(examples[0], batch_size=1, limit=1)).records[0]
    with fs.local_copy(summary["pushed_path"]) as local:
        model = tf.saved_model.load(local)
        out = model.signatures["serving_tf_example"](examples=tf.reshape(record, [1]))
    assert 0.0 <= float(out["score"].numpy().ravel()[0]) <= 1.0
