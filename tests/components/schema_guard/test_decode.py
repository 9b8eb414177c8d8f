"""SchemaGuard's decoder: the parse route describes each record exactly as
tfx_bsl's decoder does, or hands the record to tfx_bsl."""
from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf
from tfx_bsl.coders.example_coder import ExamplesToRecordBatchDecoder

from tfx_bridge.components.schema_guard.contract import WIRE_BYTES, WIRE_FLOAT, WIRE_INT
from tfx_bridge.components.schema_guard.decode import Decoder, NotExamples

WIRES = {"i": WIRE_INT, "f": WIRE_FLOAT, "s": WIRE_BYTES, "v": WIRE_INT}


def _example(**features) -> bytes:
    f = tf.train.Feature
    made = {}
    for name, values in features.items():
        if values is None:
            made[name] = f()  # an entry with no kind set
        elif isinstance(values, tuple) and values and isinstance(values[0], bytes):
            made[name] = f(bytes_list=tf.train.BytesList(value=values))
        elif isinstance(values, tuple) and values and isinstance(values[0], float):
            made[name] = f(float_list=tf.train.FloatList(value=values))
        else:
            made[name] = f(int64_list=tf.train.Int64List(value=values))
    return tf.train.Example(features=tf.train.Features(feature=made)).SerializeToString()


def _rows(groups, n):
    """{record: {feature: values or None}} from decoded groups, absent features dropped."""
    out = {}
    for batch, index in groups:
        columns = batch.to_pydict()
        for row, record in enumerate(index):
            assert int(record) not in out
            out[int(record)] = {k: columns[k][row] for k in sorted(columns)
                                if columns[k][row] is not None}
    assert sorted(out) == list(range(n))
    return {k: out[k] for k in sorted(out)}


RECORDS = [
    _example(i=(1,), f=(0.5,), s=(b"de",), v=(1, 2, 3)),
    _example(i=(2,), f=(float("nan"),), s=(b"", b"\xff\x00"), v=(4,)),
    _example(i=(3,)),  # others absent
    _example(i=(4,), f=(1.0,), v=()),  # a present, empty list
    _example(i=(5,), extra=(7,)),  # a feature outside the wires
    _example(i=(6,), s=None),  # an entry without a kind
    _example(i=(7,)) + _example(i=(8,)),  # the key twice (merged messages: last wins)
    _example(extra=(1,)) + _example(i=(9,), f=(2.0,)),  # merged: an outside feature
    _example(),  # no features at all
    _example(i=(-(2**63), 2**63 - 1), f=(-0.0, float("inf")), s=(b"x" * 300,)),
]


@pytest.mark.parametrize("wires", [WIRES, {}])
def test_decoder_every_record_shape_same_as_tfx_bsl(wires):
    decoder = Decoder(wires)
    got = _rows(decoder.decode(RECORDS), len(RECORDS))
    want = _rows([(ExamplesToRecordBatchDecoder().DecodeBatch(RECORDS),
                   np.arange(len(RECORDS)))], len(RECORDS))
    assert repr(got) == repr(want)  # repr: NaN equal to NaN, -0.0 told from 0.0


def test_decoder_parse_route_groups_plain_records_and_hands_over_the_rest():
    groups = Decoder(WIRES).decode(RECORDS)
    # Described whole by the parse: one group; the rest decoded by tfx_bsl.
    assert {0, 1, 2, 9} in [set(index.tolist()) for _, index in groups]


def test_decoder_another_wire_kind_in_one_record_split_by_kind():
    records = [_example(i=(1,)), _example(i=(0.5,)), _example(i=(2,))]
    groups = Decoder(WIRES).decode(records)
    kinds = {tuple(sorted(index.tolist())): str(batch.schema.field("i").type)
             for batch, index in groups}
    assert kinds == {(0, 2): "large_list<item: int64>", (1,): "large_list<item: float>"}


