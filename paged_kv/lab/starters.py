"""The classes a lab's TODO class inherits from: all the given code, none of the lab's TODO methods.

A starter is built from a reference class (e.g. ``KVCacheManager``) and the class that holds its given
code (e.g. ``KVCacheManagerBase``): it copies every method of the reference except the lab's TODO
methods, which become stubs raising :class:`~paged_kv.cache.todo.TodoNotWritten`. A student's class that
calls ``super().allocate_for_prefill(req)`` therefore reaches a stub, not the reference, and earns
nothing. Each starter lists the NAMES of its TODOs in ``__todo__`` (never functions) and its reference
class in ``__starter_of__``.

In an edition of the package built for a lab (``paged_kv.cache.edition``), that reference class has no
implementation of the lab's TODOs either: they are stubs (``paged_kv.cache.todo.is_stub``), so no route
through a starter, its reference or ``with_reference_todos`` reaches an answer that is not there.
"""

from __future__ import annotations

from typing import Dict, Iterable, Optional

from paged_kv.cache.todo import TodoNotWritten, is_stub
from paged_kv.lab.i18n import _


def _function_of(attribute):
    """The plain function behind a method, classmethod, staticmethod or property getter (else None)."""
    if isinstance(attribute, (classmethod, staticmethod)):
        return attribute.__func__
    if isinstance(attribute, property):
        return attribute.fget
    return attribute if callable(attribute) and hasattr(attribute, "__code__") else None


def _todo_stub(name: str, owner: str, original):
    def stub(*args, **kwargs):
        raise TodoNotWritten(
            _(
                f"{name} is this lab's TODO: define it in your {owner} class (the answer cell), "
                "run that cell, then run this one again."
            )
        )

    stub.__name__ = stub.__qualname__ = name
    stub.__doc__ = getattr(_function_of(original), "__doc__", None)
    if isinstance(original, classmethod):
        return classmethod(stub)
    if isinstance(original, staticmethod):
        return staticmethod(stub)
    return stub


def starter(reference: type, base: type, todo: Iterable[str], name: Optional[str] = None) -> type:
    """A subclass of ``base`` with ``reference``'s other methods copied in and ``todo`` methods stubbed.

    Raises ``ValueError`` when a TODO name is not a method of ``reference``, or when a method to copy
    uses zero-argument ``super()`` (its ``__class__`` cell would still point at ``reference``).
    """
    if not (isinstance(reference, type) and isinstance(base, type) and issubclass(reference, base)):
        raise TypeError(f"reference must be a class derived from base, got {reference!r} and {base!r}")
    todo = list(todo)
    namespace: Dict[str, object] = {}
    for klass in reversed(reference.__mro__):
        if issubclass(base, klass):
            continue  # already inherited from base
        for attr, value in vars(klass).items():
            if attr in ("__dict__", "__weakref__", "__module__", "__qualname__", "__doc__"):
                continue
            func = _function_of(value)
            if func is not None and "__class__" in func.__code__.co_freevars and attr not in todo:
                raise ValueError(f"{reference.__name__}.{attr} uses super(); a starter cannot copy it")
            namespace[attr] = value
    for method in todo:
        if method not in namespace:
            raise ValueError(f"{method!r} is not a method that {reference.__name__} adds to {base.__name__}")
        namespace[method] = _todo_stub(method, reference.__name__, namespace[method])
    name = name or f"{reference.__name__}Starter"
    namespace["__todo__"] = tuple(todo)
    namespace["__starter_of__"] = reference
    namespace["__module__"] = __name__
    namespace["__doc__"] = (
        f"{reference.__name__} without {', '.join(todo)} (this lab's TODO): everything else is given."
    )
    return type(name, (base,), namespace)


def with_reference_todos(cls: type, *own: str) -> type:
    """A subclass of ``cls`` (built on a starter) running paged_kv's version of every TODO but ``own``.

    Tests one TODO on its own: ``with_reference_todos(Mine, "allocate")`` runs ``Mine.allocate`` with
    the reference's other TODO methods, so a bug elsewhere (or a TODO not written yet) cannot hide or
    cause a failure here. ``own`` must name TODO methods of the starter (none: every TODO is taken from
    the reference where it has one).

    Only what this copy of the package implements is taken: in an edition built for a lab, the lab's
    TODOs are stubs (``is_stub``) and ``cls``'s own methods stay, so in a student's handout the tests of
    one part run the student's other parts.
    """
    base = next((k for k in getattr(cls, "__mro__", ()) if "__starter_of__" in vars(k)), None)
    if base is None:
        raise TypeError(f"{cls!r} is not built on a lab starter class (paged_kv.lab.starters)")
    check_chain(cls)
    unknown = [name for name in own if name not in base.__todo__]
    if unknown:
        raise ValueError(f"{unknown} are not TODOs of {base.__name__}; its TODOs are {list(base.__todo__)}")
    given = {}
    for name in base.__todo__:
        if name in own:
            continue
        implementation = _defined(base.__starter_of__, name)
        if implementation is not None and not is_stub(implementation):
            given[name] = implementation
    label = "".join(part.title() for name in own for part in name.split("_")) or "Reference"
    return type(f"{cls.__name__}Only{label}", (cls,), {"__module__": __name__, **given})


