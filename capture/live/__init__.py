"""Recording inside training loops the user does not write, and their scalars in the loggers.

`loop.LoopRecorder` drives a Recorder from a framework's hooks (the callbacks in
spiketrace.capture.lightning and spiketrace.capture.huggingface are thin translations of their
hooks); `analysis.LiveAnalysis` analyses each recorded cycle in a worker process and logs the
scalars to `sinks` (CSV, TensorBoard, MLflow, W&B) and to the framework's own loggers.

    from spiketrace.capture.live import CsvSink, LiveAnalysis, TensorBoardSink
"""

from __future__ import annotations

from spiketrace.capture.live.analysis import LiveAnalysis
from spiketrace.capture.live.sinks import CsvSink, MlflowSink, TensorBoardSink, WandbSink, sink_spec

__all__ = ["CsvSink", "LiveAnalysis", "MlflowSink", "TensorBoardSink", "WandbSink", "sink_spec"]