def test_decoder_record_that_is_not_an_example_named_by_index():
    records = [_example(i=(1,)), b"\xff\xff\xff", _example(i=(2,))]
    with pytest.raises(NotExamples) as caught:
        Decoder(WIRES).decode(records)
    assert caught.value.indices == [1]


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (lengths here stay under 128)."""
    assert len(payload) < 128
    return bytes([number << 3 | 2, len(payload)]) + payload


def _raw_example(**features: bytes) -> bytes:
    """An Example whose Feature messages are given as bytes, written field by field."""
    entries = b"".join(_field(1, _field(1, k.encode()) + _field(2, v))
                       for k, v in features.items())
    return _field(1, entries)


def _feature(**kw) -> bytes:
    return tf.train.Feature(**kw).SerializeToString()


INT1 = _feature(int64_list=tf.train.Int64List(value=[1]))
ODD = {  # Features protobuf reads otherwise than a first-list-field parse
    "twice": INT1 + _feature(int64_list=tf.train.Int64List(value=[2])),  # merged: [1, 2]
    "then_float": INT1 + _feature(float_list=tf.train.FloatList(value=[2.5])),  # float wins
    "then_empty_bytes": INT1 + b"\x0a\x00",  # an empty bytes_list wins
    "unpacked": b"\x1a\x02\x08\x01",  # int64_list{value: 1} unpacked: same values
}


@pytest.mark.parametrize("case", sorted(ODD))
def test_decoder_feature_with_more_than_its_first_list_field_decoded_as_protobuf_reads_it(
        case):
    records = [_example(i=(3,), f=(0.5,)), _raw_example(i=ODD[case], f=_feature(
        float_list=tf.train.FloatList(value=[1.5]))), _example(i=(4,), f=(2.5,))]
    got = _rows(Decoder(WIRES).decode(records), 3)
    assert repr(got) == repr(_rows(Decoder({}).decode(records), 3))
    assert tf.train.Example.FromString(records[1]).features.feature["i"].WhichOneof(
        "kind") == {"then_float": "float_list", "then_empty_bytes": "bytes_list"}.get(
        case, "int64_list")


def test_decoder_trailing_bytes_in_a_feature_refused_as_not_an_example():
    records = [_example(i=(3,)), _raw_example(i=INT1 + b"\xff\xff"), _example(i=(4,))]
    with pytest.raises(NotExamples) as caught:
        Decoder(WIRES).decode(records)
    assert caught.value.indices == [1]


def _varint(value: int) -> bytes:
    out = b""
    while True:
        out += bytes([value & 0x7F | (0x80 if value > 0x7F else 0)])
        value >>= 7
        if not value:
            return out


# An int64_list Feature whose list holds a packed [5] and then something a
# first-list-field parse does not read (protobuf reads it: merged or refused).
HIDDEN = {
    "then_an_unpacked_value": b"\x08" + _varint(6),  # protobuf: [5, 6]
    "then_an_unpacked_int32_overflow": b"\x08" + _varint(2**31),  # protobuf: [5, 2**31]
    "then_trailing_bytes": b"\xff\xff",  # protobuf: not an Example
}


@pytest.mark.parametrize("case", sorted(HIDDEN))
def test_decoder_hidden_value_in_a_record_kept_at_its_canonical_size_read_as_protobuf_reads_it(
        case):
    """Each single-valued feature written unpacked is a byte shorter than written
    canonically: enough of them give back what the hidden bytes cost, so the record
    is exactly as long as the parse's content written canonically. Its verdict is
    still tfx_bsl's, alone or beside a record that sends its batch to tfx_bsl."""
    hidden = HIDDEN[case]
    spare = [f"c{k}" for k in range(len(hidden))]
    crafted = _raw_example(i=_field(3, _field(1, _varint(5)) + hidden),
                           **{c: _field(3, b"\x08" + _varint(7)) for c in spare})
    # What a first-list-field parse reads, written canonically: the same length.
    assert len(crafted) == len(_example(i=(5,), **{c: (7,) for c in spare}))
    wires = {"i": WIRE_INT, **{c: WIRE_INT for c in spare}}
    big = _example(  # over 1 MiB: its batch goes to tfx_bsl whole
        i=(1,), **{c: (2,) for c in spare[:-1]}, **{spare[-1]: (2**40,) * 200_000})
    for records in ([_example(i=(4,)), crafted], [_example(i=(4,)), crafted, big]):
        n = len(records)
        try:
            want = _rows(Decoder({}).decode(records), n)
        except NotExamples as e:
            with pytest.raises(NotExamples) as caught:
                Decoder(wires).decode(records)
            assert caught.value.indices == e.indices == [1]
            continue
        assert repr(_rows(Decoder(wires).decode(records), n)) == repr(want)
        assert want[1]["i"] == [5, _read_varint(hidden[1:])]


def _read_varint(data: bytes) -> int:
    value = 0
    for shift, byte in enumerate(data):
        value |= (byte & 0x7F) << (7 * shift)
        if not byte & 0x80:
            return value
    raise ValueError(data)
