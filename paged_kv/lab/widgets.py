"""Interactive controls for the labs (ipywidgets 7 and 8: only Dropdown, IntSlider, Button, Output, boxes).

A widget's callbacks run outside the cell that made it, so an exception there would only reach
Jupyter's log console. Every callback here therefore catches what the student's code raises and
prints it in the widget itself, with what to do next. Labels and messages are in the notebook's language.
"""

from __future__ import annotations

from typing import Callable, Optional

from paged_kv.cache.ledger import GPU_MEMORY_BYTES, MODEL_PRESETS, kv_budget_bytes
from paged_kv.lab.i18n import N_, _


def _display_figure(out, fig) -> None:
    from IPython.display import display

    with out:
        out.clear_output(wait=True)
        display(fig)


def ledger_explorer(ledger: Callable, memory_utilization: float = 0.9, runtime_bytes: int = 0):
    """Model, element size, block size and context length controls that redraw the KV memory plot.

    ``ledger`` is the student's ``estimate_kv_cache_bytes``. Below the plot: bytes per token, tail
    waste at that length, and how many such requests fit on each GPU after the weights (an upper bound
    unless ``runtime_bytes`` holds the engine's measured activation and runtime memory). The context
    control goes from 1 token to the selected model's context (``max_context``), one token at a time:
    type a number into the box at its right.
    """
    import ipywidgets as widgets

    from paged_kv.lab.viz import plot_kv_memory

    if not callable(ledger):
        raise TypeError(f"ledger must be a function like estimate_kv_cache_bytes, got {type(ledger).__name__}")
    kv_budget_bytes(1, 0, memory_utilization, runtime_bytes)  # validates both before any widget exists

    start = MODEL_PRESETS["Llama-3.1-8B"]
    model = widgets.Dropdown(options=list(MODEL_PRESETS), value=start.name, description=_("model"))
    dtype = widgets.Dropdown(
        options=[(_("fp8 (1 byte)"), 1), (_("bf16/fp16 (2 bytes)"), 2), (_("fp32 (4 bytes)"), 4)],
        value=2,
        description=_("KV dtype"),
    )
    block = widgets.Dropdown(options=[1, 8, 16, 32, 128, 256], value=16, description=_("block size"))
    context = widgets.IntSlider(
        value=4096, min=1, max=start.max_context, step=1, description=_("context"), continuous_update=False
    )
    out = widgets.Output()
    summary = widgets.Output()
    busy = {"now": False}

    def redraw(*_change):
        if busy["now"]:
            return
        with summary:
            summary.clear_output(wait=True)
            try:
                _redraw()
            except NotImplementedError:
                print(
                    _(
                        "estimate_kv_cache_bytes is not written yet: write it in the TODO cell, run that cell, "
                        "then run this cell again."
                    )
                )
            except Exception as error:  # shown here: a widget callback's error would only reach the log console
                name = type(error).__name__
                print(
                    _(
                        f"Your estimate_kv_cache_bytes raised {name}: {error}\n"
                        "Fix it in the TODO cell, run that cell, then run this cell again."
                    )
                )

    def _redraw():
        preset = MODEL_PRESETS[model.value]
        n, size = context.value, block.value
        blocks = -(-n // size)
        one = ledger(blocks, size, preset.num_layers, preset.num_kv_heads, preset.head_dim, dtype.value)
        _display_figure(
            out,
            plot_kv_memory(
                ledger,
                MODEL_PRESETS.values(),
                dtype_bytes=dtype.value,
                block_size=size,
                context_len=n,
                highlight=model.value,
            ),
        )
        name, kib, context_len, waste = (
            preset.name,
            one["kv_bytes_per_token"] / 1024,
            preset.max_context,
            blocks * size - n,
        )
        print(
            _(
                f"{name}: {kib:g} KiB per token, context up to {context_len:,} tokens. A {n:,}-token request holds "
                f"{blocks:,} block(s) of {size}: {waste} slot(s) of tail waste."
            )
        )
        runtime_gib = runtime_bytes / 2**30
        bound = (
            _("upper bound: no activation memory") if runtime_bytes == 0 else _(f"after {runtime_gib:.2f} GiB runtime")
        )
        for gpu, gpu_bytes in GPU_MEMORY_BYTES.items():
            budget = kv_budget_bytes(gpu_bytes, preset.weight_bytes(2), memory_utilization, runtime_bytes)
            fits, gib = budget // one["total_cache_bytes"], budget / 2**30
            print(
                f"  {gpu:>22}: "
                + _(
                    f"{gib:6.1f} GiB for KV at utilisation {memory_utilization} after bf16 weights ({bound}) -> {fits:,} such requests"
                )
            )

    def model_changed(change):
        preset = MODEL_PRESETS[change["new"]]
        busy["now"] = True
        try:  # the context control never goes past the model's context
            if context.value > preset.max_context:
                context.value = preset.max_context
            context.max = preset.max_context
        finally:
            busy["now"] = False
        redraw()

    model.observe(model_changed, names="value")
    for control in (dtype, block, context):
        control.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([model, dtype]), widgets.HBox([block, context]), out, summary])


_NOT_WRITTEN = N_(
    "allocate_for_decode is not written yet: write it in the TODO cell above, run that cell, "
    "then run this cell again to get fresh buttons."
)


