"""Build op_facts, one chunk of events at a time, with array gathers instead of SQL joins.

Every event needs the facts of a few of its tensors (slot a0, a1, o0, ...). In SQL that is
one hash join per slot over the whole trace; here it is index arithmetic: each tensor use
finds its event row and its tensor row through an index on seq or tensor_id, and a slot's
fact is a numpy `take` of a per-tensor column. Same columns and meaning as
analyze/counters/facts.py, which documents the slot vocabulary, except that the op comes as
`op_code`, its index in the list of ops given.

Only what the rules read is read: the tensor states first described inside the chunk (one
range scan on first_seq) and the few older ones its ops still use (kept from the previous
chunk, or else looked up by id), and per state only the facts some rule reads.
`ChunkFacts.table(rows, columns)` then assembles just the columns some ops' rules read, for
just those ops' events; shape dims and products are computed for just those events' tensors.
"""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spiketrace.analyze.counters.arrays import Index, TensorStates, numpy_column, take_sorted, unique_keys
from spiketrace.analyze.counters.facts import EVENT_COLUMNS, PROD_OF_NULL, column_fact, shape_facts

# A tensor use's slot as one integer (computed in SQL): role (arg 0, out 1, kwarg 2, other 3)
# times 2**20, plus for arg/out 2**19 when it is an item of a list and position + 2**16, for
# a kwarg the index of its name among the names the rules read (2**19 for any other name).
_ROLE, _ITEM, _POSITION = 1 << 20, 1 << 19, 1 << 16


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


class JsonReadError(RuntimeError):
    """A typed JSON read failed when evaluated for all of an op's distinct arguments (where
    per event, inside its rule, it might never be reached)."""


