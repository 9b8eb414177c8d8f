"""What is inside TFX artifacts, and how it is read and compared.

- ``layout``: file names inside artifacts (``report.json``, ``Format-Serving``...).
- ``properties``: custom property names and exact float properties.
- ``tfrecord``: TFRecord files read defensively (header CRC before a length
  is believed, a record size limit, errors naming file, record and offset).
- ``examples``: declared inputs parsed from tf.Examples, rows from an Examples folder.
- ``savedmodel``: signature names, signatures read from ``saved_model.pb``,
  the TF Serving flags a folder needs, resolving a SavedModel or Model folder.
- ``schema_file``: a TFMD Schema file or SchemaGen folder.
- ``tensorspec``: ``name:dtype:shape[:lo..hi]`` input specs and check inputs.
- ``compare``: output comparison (float tolerance, integers and bools exact).
"""
