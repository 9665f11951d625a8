"""One op's record: the dispatch mode and op log, the op's arguments as JSON, decompositions,
collectives, optimizer steps and the per-op scalars the rules read."""
