"""The trace on disk, torch-free: column buffers, the writer and its atomic commits,
compaction, the trace root, the run id, and the capture's own failures."""
