"""Scheduled retraining on Kubeflow Pipelines: a recurring run of the compiled spec.

TFX has no scheduler; KFP does. Each run resolves the newest span
(ParquetExampleGen's ``span-{SPAN}`` pattern), imports the research team's
latest model, and pushes only when every gate is blessed; an unchanged span
and model are cached, so a run with no new data pushes nothing.

    python -m tfx_bridge.kubeflow.recurring_run --host https://kfp.example.com \\
        --package pipeline.json --cron "0 0 3 * * *" --experiment tfx-bridge

The cron has six fields (seconds first), as KFP's scheduler reads it.
"""
from __future__ import annotations

import argparse

DEFAULT_CRON = "0 0 3 * * *"  # every day at 03:00


def create_recurring_run(host: str, package_path: str, cron: str = DEFAULT_CRON,
                         experiment: str = "tfx-bridge", job_name: str = "tfx-bridge-daily",
                         max_concurrency: int = 1):
    """Registers the schedule; ``max_concurrency=1`` keeps runs from overlapping."""
    import kfp

    client = kfp.Client(host=host)
    exp = client.create_experiment(name=experiment)
    return client.create_recurring_run(
        experiment_id=exp.experiment_id, job_name=job_name, cron_expression=cron,
        max_concurrency=max_concurrency, pipeline_package_path=package_path,
        enable_caching=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", required=True)
    parser.add_argument("--package", required=True, help="compiled pipeline JSON/YAML")
    parser.add_argument("--cron", default=DEFAULT_CRON)
    parser.add_argument("--experiment", default="tfx-bridge")
    args = parser.parse_args()
    print(create_recurring_run(args.host, args.package, args.cron, args.experiment))


if __name__ == "__main__":
    main()
