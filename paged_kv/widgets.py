"""Interactive controls for the labs (ipywidgets 7 and 8: only Dropdown, IntSlider, Button, Output, boxes)."""
from __future__ import annotations

from typing import Callable, Optional

from .ledger import GPU_MEMORY_BYTES, MODEL_PRESETS, kv_budget_bytes


def _display_figure(out, fig) -> None:
    from IPython.display import display

    with out:
        out.clear_output(wait=True)
        display(fig)


def ledger_explorer(ledger: Callable, memory_utilization: float = 0.9):
    """Model, element size, block size and context length controls that redraw the KV memory plot.

    ``ledger`` is the student's ``estimate_kv_cache_bytes``. Below the plot: bytes per token, tail waste at
    that length, and how many such requests fit on each GPU after the weights.
    """
    import ipywidgets as widgets

    from .viz import plot_kv_memory

    if not callable(ledger):
        raise TypeError(f"ledger must be a function like estimate_kv_cache_bytes, got {type(ledger).__name__}")

    model = widgets.Dropdown(options=list(MODEL_PRESETS), value="Llama-3.1-8B", description="model")
    dtype = widgets.Dropdown(options=[("fp8 (1 byte)", 1), ("bf16/fp16 (2 bytes)", 2), ("fp32 (4 bytes)", 4)],
                             value=2, description="KV dtype")
    block = widgets.Dropdown(options=[1, 8, 16, 32, 128, 256], value=16, description="block size")
    context = widgets.IntSlider(value=4096, min=256, max=131072, step=256, description="context",
                                continuous_update=False)
    out = widgets.Output()
    summary = widgets.Output()

    def redraw(*_):
        preset = MODEL_PRESETS[model.value]
        blocks = -(-context.value // block.value)
        one = ledger(blocks, block.value, preset.num_layers, preset.num_kv_heads, preset.head_dim, dtype.value)
        fig = plot_kv_memory(ledger, MODEL_PRESETS.values(), dtype_bytes=dtype.value, block_size=block.value,
                             context_len=context.value, highlight=model.value)
        _display_figure(out, fig)
        with summary:
            summary.clear_output(wait=True)
            print(f"{preset.name}: {one['kv_bytes_per_token'] / 1024:.0f} KiB per token; a {context.value}-token "
                  f"request holds {blocks} blocks, {blocks * block.value - context.value} slot(s) of tail waste.")
            for gpu, size in GPU_MEMORY_BYTES.items():
                budget = kv_budget_bytes(size, preset.weight_bytes(2), memory_utilization)
                fits = budget // one["total_cache_bytes"]
                print(f"  {gpu:>22}: {budget / 2**30:6.1f} GiB for KV after bf16 weights -> {fits} such requests")

    for control in (model, dtype, block, context):
        control.observe(redraw, names="value")
    redraw()
    return widgets.VBox([widgets.HBox([model, dtype]), widgets.HBox([block, context]), out, summary])


def decode_stepper(manager_cls, num_blocks: int = 12, prompt_len: int = 5, head_dim: int = 4,
                   second_prompt: Optional[int] = 7):
    """Buttons that decode one token at a time with the student's manager and redraw the pool."""
    import ipywidgets as widgets

    from .checks import check_positive_int
    from .manager import KVCacheManagerBase, Request
    from .viz import draw_kv_manager

    if not (isinstance(manager_cls, type) and issubclass(manager_cls, KVCacheManagerBase)):
        raise TypeError(f"manager_cls must be a KVCacheManager class (yours from the TODO), got {manager_cls!r}")
    for name, value in (("num_blocks", num_blocks), ("prompt_len", prompt_len), ("head_dim", head_dim)):
        check_positive_int(name, value)
    if second_prompt is not None:
        check_positive_int("second_prompt", second_prompt)

    block = widgets.Dropdown(options=[1, 2, 4, 8], value=4, description="block size")
    step = widgets.Button(description="decode 1 token")
    step4 = widgets.Button(description="decode 4 tokens")
    reset = widgets.Button(description="reset")
    out = widgets.Output()
    status = widgets.Output()
    state = {}

    def start(*_):
        manager = manager_cls(num_blocks, block.value, head_dim)
        reqs = [Request(0, prompt_len)] + ([Request(1, second_prompt)] if second_prompt else [])
        for req in reqs:
            manager.allocate_for_prefill(req)
        state.update(manager=manager, reqs=reqs, turn=0)
        show("after prefill")

    def show(note):
        manager, reqs = state["manager"], state["reqs"]
        _display_figure(out, draw_kv_manager(manager, reqs, title=f"block size {manager.block_size}: {note}"))
        with status:
            status.clear_output(wait=True)
            for req in reqs:
                report = manager.allocation_report(req)
                print(f"req {req.request_id}: {req.seq_len} tokens in {len(req.block_table)} blocks, "
                      f"tail waste {report['unused_tail_tokens']}, utilisation {report['utilization']:.0%}")
            print(f"free blocks: {len(manager.free_blocks)}")

    def decode(times):
        manager, reqs = state["manager"], state["reqs"]
        for _ in range(times):
            req = reqs[state["turn"] % len(reqs)]
            state["turn"] += 1
            try:
                manager.allocate_for_decode(req)
            except RuntimeError as error:
                show(f"OOM on req {req.request_id}")
                with status:
                    print(f"RuntimeError: {error}")
                return
        show(f"after {state['turn']} decode step(s)")

    step.on_click(lambda _: decode(1))
    step4.on_click(lambda _: decode(4))
    reset.on_click(start)
    block.observe(start, names="value")
    start()
    return widgets.VBox([widgets.HBox([block, step, step4, reset]), out, status])
