"""tests/helpers/tb_read.py LOGDIR: what TensorBoard's own reader sees in a
log directory (tests/summary_writer_spec.lua), as one JSON object on stdout:
for LOGDIR and each folder in it (add_scalars' runs), the scalars,
histograms and tensor (text) summaries EventAccumulator gives, with
purge_orphaned_data=True (TensorBoard's default, which applies a
SessionLog START's purge), and the raw events of every file in the
folder (EventFileLoader: each record, so duplicates would show).
"""
import json
import os
import sys

from tensorboard.backend.event_processing import event_accumulator as ea_mod
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader


def read_run(path):
    ea = ea_mod.EventAccumulator(path, size_guidance={"scalars": 0, "histograms": 0, "tensors": 0},
                                 purge_orphaned_data=True)
    ea.Reload()
    tags = ea.Tags()
    run = {"scalars": {}, "histograms": {}, "texts": {}, "raw": []}
    for t in tags["scalars"]:
        run["scalars"][t] = [[e.step, e.value] for e in ea.Scalars(t)]
    for t in tags["histograms"]:
        run["histograms"][t] = []
        for e in ea.Histograms(t):
            h = e.histogram_value
            run["histograms"][t].append({"step": e.step, "min": h.min, "max": h.max, "num": h.num, "sum": h.sum,
                                         "sum_squares": h.sum_squares, "bucket_limit": list(h.bucket_limit),
                                         "bucket": list(h.bucket)})
    for t in tags["tensors"]:
        run["texts"][t] = [[e.step, e.tensor_proto.string_val[0].decode("utf-8"),
                            ea.SummaryMetadata(t).plugin_data.plugin_name] for e in ea.Tensors(t)]
    for name in sorted(os.listdir(path)):
        if name.startswith("events.out.tfevents."):
            for ev in EventFileLoader(os.path.join(path, name)).Load():
                kind = ev.WhichOneof("what")
                raw = {"file": name, "kind": kind, "step": ev.step, "wall_time": ev.wall_time}
                if kind == "file_version":
                    raw["file_version"] = ev.file_version
                elif kind == "session_log":
                    raw["status"] = ev.session_log.status
                elif kind == "summary":
                    raw["tags"] = [v.tag for v in ev.summary.value]
                run["raw"].append(raw)
    return run


logdir = sys.argv[1]
out = {"": read_run(logdir)}
for name in sorted(os.listdir(logdir)):
    if os.path.isdir(os.path.join(logdir, name)):
        out[name] = read_run(os.path.join(logdir, name))
json.dump(out, sys.stdout)