class OpFactsBuilder:
    """Chunk by chunk, the facts behind the op_facts `columns` (see facts.py) of the events of
    `ops`, plus op_code, scope_id, tensor_bytes and the event columns `extra_columns`."""

    def __init__(self, con, columns: dict[str, set[int]], ops: list[str], extra_columns=(), json_reads=None) -> None:
        """`columns`: each op_facts column some rule reads -> the codes of the ops whose rules do."""
        self.con = con
        self.ops = list(ops)
        self.readers = columns
        self.stats = sorted(c.removeprefix("stat_") for c in columns if c.startswith("stat_"))
        # json_<n> -> (args or kwargs, the typed read, codes of the ops whose rules make it)
        self.json_reads: dict[str, tuple[str, str, list[int]]] = dict(json_reads or {})
        self.json_sources: dict[str, list[int]] = {}  # args/kwargs -> codes of the ops reading it
        for source, _, codes in self.json_reads.values():
            self.json_sources[source] = sorted(set(self.json_sources.get(source, [])) | set(codes))
        # group columns go into every table; args, kwargs, ... only where a rule reads them
        self.group_columns = [c for c in extra_columns if c not in ("rank", "seq", "scope_id")]
        wanted = {c for c in columns if c in EVENT_COLUMNS} | set(self.group_columns)
        self.event_columns = [c for c in EVENT_COLUMNS if c in wanted and c not in ("rank", "seq", "scope_id")]
        facts = {fact for fact in map(column_fact, columns) if fact}
        self.kwarg_names = sorted({key for (kind, key, _), _ in facts if kind == "k"})
        self.slot_codes = {slot: self.slot_code(*slot) for slot in sorted({slot for slot, _ in facts})}
        # shape dims and products are computed for the tensors of the events whose rules read them
        self.shape_readers: dict[tuple, set[int]] = {}
        for column, readers in columns.items():
            fact = column_fact(column)
            if fact and fact[1].startswith("shape_"):
                self.shape_readers.setdefault(fact[0], set()).update(readers)
        self.shape_facts = sorted({f for _, f in facts if f.startswith("shape_")})
        plain = sorted({fact for _, fact in facts} - {"present", "bytes"} - {f for _, f in facts if f.startswith("shape")})
        self.tensor_sql = ", ".join(["tensor_id", "numel * element_size AS bytes", *plain]
                                    + (["shape"] if any(f.startswith("shape") for _, f in facts) else []))
        self.carry: tuple[int, list[TensorStates]] | None = None  # rank, tensor states of the last chunk

    def slot_code(self, kind: str, key: str, items: bool) -> int:
        if kind == "k":
            return 2 * _ROLE + self.kwarg_names.index(key)
        return (0 if kind == "a" else _ROLE) + (_ITEM if items else 0) + int(key) + _POSITION

    def _uses(self, bounds: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(seq, tensor_id, slot code) of the tensor uses of the chunk (list_position is cheap
        on DuckDB's dictionary strings; the arithmetic is cheaper in numpy)."""
        names = "[" + ", ".join(map(_sql_string, self.kwarg_names)) + "]"
        table = self.con.sql(f"""
            SELECT seq, tensor_id, list_position(['arg', 'out', 'kwarg'], role) AS role, position, item IS NULL AS bare
                   {f", list_position({names}, name) AS name" if self.kwarg_names else ""}
            FROM event_tensors WHERE {bounds}
        """).to_arrow_table()
        role, known = numpy_column(table.column("role"))
        role = role.astype(np.int32)  # 1-based: arg 1, out 2, kwarg 3
        if known is not None:
            role[~known] = 4
        role -= 1
        slot, given = numpy_column(table.column("position"))
        slot = slot.astype(np.int32)
        if given is not None:
            slot[~given] = -1
        slot += _POSITION
        slot[~numpy_column(table.column("bare"))[0]] += _ITEM
        slot += role * _ROLE
        kwarg = role == 2
        if kwarg.any():
            name = np.full(len(slot), _ITEM, dtype=np.int32)
            if self.kwarg_names:
                found, named = numpy_column(table.column("name"))
                name = np.where(named, found.astype(np.int32) - 1, _ITEM) if named is not None else found.astype(np.int32) - 1
            slot[kwarg] = 2 * _ROLE + name[kwarg]
        return numpy_column(table.column("seq"))[0], numpy_column(table.column("tensor_id"))[0], slot

    def _tensor_states(self, rank: int, condition: str) -> TensorStates:
        table = self.con.sql(f"SELECT {self.tensor_sql} FROM tensor_states WHERE rank = {rank} AND {condition}")
        return TensorStates.from_arrow(table.to_arrow_table())

    def _locate_tensors(self, rank: int, low: int, high: int, ids: np.ndarray) -> tuple[TensorStates, np.ndarray]:
        """The tensor states `ids` name (table, row of each id or -1)."""
        recent = self._tensor_states(rank, f"first_seq >= {low} AND first_seq < {high}")
        rows = recent.index.find(ids)
        missing = rows < 0
        parts = [recent]
        if missing.any():
            # older states: kept from the last chunk, or else looked up by id
            wanted = np.unique(ids[missing])
            older: list[TensorStates] = []
            for kept in (self.carry[1] if self.carry and self.carry[0] == rank else []):
                found = kept.index.find(wanted)
                if (found >= 0).any():
                    older.append(kept.take(found[found >= 0]))
                    wanted = wanted[found < 0]
            if len(wanted):
                self.con.register("spiketrace_wanted_tensors", pa.table({"tensor_id": wanted}))
                try:
                    older.append(self._tensor_states(
                        rank, "tensor_id IN (SELECT tensor_id FROM spiketrace_wanted_tensors)"))
                finally:
                    self.con.unregister("spiketrace_wanted_tensors")
            older_states = TensorStates.concat(older)
            found = older_states.index.find(ids[missing])
            rows[missing] = np.where(found >= 0, found + len(recent.ids), -1)
            parts.append(older_states)
        self.carry = (rank, parts)
        return TensorStates.concat(parts), rows

    def build(self, where: str, rank: int, low: int, high: int) -> ChunkFacts:
        """The facts of the events matching `where`, all of rank `rank` with low <= seq < high."""
        bounds = f"rank = {rank} AND seq >= {low} AND seq < {high}"
        ops = "[" + ", ".join(map(_sql_string, self.ops)) + "]"
        # args/kwargs strings only for the events whose typed JSON reads some rule makes
        sources = [f"CASE WHEN op_code IN ({', '.join(map(str, codes))}) THEN {source} END AS json_source_{source}"
                   for source, codes in sorted(self.json_sources.items())]
        events = self.con.sql(
            f"SELECT {', '.join(['seq', f'list_position({ops}, op) - 1 AS op_code', 'scope_id', *self.event_columns, *sources])}"
            f" FROM events WHERE ({where}) AND {bounds}"
        ).to_arrow_table()
        if events.column("op_code").null_count:
            raise RuntimeError(f"events of rank {rank} changed while being counted (an op not seen before)")
        event_index = Index(numpy_column(events.column("seq"))[0])
        use_seq, use_tensor_id, use_slot = self._uses(bounds)
        use_event = event_index.find(use_seq)
        del use_seq
        if (use_event < 0).any():  # uses of the chunk's other events (outside `where`) are not read
            selected = use_event >= 0
            use_event, use_tensor_id, use_slot = use_event[selected], use_tensor_id[selected], use_slot[selected]
        tensors, use_tensor = self._locate_tensors(rank, low, high, use_tensor_id)
        if (use_tensor < 0).any():  # uses of tensor states the trace lacks are not read
            valid = use_tensor >= 0
            use_event, use_tensor, use_slot = use_event[valid], use_tensor[valid], use_slot[valid]
        chunk = ChunkFacts(self, rank, events, use_event, use_tensor, use_slot, tensors)
        if self.stats:
            cases = " ".join(f"WHEN {_sql_string(s)} THEN {i}" for i, s in enumerate(self.stats))
            table = self.con.sql(
                f"SELECT seq, CASE stat {cases} END AS stat, value FROM op_stats WHERE ({bounds}) AND stat IN ("
                + ", ".join(_sql_string(s) for s in self.stats) + ")"
            ).to_arrow_table()
            chunk.stat_rows = (event_index.find(numpy_column(table.column("seq"))[0]), numpy_column(table.column("stat"))[0],
                               numpy_column(table.column("value"))[0])
        return chunk

    def finish(self, chunk: ChunkFacts, con) -> None:
        """What `build` leaves to the caller's thread, on its connection `con`: the typed JSON
        reads and the op statistics per event."""
        for source in sorted(self.json_sources):
            self._read_json(chunk, source, con)
        if chunk.stat_rows is not None:
            stat_event, codes, values = chunk.stat_rows
            for code, name in enumerate(self.stats):
                mask = (stat_event >= 0) & (codes == code)
                column = np.full(chunk.n, np.nan)
                column[stat_event[mask]] = values[mask]
                chunk.stats[f"stat_{name}"] = column

    def _read_json(self, chunk: ChunkFacts, source: str, con) -> None:
        """The typed JSON reads of `source` (args or kwargs), each evaluated once per distinct
        (op, string) among the chunk's events of the ops whose rules make it."""
        reads = {name: (read, codes) for name, (src, read, codes) in self.json_reads.items() if src == source}
        readers = np.zeros(len(self.ops) + 1, dtype=bool)
        readers[self.json_sources[source]] = True
        rows = np.flatnonzero(readers[chunk.op_code])
        strings = pc.dictionary_encode(chunk.events.column(f"json_source_{source}").combine_chunks().take(pa.array(rows)))
        dictionary = pa.concat_arrays([strings.dictionary, pa.array([None], strings.dictionary.type)])
        index = np.asarray(pc.fill_null(strings.indices, len(dictionary) - 1).to_numpy(), dtype=np.int64)
        n_strings = len(dictionary)
        pairs, pair = unique_keys(chunk.op_code[rows].astype(np.int64) * n_strings + index, len(self.ops) * n_strings)
        pair_of_event = np.full(chunk.n, -1, dtype=np.int32)
        pair_of_event[rows] = pair
        con.register("spiketrace_json_strings", pa.table({
            "op_code": pa.array(pairs // n_strings, pa.int32()),
            source: dictionary.take(pa.array(pairs % n_strings, pa.int64())),
        }))
        try:
            values = con.sql("SELECT " + ", ".join(
                f"CASE WHEN op_code IN ({', '.join(map(str, codes))}) THEN {read} END AS {name}"
                for name, (read, codes) in reads.items()
            ) + " FROM spiketrace_json_strings").to_arrow_table()
        except duckdb.Error as error:  # the caller then evaluates the reads per event instead
            raise JsonReadError(str(error)) from error
        finally:
            con.unregister("spiketrace_json_strings")
        for name in reads:
            chunk.json[name] = (values.column(name).combine_chunks(), pair_of_event)


class ChunkFacts:
    """The gathered facts of one chunk's events; `table` assembles op_facts rows from them."""

    def __init__(self, builder, rank, events, use_event, use_tensor, use_slot, tensors) -> None:
        self.builder, self.rank, self.events, self.tensors = builder, rank, events.combine_chunks(), tensors
        self.n = events.num_rows
        self.op_code = numpy_column(events.column("op_code"))[0].astype(np.int32)
        self.scope_id = numpy_column(events.column("scope_id"))[0]
        self.use_event, self.use_tensor, self.use_is_out = use_event, use_tensor, use_slot // _ROLE == 1
        self.use_slot = use_slot
        self.stats: dict[str, np.ndarray] = {}
        # (event row, statistic number, value) of the chunk's op_stats rows
        self.stat_rows: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self.json: dict[str, tuple[pa.Array, np.ndarray]] = {}  # json_<n>: values, row per event (-1: none)
        self._slot_index: dict = {}
        self._sums: dict = {}
        self._shapes: dict = {}  # shape fact -> per tensor state (values, validity)
        self._arrow: dict = {}  # tensor fact -> as an Arrow array

    def _uses_of(self, slot) -> tuple[np.ndarray, np.ndarray]:
        """(event row, tensor row) of the uses filling `slot`."""
        uses = np.flatnonzero(self.use_slot == self.builder.slot_codes[slot])
        return self.use_event[uses], self.use_tensor[uses]

    def _sum(self, name: str) -> np.ndarray:
        """tensor_bytes (all the op's tensors) or out_bytes (its outputs) of every event."""
        if name not in self._sums:
            weights = self.tensors.columns["bytes"][0].astype(np.float64)[self.use_tensor]
            if name == "out_bytes":
                weights = weights * self.use_is_out
            self._sums[name] = np.bincount(self.use_event, weights=weights, minlength=self.n).astype(np.int64)
        return self._sums[name]

    def _index(self, slot) -> np.ndarray:
        """Tensor row of `slot` per event, -1 where the event has none (the last use wins)."""
        if slot not in self._slot_index:
            event, tensor = self._uses_of(slot)
            index = np.full(self.n, -1, dtype=np.int32)
            index[event] = tensor
            self._slot_index[slot] = index
        return self._slot_index[slot]

    def _items(self, slot, fact: str, rows: np.ndarray) -> pa.Array:
        """Sum of `fact` over the items of a list slot (NULL without items or where one is NULL)."""
        event, tensor = self._uses_of(slot)
        count = np.bincount(event, minlength=self.n)[rows]
        if fact == "present":
            return pa.array(count > 0)
        if fact not in self.tensors.columns:
            raise ValueError(f"op_facts: the {fact} of list items cannot be summed")
        values, ok = self.tensors.columns[fact]
        summed = np.bincount(event, weights=values[tensor].astype(np.float64), minlength=self.n)[rows].astype(np.int64)
        null = count == 0
        if ok is not None:
            null |= np.bincount(event, weights=~ok[tensor], minlength=self.n)[rows] > 0
        return pa.array(summed, mask=null)

    def _slot_facts(self, slot, facts, rows: np.ndarray) -> dict[str, pa.Array]:
        if slot[2]:
            return {fact: self._items(slot, fact, rows) for fact in facts}
        index = self._index(slot)[rows]
        absent = index < 0
        taken = pa.array(index, mask=absent)  # a NULL row where the event has no such tensor
        result = {}
        for fact in facts:
            if fact == "present":
                result[fact] = pa.array(~absent)
            elif fact == "shape":
                result[fact] = pc.take(self.tensors.shape, taken)
            elif fact.startswith("shape_prod_"):  # prod() of a missing slot's NULL shape is 1
                values, ok = self._tensor_column(fact)
                safe = np.where(absent, 0, index)
                values = values[safe]
                values[absent] = PROD_OF_NULL
                null = np.zeros(len(rows), bool) if ok is None else ~absent & ~ok[safe]
                result[fact] = pa.array(values, mask=null if null.any() else None)
            else:
                result[fact] = self._arrow_column(fact).take(taken)
        return result

    def _tensor_column(self, fact: str) -> tuple[np.ndarray, np.ndarray | None]:
        if fact.startswith("shape_"):
            if not self._shapes:
                self._shape_facts()
            values, ok = self._shapes[fact]
        else:
            values, ok = self.tensors.columns[fact]
        if not len(values):  # no tensor state at all: every slot is absent
            values, ok = np.zeros(1, values.dtype), None
        return values, ok

    def _arrow_column(self, fact: str) -> pa.Array:
        """A per tensor state fact as an Arrow array (NULL where the fact is)."""
        if fact not in self._arrow:
            values, ok = self._tensor_column(fact)
            self._arrow[fact] = pa.array(values, mask=None if ok is None else ~ok)
        return self._arrow[fact]

    def _shape_facts(self) -> None:
        """The shape facts (dims and products) of the tensor states in the slots whose shapes
        some rule of the event's op reads, as tensor columns (NULL for the other states)."""
        wanted_parts = [np.zeros(0, np.int64)]
        for slot, readers in self.builder.shape_readers.items():
            reads = np.zeros(len(self.builder.ops) + 1, dtype=bool)
            reads[list(readers)] = True
            index = self._index(slot)[reads[self.op_code]]
            wanted_parts.append(index[index >= 0])
        wanted = np.unique(np.concatenate(wanted_parts))
        lists = take_sorted(self.tensors.shape, wanted)
        for fact, (values, ok) in shape_facts(lists, self.builder.shape_facts).items():
            column, valid = np.zeros(len(self.tensors.ids), np.int64), np.zeros(len(self.tensors.ids), bool)
            column[wanted] = values
            valid[wanted] = True if ok is None else ok
            self._shapes[fact] = (column, valid)

    def table(self, rows: np.ndarray, columns) -> pa.Table:
        """rank, op_code, scope_id, tensor_bytes, the group columns and `columns`, for the
        events `rows` (positions in the chunk)."""
        take = pa.array(rows)
        result = {"rank": pa.array(np.full(len(rows), self.rank, dtype=np.int32)), "op_code": pa.array(self.op_code[rows]),
                  "scope_id": pa.array(self.scope_id[rows]), "tensor_bytes": pa.array(self._sum("tensor_bytes")[rows])}
        for name in self.builder.group_columns:
            result[name] = self.events.column(name).take(take)
        by_slot: dict = {}
        for column in sorted(columns):
            if column in result:
                continue
            fact = column_fact(column)
            if fact:
                by_slot.setdefault(fact[0], []).append(fact[1])
            elif column in self.builder.event_columns:
                result[column] = self.events.column(column).take(take)
            elif column in self.json:
                values, row = self.json[column]
                row = row[rows]
                result[column] = values.take(pa.array(row, mask=row < 0))
            elif column.startswith("stat_"):
                values = self.stats[column][rows]
                result[column] = pa.array(values, mask=np.isnan(values))
            elif column == "out_bytes":
                result[column] = pa.array(self._sum(column)[rows])
            elif column == "seq":
                result[column] = self.events.column("seq").take(take)
        for (kind, key, items), facts in sorted(by_slot.items()):
            prefix = f"k_{key}_" if kind == "k" else f"{kind}{key}_{'items_' if items else ''}"
            for fact_name, array in self._slot_facts((kind, key, items), facts, rows).items():
                result[prefix + fact_name] = array
        return pa.table(result)