def stale_bases(cls: type) -> list:
    """``(class, older class it is built on)`` for each class in ``cls``'s chain, defined in the notebook
    (``__main__``), that is built on a class whose notebook name now means another class: that earlier part's
    cell ran again after this one's, so this class still runs the earlier part as it was. [] when none."""
    import sys

    notebook = sys.modules.get("__main__")
    chain = [k for k in getattr(cls, "__mro__", ()) if isinstance(k, type) and k.__module__ == "__main__"]
    found = []
    for k in chain:
        for base in k.__bases__:
            if base.__module__ == "__main__" and getattr(notebook, base.__name__, base) is not base:
                found.append((k, base))
    return found


def check_chain(cls: type) -> None:
    """Raise a short ``CheckFailed`` when ``cls`` is built on an earlier part's class that was defined again
    since (``stale_bases``): which cells to run again, in order."""
    stale = stale_bases(cls)
    if not stale:
        return
    from paged_kv.lab.feedback import CheckFailed

    later, older = stale[-1]
    chain = [k.__name__ for k in reversed(cls.__mro__) if isinstance(k, type) and k.__module__ == "__main__"]
    again = chain[chain.index(later.__name__) :]
    name, old, new, cells = cls.__name__, older.__name__, later.__name__, ", ".join(again)
    raise CheckFailed(
        _(f"{name} is built on an older {old}"),
        _(f"you ran {old}'s cell again after {new}'s, so {new} still uses the {old} from before"),
        hint=_(f"run the answer cells of {cells} again, in that order, then this cell"),
    )


def _defined(klass: type, name: str):
    """The attribute ``name`` as ``klass``'s class body (or the nearest base's) defines it, unwrapped by nothing."""
    for owner in klass.__mro__:
        if name in vars(owner):
            return vars(owner)[name]
    return None


def todo_function(klass: type, name: str):
    """The plain function behind the attribute ``name`` as ``klass`` (or its nearest base) defines it, else None:
    what a reference's TODO ``name`` runs (the grader reads it to find routes to the reference)."""
    return _function_of(_defined(klass, name))


# The labs' starters (name: module, reference class, base class, TODO methods), each built on first use
# (PEP 562), so that importing this module imports only what the starter asked for needs (lab 05's block manager never imports the tutorial manager, hence never torch).
_STARTERS = {
    "KVCacheManagerWithoutPrefill": (
        "paged_kv.cache.manager",
        "KVCacheManager",
        "KVCacheManagerBase",
        ["allocate_for_prefill"],
    ),
    "KVCacheManagerWithoutDecode": (
        "paged_kv.cache.manager",
        "KVCacheManager",
        "KVCacheManagerBase",
        ["allocate_for_decode"],
    ),
    "KVCacheManagerWithoutReconstruction": (
        "paged_kv.cache.manager",
        "KVCacheManager",
        "KVCacheManagerBase",
        ["get_physical_cache"],
    ),
    "BlockManagerWithoutPrefixCache": (
        "paged_kv.cache.prefix_cache",
        "BlockManager",
        "BlockManagerBase",
        ["compute_hash", "can_allocate", "allocate", "deallocate", "_allocate_block", "hash_blocks"],
    ),
    "SchedulerWithoutSchedule": ("paged_kv.engine.scheduler", "Scheduler", "SchedulerBase", ["schedule", "preempt"]),
    "ForkingManagerWithoutFork": (
        "paged_kv.cache.forking",
        "ForkingBlockManager",
        "BlockManager",
        ["fork", "may_append"],
    ),
    "ChunkedSchedulerWithoutSchedule": (
        "paged_kv.engine.chunked",
        "ChunkedScheduler",
        "ChunkedSchedulerBase",
        ["schedule"],
    ),
}


def __getattr__(name: str) -> type:
    if name not in _STARTERS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    module_name, reference, base, todo = _STARTERS[name]
    module = importlib.import_module(module_name)
    base_class = getattr(module, base, None) or getattr(importlib.import_module("paged_kv.cache.prefix_cache"), base)
    made = starter(getattr(module, reference), base_class, todo, name)
    globals()[name] = made
    return made


def __dir__():
    return sorted(set(globals()) | set(_STARTERS))
