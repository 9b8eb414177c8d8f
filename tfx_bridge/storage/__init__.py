"""Where bytes live: every artifact or data path may be a URI.

- ``fs``: the filesystem API every core uses (local paths, ``s3://`` through
  boto3, ``gs://`` through tf.io.gfile), ``staged_locally`` for
  tools that need local files, conditional writes.
- ``s3``: the boto3 backend (ranged reads, ``If-None-Match`` / ``If-Match``).
- ``objectstore``: the AWS variables, their mapping onto Beam's ``--s3_*``
  options and tensorflow-io's, ``enable_tfio`` and ``exit_now``.
- ``names``: the one rule for user strings that become folder names, and
  ``child(root, ...)``, through which every write and delete under a root goes.
- ``folders``: symlink and special-file checks of local folders.
- ``staging``: the CLI's ``--output``, swapped in only when a run succeeds.
"""
