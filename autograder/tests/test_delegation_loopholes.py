"""Delegation that leaves no student frame on the stack, or hides the student's code, earns nothing either.

These are the holes found in the first integrity guard: a TODO that is not a function of the student's
own (a partial, a partialmethod, a callable object), a TODO compiled under a file name of paged_kv, and
a class that hands the grader a bound reference method (``__getattribute__``, a property).
"""
import functools

import pytest
import torch

import paged_kv
from autograder.graders import lab01_ledger, lab02_prefill
from paged_kv.starters import KVCacheManagerWithoutPrefill as Starter
from test_graders import failures, grader_checks

Reference = paged_kv.KVCacheManager


def _compiled_as_paged_kv(source: str, module, name: str, **globals_):
    """A function whose code claims to come from ``module``'s file (a forged, 'trusted' file name)."""
    namespace = {}
    exec(compile("\n" * 5 + source, module.__file__, "exec"), dict(globals_), namespace)
    return namespace[name]


class HandsOutABoundReference(Starter):
    def allocate_for_prefill(self, req):
        raise AssertionError("never called: __getattribute__ answers first")

    def __getattribute__(self, name):
        if name == "allocate_for_prefill":
            return functools.partial(Reference.allocate_for_prefill, self)
        return object.__getattribute__(self, name)


class CallableObject:
    __call__ = staticmethod(paged_kv.estimate_kv_cache_bytes)


LAB02 = {
    "partialmethod": type("PartialMethod", (Starter,),
                          {"allocate_for_prefill": functools.partialmethod(Reference.allocate_for_prefill)}),
    "property returning a partial": type("PropertyPartial", (Starter,), {
        "allocate_for_prefill": property(lambda self: functools.partial(Reference.allocate_for_prefill, self))}),
    "__getattribute__": HandsOutABoundReference,
    "code compiled as paged_kv": type("Forged", (Starter,), {"allocate_for_prefill": _compiled_as_paged_kv(
        "def helper(self, req):\n    return Ref.allocate_for_prefill(self, req)\n", paged_kv.manager, "helper",
        Ref=Reference)}),
}
LAB01 = {
    "library decorator around the reference": torch.no_grad()(paged_kv.estimate_kv_cache_bytes),
    "partial": functools.partial(paged_kv.estimate_kv_cache_bytes),
    "callable object": CallableObject(),
    "code compiled as paged_kv": _compiled_as_paged_kv("def estimate(*a):\n    return E(*a)\n", paged_kv.ledger,
                                                       "estimate", E=paged_kv.estimate_kv_cache_bytes),
}


@pytest.mark.parametrize("module, implementation",
                         [pytest.param(lab02_prefill, cls, id=f"lab02-{label}") for label, cls in LAB02.items()]
                         + [pytest.param(lab01_ledger, f, id=f"lab01-{label}") for label, f in LAB01.items()])
def test_hidden_delegation_earns_nothing(module, implementation):
    failed = failures(module, implementation)
    assert set(failed) == {c.__name__ for c in grader_checks(module)}, failed
    assert all(message.startswith("[integrity]") for message in failed.values()), failed


def test_a_helper_function_of_the_students_own_still_counts():
    @torch.no_grad()  # a library decorator around the student's own code is fine
    def helper(self, req):
        needed = -(-req.seq_len // self.block_size)
        if needed > len(self.free_blocks):
            raise RuntimeError("OOM")
        req.block_table.extend(self.free_blocks[:needed])
        del self.free_blocks[:needed]

    own = type("Own", (Starter,), {"allocate_for_prefill": helper})
    assert failures(lab02_prefill, own) == {}
