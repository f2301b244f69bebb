"""Starter classes: everything given, no TODO method, nothing that reaches the reference."""

import pytest

import paged_kv
from paged_kv.lab.feedback import TodoNotWritten
from paged_kv.cache.manager import KVCacheManager, KVCacheManagerBase
from paged_kv.lab.starters import (
    BlockManagerWithoutPrefixCache,
    KVCacheManagerWithoutDecode,
    KVCacheManagerWithoutPrefill,
    KVCacheManagerWithoutReconstruction,
    starter,
)

STARTERS = [
    KVCacheManagerWithoutPrefill,
    KVCacheManagerWithoutDecode,
    KVCacheManagerWithoutReconstruction,
    BlockManagerWithoutPrefixCache,
]


@pytest.mark.parametrize("cls", STARTERS, ids=lambda c: c.__name__)
def test_a_starter_is_not_a_subclass_of_its_reference(cls):
    assert not issubclass(cls, (paged_kv.KVCacheManager, paged_kv.BlockManager))
    assert issubclass(cls, (KVCacheManagerBase, paged_kv.BlockManagerBase))


@pytest.mark.parametrize("cls", STARTERS, ids=lambda c: c.__name__)
def test_each_todo_method_is_a_stub_that_says_what_to_do(cls):
    instance = cls(4, 2, 2) if issubclass(cls, KVCacheManagerBase) else cls(4, 2)
    assert all(type(name) is str for name in cls.__todo__)  # names only: a starter carries no reference
    for name in cls.__todo__:
        assert getattr(cls, name) is not getattr(cls.__starter_of__, name)
        with pytest.raises(TodoNotWritten, match=f"{name} is this lab's TODO"):
            getattr(instance, name)(None)


def test_given_methods_are_the_references_own():
    manager = KVCacheManagerWithoutDecode(4, 2, 2)
    req = paged_kv.Request(0, 3)
    manager.allocate_for_prefill(req)  # given in lab 03: the reference prefill
    assert req.block_table == [0, 1]
    assert KVCacheManagerWithoutDecode.allocate_for_prefill is KVCacheManager.allocate_for_prefill
    manager.release_request(req)
    assert manager.free_blocks == [0, 1, 2, 3]


def test_compute_hash_stays_a_classmethod_stub():
    with pytest.raises(TodoNotWritten):
        BlockManagerWithoutPrefixCache.compute_hash([1, 2])


def test_a_student_class_on_a_starter_works_with_the_package_helpers():
    class Mine(KVCacheManagerWithoutPrefill):
        def allocate_for_prefill(self, req):
            self._check_prefill(req)
            needed = -(-req.seq_len // self.block_size)
            if needed > len(self.free_blocks):
                raise RuntimeError("OOM")
            req.block_table += self.free_blocks[:needed]
            del self.free_blocks[:needed]

    manager = Mine(6, 4, 2)
    req = paged_kv.Request(0, 9)
    manager.allocate_for_prefill(req)
    paged_kv.check_kv_manager(manager, [req])


def test_starter_rejects_unknown_todo_and_unrelated_classes():
    with pytest.raises(ValueError, match="not a method"):
        starter(KVCacheManager, KVCacheManagerBase, ["allocate_everything"])
    with pytest.raises(TypeError):
        starter(KVCacheManagerBase, KVCacheManager, ["allocate_for_prefill"])


def test_starter_refuses_to_copy_a_method_that_uses_super():
    class Reference(KVCacheManagerBase):
        def release_request(self, req):
            return super().release_request(req)

        def allocate_for_prefill(self, req):
            pass

    with pytest.raises(ValueError, match="uses super"):
        starter(Reference, KVCacheManagerBase, ["allocate_for_prefill"])


def test_with_reference_todos_runs_only_the_named_todo_of_the_student():
    from paged_kv.lab.starters import with_reference_todos

    class OnlyHash(BlockManagerWithoutPrefixCache):
        @classmethod
        def compute_hash(cls, token_ids, prefix=-1):
            return 7

    tested = with_reference_todos(OnlyHash, "compute_hash")
    assert tested.compute_hash([1, 2]) == 7
    manager = tested(4, 2)
    seq = paged_kv.Sequence([1, 2, 3], block_size=2)
    paged_kv.prefill(manager, seq)  # the other TODOs are the reference's
    assert seq.block_table == [0, 1] and manager.blocks[0].hash != 7
    with pytest.raises(ValueError, match="not TODOs"):
        with_reference_todos(OnlyHash, "allocate_for_prefill")
    with pytest.raises(TypeError, match="starter"):
        with_reference_todos(paged_kv.BlockManager, "allocate")
