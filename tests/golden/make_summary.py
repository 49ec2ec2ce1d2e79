#!/usr/bin/env python3
"""Golden bytes of TensorBoard's event files, for tests/summary_writer_spec.lua:
CRC32C and its masked form, one TFRecord framing, Event messages made with
the tensorboard package's own protobuf classes (tensorboard.compat.proto),
and histogram buckets as PyTorch's SummaryWriter.add_histogram makes them.

Run from the repository root with the small tensorboard venv:

    $(scripts/tb-venv.sh) tests/golden/make_summary.py

It writes tests/golden/summary_cases.lua (both files are committed).  The
histogram cases follow torch/utils/tensorboard/summary.py's make_histogram
(numpy.histogram, then the trim to the non-empty buckets plus one empty one
on the left) and writer.py's default_bins ("tensorflow"), copied below since
this venv has no torch; the spec checks ddp.summary.histogram against them.
"""
import io
import os

import numpy as np
import tensorboard
from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c, masked_crc32c
from tensorboard.plugins.text import plugin_data_pb2
from tensorboard.summary.writer.record_writer import RecordWriter

OUT = os.path.join(os.path.dirname(__file__), "summary_cases.lua")


def lua_num(v):
    v = float(v)
    if v == int(v) and abs(v) < 2 ** 53:
        return "%d" % v
    r = repr(v)
    assert float(r) == v
    return r


def lua_list(xs):
    return "{" + ", ".join(lua_num(x) for x in xs) + "}"


def hexs(b):
    return '"' + b.hex() + '"'


# -- CRC32C -----------------------------------------------------------------
CRC_INPUTS = [b"", b"a", b"123456789", bytes(32), bytes(range(256)), b"brain.Event:2" * 7]

# -- Events -------------------------------------------------------------------
Value = summary_pb2.Summary.Value


def scalar_event(wall_time, step, tag, v):
    return event_pb2.Event(wall_time=wall_time, step=step,
                           summary=summary_pb2.Summary(value=[Value(tag=tag, simple_value=v)]))


def text_value(tag, text):  # as torch.utils.tensorboard.summary.text
    plugin_data = summary_pb2.SummaryMetadata.PluginData(
        plugin_name="text", content=plugin_data_pb2.TextPluginData(version=0).SerializeToString())
    tensor = tensor_pb2.TensorProto(
        dtype="DT_STRING", string_val=[text.encode("utf_8")],
        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]))
    return Value(tag=tag + "/text_summary", metadata=summary_pb2.SummaryMetadata(plugin_data=plugin_data),
                 tensor=tensor)


HIST = dict(min=-1.5, max=2.0, num=5, sum=1.25, sum_squares=8.5, bucket_limit=[-1.0, 0.0, 2.0], bucket=[0, 2, 3])
HIST0 = dict(min=0.0, max=0.0, num=3, sum=0.0, sum_squares=0.0, bucket_limit=[0.0], bucket=[3])

# name, the Lua call that makes the bytes (tfevents = ddp.summary.tfevents), the Event
EVENTS = [
    ("scalar", 'tfevents.event{wall_time = 1700000000.25, step = 7, summary = tfevents.summary{tfevents.scalar_value("loss", 0.5)}}',
     scalar_event(1700000000.25, 7, "loss", 0.5)),
    ("scalar_step0_value0", 'tfevents.event{wall_time = 1.5, step = 0, summary = tfevents.summary{tfevents.scalar_value("a/b", 0)}}',
     scalar_event(1.5, 0, "a/b", 0.0)),
    ("scalar_big_step", 'tfevents.event{wall_time = 1700000000.125, step = 123456789012, summary = tfevents.summary{tfevents.scalar_value("x", -3.25)}}',
     scalar_event(1700000000.125, 123456789012, "x", -3.25)),
    ("scalar_negative_step", 'tfevents.event{wall_time = 2, step = -3, summary = tfevents.summary{tfevents.scalar_value("x", 1e-3)}}',
     scalar_event(2.0, -3, "x", 1e-3)),
    ("file_version", 'tfevents.event{wall_time = 1700000000.5, file_version = "brain.Event:2", writer = "ddplua"}',
     event_pb2.Event(wall_time=1700000000.5, file_version="brain.Event:2",
                     source_metadata=event_pb2.SourceMetadata(writer="ddplua"))),
    ("purge_version", 'tfevents.event{wall_time = 1700000000.5, step = 40, file_version = "brain.Event:2"}',
     event_pb2.Event(wall_time=1700000000.5, step=40, file_version="brain.Event:2")),
    ("purge_start", 'tfevents.event{wall_time = 1700000000.5, step = 40, session_start = true}',
     event_pb2.Event(wall_time=1700000000.5, step=40,
                     session_log=event_pb2.SessionLog(status=event_pb2.SessionLog.START))),
    ("histogram", 'tfevents.event{wall_time = 3.75, step = 2, summary = tfevents.summary{tfevents.histogram_value("w", '
     '{min = -1.5, max = 2, num = 5, sum = 1.25, sum_squares = 8.5, bucket_limit = {-1, 0, 2}, bucket = {0, 2, 3}})}}',
     event_pb2.Event(wall_time=3.75, step=2, summary=summary_pb2.Summary(
         value=[Value(tag="w", histo=summary_pb2.HistogramProto(**HIST))]))),
    ("histogram_zeros", 'tfevents.event{wall_time = 3.75, step = 2, summary = tfevents.summary{tfevents.histogram_value("z", '
     '{min = 0, max = 0, num = 3, sum = 0, sum_squares = 0, bucket_limit = {0}, bucket = {3}})}}',
     event_pb2.Event(wall_time=3.75, step=2, summary=summary_pb2.Summary(
         value=[Value(tag="z", histo=summary_pb2.HistogramProto(**HIST0))]))),
    ("text", 'tfevents.event{wall_time = 5.5, step = 1, summary = tfevents.summary{tfevents.text_value("notes/text_summary", "hello **world** \\u{e9}")}}',
     event_pb2.Event(wall_time=5.5, step=1, summary=summary_pb2.Summary(value=[text_value("notes", "hello **world** \u00e9")]))),
]

