"""The demo's PyTorchTrainer module: ``run_fn`` trains ``demo_models.CtrTransformed``
on Transform's materialised examples, in PyTorch, inside the pipeline.

The contract a ``run_fn`` keeps (README, "Training in the pipeline"):

- read ``fn_args.train_files`` / ``eval_files`` with
  :class:`tfx_bridge.torch.examples.ExamplesDataset` (features from Transform's
  ``transformed_metadata`` schema);
- when ``fn_args.base_model`` is set (the latest blessed model's weights),
  warm-start from it;
- train with a fixed seed (``custom_config["seed"]``) for
  ``fn_args.train_steps`` steps: the same data and seed give the same weights,
  so a rerun over unchanged data changes nothing;
- save the state_dict, the spec (class, kwargs, serving inputs named after
  transformed features, output names) and eval metrics to
  ``fn_args.serving_model_dir`` with :func:`tfx_bridge.torch.model.save`.

    PyTorchTrainer(examples=transform.outputs["transformed_examples"],
                   transform_graph=transform.outputs["transform_graph"],
                   run_fn="tfx_bridge.pipelines.demo_trainer.run_fn",
                   train_args=tfx.proto.TrainArgs(num_steps=200))
"""
from __future__ import annotations

DEFAULTS = {"seed": 0, "batch_size": 64, "learning_rate": 0.003, "weight_decay": 0.01,
            "item_dim": 2}
MODULE_CLASS = "tfx_bridge.pipelines.demo_models:CtrTransformed"
OUTPUTS = ["score", "experts"]


def serving_inputs(countries: int):
    """The model's inputs, named after Transform's output features."""
    from tfx_bridge.pipelines import demo_data

    return [f"item_id:int64:-1:0..{demo_data.NUM_ITEMS - 1}", "hour:int64:-1:0..23",
            f"country_id:int64:-1:0..{countries - 1}", "price_z:float32:-1:-3..3",
            "user_ctr:float32:-1:0..0.5", "item_seen:int64:-1:0..1",
            "is_returning:int64:-1:0..1"]


def run_fn(fn_args) -> None:
    import tensorflow_transform as tft
    import torch

    from tfx_bridge.pipelines import demo_preprocessing as prep
    from tfx_bridge.pipelines.demo_models import CtrTransformed
    from tfx_bridge.torch import distributed
    from tfx_bridge.torch import model as torch_model
    from tfx_bridge.torch import training as torch_training
    from tfx_bridge.torch.examples import ExamplesDataset, features_from_schema

    config = {**DEFAULTS, **(fn_args.custom_config or {})}
    torch_training.seed_everything(int(config["seed"]))
    transform = tft.TFTransformOutput(fn_args.transform_output)
    countries = (transform.vocabulary_size_by_name(prep.COUNTRY_VOCABULARY)
                 + prep.COUNTRY_OOV_BUCKETS)
    features = features_from_schema(transform.transformed_metadata.schema,
                                    {prep.LABEL: "float32"})
    train = ExamplesDataset.from_patterns(fn_args.train_files, features,
                                          batch_size=int(config["batch_size"]),
                                          shuffle=True, seed=int(config["seed"]),
                                          shard=distributed.world())  # this rank's part
    evaluation = ExamplesDataset.from_patterns(fn_args.eval_files, features, batch_size=1024)

    kwargs = {"countries": countries, "dim": int(config["item_dim"])}
    model = CtrTransformed(**kwargs)
    if fn_args.base_model:
        torch_model.warm_start(model, fn_args.base_model)
    names = list(prep.MODEL_FEATURES)
    bce = torch.nn.BCELoss()

    def loss_fn(m, batch):
        score, _ = m(*(batch[n] for n in names))
        return bce(score.reshape(-1), batch[prep.LABEL])

    optimizer = torch.optim.AdamW(model.parameters(), lr=float(config["learning_rate"]),
                                  weight_decay=float(config["weight_decay"]))
    steps = fn_args.train_steps
    if steps is None:  # TrainArgs without num_steps: the pipeline's default
        from tfx_bridge.pipelines.config import PipelineConfig

        steps = PipelineConfig.defaults().train_steps
    fitted = torch_training.fit(model, train, loss_fn, optimizer, epochs=10_000,
                                max_steps=steps)
    scores, labels = torch_training.predict(
        model, evaluation, lambda m, b: m(*(b[n] for n in names))[0], prep.LABEL)
    metrics = {"eval_loss": torch_training.binary_log_loss(scores, labels),
               "eval_examples": float(len(labels))}
    if fitted["epoch_records"] is not None:  # all ranks' shards: the split, read once
        metrics["train_records_per_epoch"] = float(fitted["epoch_records"])
    auc = torch_training.binary_auc(scores, labels)
    if auc is not None:
        metrics["eval_auc"] = auc
    spec = torch_model.ModelSpec(MODULE_CLASS, kwargs, serving_inputs(countries), OUTPUTS)
    torch_model.save(fn_args.serving_model_dir, model, spec, metrics)