def decode_stepper(
    manager_cls, pool_tokens: int = 48, prompt_len: int = 5, head_dim: int = 4, second_prompt: Optional[int] = 7
):
    """Buttons that decode one token at a time with the student's manager and redraw the pool.

    The pool holds ``pool_tokens`` slots at every block size (48 blocks of 1, ..., 6 blocks of 8), so
    each size starts with room to grow. An OOM is reported in the widget; so is any other error of the
    student's ``allocate_for_decode``, and any broken invariant after a step (the picture then shows
    the state before that step).
    """
    import ipywidgets as widgets

    from paged_kv.cache.checks import check_positive_int
    from paged_kv.cache.invariants import check_kv_manager
    from paged_kv.cache.manager import KVCacheManagerBase, Request
    from paged_kv.lab.viz import draw_kv_manager

    if not (isinstance(manager_cls, type) and issubclass(manager_cls, KVCacheManagerBase)):
        raise TypeError(f"manager_cls must be a KVCacheManager class (yours from the TODO), got {manager_cls!r}")
    for name, value in (("pool_tokens", pool_tokens), ("prompt_len", prompt_len), ("head_dim", head_dim)):
        check_positive_int(name, value)
    prompts = [prompt_len] + ([check_positive_int("second_prompt", second_prompt)] if second_prompt is not None else [])
    sizes = [1, 2, 4, 8]
    for size in sizes:
        if sum(-(-p // size) for p in prompts) >= pool_tokens // size:
            raise ValueError(
                f"prompts {prompts} leave no free block in a pool of {pool_tokens} tokens at block "
                f"size {size}; use a larger pool_tokens"
            )

    block = widgets.Dropdown(options=sizes, value=4, description=_("block size"))
    step = widgets.Button(description=_("decode 1 token"))
    step4 = widgets.Button(description=_("decode 4 tokens"))
    reset = widgets.Button(description=_("reset"))
    out = widgets.Output()
    status = widgets.Output()
    state = {}

    def start(*_change):
        manager = manager_cls(pool_tokens // block.value, block.value, head_dim)
        reqs = [Request(i, p) for i, p in enumerate(prompts)]
        for req in reqs:
            manager.allocate_for_prefill(req)
        state.update(manager=manager, reqs=reqs, turn=0)
        show(_("after prefill"))

    def show(note, *messages):
        manager, reqs = state["manager"], state["reqs"]
        size = manager.block_size
        try:
            _display_figure(out, draw_kv_manager(manager, reqs, title=_(f"block size {size}: {note}")))
        except Exception as error:  # e.g. a block table holding ids outside the pool
            messages += (_(f"(cannot draw this state: {error})"),)
        with status:
            status.clear_output(wait=True)
            for req in reqs:
                report = manager.allocation_report(req)
                rid, tokens, held = req.request_id, req.seq_len, len(req.block_table)
                tail, used = report["unused_tail_tokens"], report["utilization"]
                print(_(f"req {rid}: {tokens} tokens in {held} blocks, tail {tail} slot(s), utilisation {used:.0%}"))
            free, total = len(manager.free_blocks), manager.num_blocks
            print(_(f"free blocks: {free} of {total}"))
            for message in messages:
                print(_(message))

    def decode(times):
        manager, reqs = state["manager"], state["reqs"]
        for _time in range(times):
            req = reqs[state["turn"] % len(reqs)]
            rid = req.request_id
            before = (req.seq_len, list(req.block_table), list(manager.free_blocks))
            try:
                manager.allocate_for_decode(req)
            except NotImplementedError:
                show(_("nothing decoded yet"), _NOT_WRITTEN)
                return
            except RuntimeError as error:
                state["turn"] += 1
                if "OOM" in str(error):
                    show(
                        _(f"OOM on req {rid}"),
                        _(f"OOM: req {rid} needs a new block and none is free. Your message: {error}"),
                    )
                else:
                    show(
                        _(f"error on req {rid}"),
                        _(f"Your allocate_for_decode raised RuntimeError without 'OOM' in its message: {error}"),
                    )
                return
            except Exception as error:  # shown here: a widget callback's error would only reach the log console
                name = type(error).__name__
                show(_(f"error on req {rid}"), _(f"Your allocate_for_decode raised {name}: {error}"))
                return
            try:
                check_kv_manager(manager, reqs)
            except AssertionError as error:
                req.seq_len, req.block_table[:], manager.free_blocks[:] = before  # draw the last good state
                show(
                    _(f"broken state after a step on req {rid}"),
                    _(
                        f"After allocate_for_decode on req {rid}: {error}. The picture shows the "
                        "state before that step; fix the TODO, run its cell, then run this cell again."
                    ),
                )
                return
            state["turn"] += 1
        steps = state["turn"]
        show(_(f"after {steps} decode step(s)"))

    step.on_click(lambda _button: decode(1))
    step4.on_click(lambda _button: decode(4))
    reset.on_click(start)
    block.observe(start, names="value")
    start()
    probe_manager = manager_cls(4, 1, 1)
    probe = Request(0, 1)
    probe_manager.allocate_for_prefill(probe)
    try:
        probe_manager.allocate_for_decode(probe)
    except NotImplementedError:
        show(_("after prefill"), _NOT_WRITTEN)
    except Exception:  # a real bug shows itself, in the widget, at the first click
        pass
    return widgets.VBox([widgets.HBox([block, step, step4, reset]), out, status])