# -- Histograms (PyTorch's make_histogram) ------------------------------------


def default_bins():  # SummaryWriter.__init__'s self.default_bins
    v = 1e-12
    buckets, neg_buckets = [], []
    while v < 1e20:
        buckets.append(v)
        neg_buckets.append(-v)
        v *= 1.1
    return neg_buckets[::-1] + [0] + buckets


def make_histogram(values, bins):  # summary.make_histogram, max_bins=None
    values = values.reshape(-1)
    counts, limits = np.histogram(values, bins=bins)
    cum_counts = np.cumsum(np.greater(counts, 0))
    start, end = np.searchsorted(cum_counts, [0, cum_counts[-1] - 1], side="right")
    start = int(start)
    end = int(end) + 1
    counts = counts[start - 1:end] if start > 0 else np.concatenate([[0], counts[:end]])
    limits = limits[start:end + 1]
    return dict(min=values.min(), max=values.max(), num=len(values), sum=values.sum(),
                sum_squares=values.dot(values), bucket_limit=limits.tolist(), bucket=counts.tolist())


rng = np.random.default_rng(0)
# small integers / 8: every sum exact, whatever the order of the additions
HISTS = [
    ("tensorflow_mixed", (rng.integers(-40, 41, size=200) / 8.0), "tensorflow"),
    ("tensorflow_positive", (rng.integers(1, 1000, size=100) / 8.0), "tensorflow"),
    ("tensorflow_zeros", np.zeros(7), "tensorflow"),
    ("equal_5", np.array([0.0, 1, 1, 2, 3, 4, 4, 4, 10]), 5),
    ("equal_7_random", (rng.integers(-100, 100, size=300) / 4.0), 7),
    ("equal_3_point", np.array([2.5, 2.5, 2.5]), 3),
    ("edges", np.array([-3.0, -1, -0.5, 0, 0.5, 1, 2, 5, 9]), [-1.0, 0.0, 1.0, 2.0, 4.0]),
]

with open(OUT, "w") as f:
    f.write("-- Generated by tests/golden/make_summary.py with tensorboard %s and numpy %s; do not edit.\n"
            % (tensorboard.__version__, np.__version__))
    f.write("return {\n")
    f.write("crc = {\n")
    for b in CRC_INPUTS:
        f.write("  {hex = %s, crc = %d, masked = %d},\n" % (hexs(b), crc32c(b), masked_crc32c(b)))
    f.write("},\n")
    buf = io.BytesIO()
    RecordWriter(buf).write(b"hello, tensorboard")
    f.write("record = {data = %s, framed = %s},\n" % (hexs(b"hello, tensorboard"), hexs(buf.getvalue())))
    f.write("events = {\n")
    for name, lua, ev in EVENTS:
        f.write("  {name = %r, lua = [[%s]], bytes = %s},\n" % (name, lua, hexs(ev.SerializeToString())))
    f.write("},\n")
    f.write("histograms = {\n")
    for name, vals, bins in HISTS:
        h = make_histogram(vals.astype(float), default_bins() if bins == "tensorflow" else bins)
        lua_bins = '"tensorflow"' if bins == "tensorflow" else (lua_list(bins) if isinstance(bins, list) else str(bins))
        f.write("  {name = %r, values = %s, bins = %s,\n   min = %s, max = %s, num = %s, sum = %s, sum_squares = %s,\n"
                "   bucket_limit = %s,\n   bucket = %s},\n"
                % (name, lua_list(vals), lua_bins, lua_num(h["min"]), lua_num(h["max"]), lua_num(h["num"]),
                   lua_num(h["sum"]), lua_num(h["sum_squares"]), lua_list(h["bucket_limit"]), lua_list(h["bucket"])))
    f.write("},\n}\n")
print("wrote", OUT)
