"""tfx_bridge.errors: the one-line form of an exception for reports and tables."""
from __future__ import annotations

import pytest

from tfx_bridge.errors import short_message


@pytest.mark.parametrize("text", [
    # Graph mode: boilerplate first, the message on its own line.
    "Graph execution error:\n\nDetected at node m defined at (most recent call last):\n"
    "<stack traces unavailable>\nMatrix size-incompatible: In[0]: [1,896]\n\t [[{{node m}}]]",
    # Eager mode: the message behind a {{function_node ...}} prefix.
    "{{function_node __wrapped__MatMul_device_/job:localhost}} Matrix size-incompatible: "
    "In[0]: [1,896] [Op:MatMul]",
])
def test_short_message_tf_errors_give_the_informative_line(text):
    message = short_message(RuntimeError(text))
    assert message.startswith("RuntimeError: Matrix size-incompatible: In[0]: [1,896]")


def test_short_message_plain_error_kept_and_bounded():
    assert short_message(ValueError("bad")) == "ValueError: bad"
    assert len(short_message(ValueError("x" * 1000))) == len("ValueError: ") + 300
