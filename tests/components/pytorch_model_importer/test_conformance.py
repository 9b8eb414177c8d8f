"""The converter on a fast subset of ONNX's backend node tests, through the fresh-process route.

Forty representative cases across op families (elementwise, tensor/shape,
conv/pool/resize, reductions/matmul/einsum/softmax, normalization, RNN) are converted
and saved in ONE worker child, then loaded and run in ONE fresh child with oneDNN off
(``to_tf.conformance.run_fresh``, as benchmarks/onnx_conformance.py does for every
case). Each case must pass at ONNX's backend tolerances; an unsupported op must be
refused by name, not crash. The whole benchmark's figures are in docs/OPS.md.
"""
from __future__ import annotations

import os

import pytest

pytest.importorskip("onnx", reason="needs the [onnx] extra (onnx)")

from tfx_bridge.components.pytorch_model_importer.to_tf import conformance  # noqa: E402

CASES = [
    # elementwise
    "test_add_bcast", "test_div", "test_sqrt", "test_leakyrelu", "test_gelu_tanh_1",
    "test_clip", "test_where_example", "test_cast_FLOAT_to_DOUBLE", "test_mod_mixed_sign_int32",
    # tensor / shape
    "test_reshape_negative_dim", "test_transpose_all_permutations_0", "test_concat_3d_axis_1",
    "test_slice", "test_gather_0", "test_split_equal_parts_1d_opset13", "test_constant_pad",
    "test_gathernd_example_int32", "test_scatternd", "test_top_k",
    "test_argmax_default_axis_example",
    # conv / pool / resize
    "test_conv_with_strides_padding", "test_convtranspose", "test_maxpool_2d_pads",
    "test_averagepool_2d_strides", "test_globalaveragepool",
    "test_resize_upsample_scales_nearest", "test_resize_downsample_scales_linear",
    # reductions / matmul / einsum / softmax
    "test_reduce_sum_keepdims_example", "test_reduce_mean_default_axes_keepdims_example",
    "test_matmul_3d", "test_gemm_all_attributes", "test_einsum_batch_matmul",
    "test_softmax_axis_1",
    # normalization
    "test_batchnorm_epsilon", "test_layer_normalization_4d_axis1", "test_instancenorm_example",
    "test_group_normalization_epsilon",
    # RNN
    "test_lstm_defaults", "test_gru_defaults", "test_simple_rnn_defaults",
]
# An op the converter does not implement (box post-processing), numeric data: the
# refusal comes from the converter itself, naming the op.
UNSUPPORTED_CASE = "test_nonmaxsuppression_center_point_box_format"


@pytest.fixture(scope="module")
def fresh_results(tmp_path_factory):
    """Every case converted in one child, checked in one fresh oneDNN-off child."""
    pytest.importorskip("tensorflow")
    root = str(tmp_path_factory.mktemp("conformance"))
    return conformance.run_fresh(CASES + [UNSUPPORTED_CASE], root)


@pytest.mark.parametrize("case", CASES)
def test_node_case_fresh_process_passes(fresh_results, case):
    result = fresh_results[case]
    assert result["status"] == conformance.PASS, f"{result['status']}: {result['detail']}"


def test_unsupported_op_fresh_process_refused_by_name(fresh_results):
    result = fresh_results[UNSUPPORTED_CASE]
    assert result["status"] == conformance.REFUSED, result
    assert result["detail"].startswith(
        "ONNX op NonMaxSuppression (node (unnamed)): no converter for this op."), result


def test_string_op_convert_raises_conversion_failed_naming_it():
    from tfx_bridge.components.pytorch_model_importer.to_tf import core

    case = "test_strnormalizer_export_monday_casesensintive_lower"
    model = core.load_for_conversion(
        os.path.join(conformance.node_test_root(), case, "model.onnx"))
    with pytest.raises(core.ConversionFailed,
                       match=r"^ONNX op StringNormalizer \(node \(unnamed\)\): "
                             r"no converter for this op\.") as caught:
        core.convert(model)
    assert [p.op_type for p in caught.value.problems] == ["StringNormalizer"]
