"""``FreeBlockQueue``: the free pool of ``BlockManager`` with O(1) pop, remove and append.

nano-vllm keeps its free ids in a ``deque`` and pulls a cached block out of the middle with
``deque.remove``, which scans the queue (O(n)). vLLM keeps a doubly linked list instead. Here an
``OrderedDict`` (itself a hash map over a doubly linked list) gives the same three operations in
O(1) while keeping the deque's order and method names.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Iterable, Iterator

from paged_kv.cache.checks import check_int


class FreeBlockQueue:
    """Ordered set of free block ids: pop from the front, append to the back, remove from anywhere."""

    __slots__ = ("_ids",)

    def __init__(self, block_ids: Iterable[int] = ()):
        ids = [check_int("block_ids[]", b, minimum=0) for b in block_ids]
        self._ids: "OrderedDict[int, None]" = OrderedDict.fromkeys(ids)
        if len(self._ids) != len(ids):
            raise ValueError("block_ids holds an id more than once")

    def popleft(self) -> int:
        """Remove and return the oldest free id; ``IndexError`` when empty (like ``deque``)."""
        if not self._ids:
            raise IndexError("popleft from an empty FreeBlockQueue: no free blocks left")
        block_id, _ = self._ids.popitem(last=False)
        return block_id

    def append(self, block_id: int) -> None:
        """Put ``block_id`` at the back; ``ValueError`` if it is already free."""
        block_id = check_int("block_id", block_id, minimum=0)
        if block_id in self._ids:
            raise ValueError(f"block {block_id} is already in the free queue")
        self._ids[block_id] = None

    def remove(self, block_id: int) -> None:
        """Take ``block_id`` out from wherever it sits; ``ValueError`` if it is not free."""
        block_id = check_int("block_id", block_id, minimum=0)
        try:
            del self._ids[block_id]
        except KeyError:
            raise ValueError(f"block {block_id} is not in the free queue") from None

    def __contains__(self, block_id: object) -> bool:
        return block_id in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids)

    def __getitem__(self, position: int) -> int:
        """Only ``[0]`` (the next id popleft returns) is O(1); other positions walk the queue."""
        if position == 0 and self._ids:
            return next(iter(self._ids))
        return list(self._ids)[position]

    def __repr__(self) -> str:
        return f"FreeBlockQueue({list(self._ids)})"
