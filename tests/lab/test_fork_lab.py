"""Lab 08's helpers: sharing as plain data, caches whose values say where they came from, the savings."""

import pytest
import torch

from paged_kv.cache.forking import ForkingBlockManager
from paged_kv.cache.prefix_cache import BlockManager, Sequence
from paged_kv.cache.steps import prefill
from paged_kv.engine.forking import parallel_sample
from paged_kv.engine.model import load_tiny_model
from paged_kv.engine.forking import beam_search
from paged_kv.engine.tokenizer import encode
from paged_kv.lab.feedback import CheckFailed
from paged_kv.lab.fork_lab import (
    BEAMS_RECORDED,
    canonical_names,
    expect_reference_beams,
    fork_fields,
    make_caches,
    pool_shape,
    recorded_beam_search,
    step_computed,
)
from paged_kv.lab.fork_viz import draw_fork_tables, draw_forks, plot_beam_tree, plot_fork_memory, plot_fork_savings
from paged_kv.lab.fork_workload import PAPER_FIG15, expected_parallel_saving


def _child_that_copied():
    """A 3-token sequence (block size 2) and its fork, which appended a token: one copy pending."""
    manager = ForkingBlockManager(6, 2)
    seq = Sequence([1, 2, 3], 2)
    prefill(manager, seq)
    child = manager.fork(seq)
    child.append_token(4)
    manager.may_append(child)
    return manager, seq, child


def test_blocks_are_named_by_first_appearance_whatever_their_ids():
    assert canonical_names([[7, 3], [7, 9]]) == {7: "b0", 3: "b1", 9: "b2"}
    a, b = ForkingBlockManager(6, 2), ForkingBlockManager(6, 2)
    b.free_block_ids.remove(0)  # b hands out other ids
    b.free_block_ids.append(0)
    shapes = []
    for manager in (a, b):
        seq = Sequence([1, 2, 3], 2)
        prefill(manager, seq)
        child = manager.fork(seq)
        child.append_token(4)
        manager.may_append(child)
        shapes.append(pool_shape(manager, [seq, child]))
    assert (
        shapes[0]
        == shapes[1]
        == {
            "tables": [["b0", "b1"], ["b0", "b2"]],
            "ref counts": {"b0": 2, "b1": 1, "b2": 1},
            "free blocks": 3,
            "copies": [("b1", "b2")],
        }
    )


def test_a_copy_reads_source_then_destination_whoever_comes_first_in_the_tables():
    manager = ForkingBlockManager(6, 4)
    a = Sequence([1, 2, 3, 4, 5, 6], 4)
    prefill(manager, a)
    b = manager.fork(a)
    a.append_token(7)
    manager.may_append(a)  # a, listed first, holds the fresh block: its source is still b's
    assert pool_shape(manager, [a, b]) == {
        "tables": [["b0", "b2"], ["b0", "b1"]],
        "ref counts": {"b0": 2, "b1": 1, "b2": 1},
        "free blocks": 3,
        "copies": [("b1", "b2")],
    }
    assert canonical_names([[0, 5]], [(1, 5)]) == {0: "b0", 5: "b1"}  # a source in no table is not named
    manager.deallocate(b)
    assert pool_shape(manager, [a])["copies"] == [("block 1, in no table", "b1")]


def test_fork_fields_name_what_the_child_shares_with_its_parent():
    manager = ForkingBlockManager(6, 2)
    parent = Sequence([1, 2, 3], 2)
    prefill(manager, parent)
    parent.append_token(4)
    child = manager.fork(parent)
    fields = fork_fields(child, parent)
    assert fields == {
        "block_size": 2,
        "token_ids": [1, 2, 3, 4],
        "num_prompt_tokens": 3,
        "num_cached_tokens": 3,
        "num_scheduled_tokens": 0,
        "a Sequence": True,
        "its own seq_id": True,
        "its own token_ids list": True,
        "its own block_table list": True,
    }
    child.token_ids = parent.token_ids
    child.num_prompt_tokens = "3"
    shared = fork_fields(child, parent)
    assert not shared["its own token_ids list"] and shared["num_prompt_tokens"] == "<str>"
    assert not fork_fields(parent, parent)["its own seq_id"]
    with pytest.raises(TypeError):
        fork_fields(child, [1, 2])


def test_the_beam_search_recording_is_what_the_reference_searches_now():
    from tools.record_beam_search import SEARCHES, recording, render

    assert BEAMS_RECORDED.read_text() == render(recording()), "run: python -m tools.record_beam_search"
    text, width, max_tokens, block_size = SEARCHES[0]
    prompt = encode(text)
    results, stats = beam_search(load_tiny_model(), prompt, width, max_tokens, block_size=block_size)
    expect_reference_beams(results, stats.choices, prompt, width, max_tokens, block_size)
    assert len(recorded_beam_search(prompt, width, max_tokens, block_size)["choices"]) == max_tokens


def test_a_beam_step_that_returns_its_beams_out_of_order_leaves_the_recorded_search():
    from paged_kv.engine.forking import advance_beams
    from tools.record_beam_search import SEARCHES

    def sorted_by_parent(manager, beams, choices):
        new = advance_beams(manager, beams, choices)
        return [seq for _, seq in sorted(zip(choices, new), key=lambda pair: pair[0][0])]

    text, width, max_tokens, block_size = SEARCHES[0]
    prompt = encode(text)
    results, stats = beam_search(
        load_tiny_model(), prompt, width, max_tokens, block_size=block_size, advance=sorted_by_parent
    )
    with pytest.raises(CheckFailed, match="differ from the reference"):
        expect_reference_beams(results, stats.choices, prompt, width, max_tokens, block_size)
    with pytest.raises(KeyError):
        recorded_beam_search(prompt, width + 1, max_tokens, block_size)


def test_pool_shape_refuses_what_is_not_a_manager_or_a_sequence():
    with pytest.raises(TypeError):
        pool_shape(object(), [])
    with pytest.raises(TypeError):
        pool_shape(BlockManager(2, 2), [[1, 2]])


def test_step_computed_takes_the_copies_and_caches_the_new_tokens():
    manager, seq, child = _child_that_copied()
    assert step_computed(manager, [seq, child]) == [(1, 2)] and manager.pending_copies == []
    assert child.num_cached_tokens == 4 and manager.blocks[child.block_table[-1]].hash != -1


def test_make_caches_holds_a_different_value_everywhere():
    k, v = make_caches(3, 5, 2, 2, 4)
    values = torch.cat([t.flatten() for t in k + v])
    assert values.unique().numel() == values.numel() and k[0].shape == (5, 2, 2, 4)
    with pytest.raises(ValueError):
        make_caches(0, 4)


@pytest.mark.parametrize("prompt_len, max_tokens, n, block_size", [(10, 8, 3, 4), (16, 5, 2, 16), (7, 9, 4, 1)])
def test_the_parallel_sampling_formula_matches_a_real_run(prompt_len, max_tokens, n, block_size):
    _, stats = parallel_sample(
        load_tiny_model(), list(range(1, prompt_len + 1)), n, max_tokens, temperature=0.8, block_size=block_size
    )
    assert (stats.shared[-1], stats.independent[-1]) == expected_parallel_saving(prompt_len, max_tokens, n, block_size)


def test_the_pictures_render_and_refuse_what_they_cannot_draw():
    manager, seq, child = _child_that_copied()
    for figure in (
        draw_forks(manager, [seq, child], copies=manager.pending_copies),
        plot_beam_tree([[(0, 5), (0, 6)], [(1, 7), (1, 8)]]),
        plot_fork_memory({"a": ([1, 2], [2, 4]), "b": ([1, 1], [2, 4])}, block_size=2),
        plot_fork_savings({"beam search": {2: 0.4}}, PAPER_FIG15, "ours", "paper"),
    ):
        assert figure._repr_png_()[:4] == b"\x89PNG"
    with pytest.raises(ValueError):
        draw_forks(manager, [seq], copies=[(0, 99)])
    with pytest.raises(ValueError):
        plot_beam_tree([])


def test_a_picture_of_written_out_tables_is_the_picture_of_a_manager_in_that_state():
    manager, seq, child = _child_that_copied()
    from_manager = draw_forks(manager, [seq, child], ["a", "b"], copies=manager.pending_copies, title="t")
    written_out = draw_fork_tables(
        6, {"a": [0, 1], "b": [0, 2]}, block_size=2, seq_lens={"a": 3, "b": 4}, copies=[(1, 2)], title="t"
    )
    assert (seq.block_table, child.block_table, manager.pending_copies) == ([0, 1], [0, 2], [(1, 2)])
    assert written_out._repr_png_() == from_manager._repr_png_()
    no_copy = draw_fork_tables(6, {"a": [0, 1], "b": [0, 2]}, block_size=2, seq_lens={"a": 3, "b": 4}, title="t")
    assert no_copy._repr_png_() != written_out._repr_png_()  # the copy's arrow is drawn


@pytest.mark.parametrize(
    "tables, copies, match",
    [
        ({"a": [0, 9]}, [], "outside 0..5"),
        ({"a": [0, 1]}, [(1, 6)], "outside 0..5"),
        ({"a": [0, 1]}, [(1, 2, 3)], "pair of block ids"),
        ({"a": [0, 1]}, [("1", 2)], "pair of block ids"),
    ],
)
def test_written_out_tables_with_a_block_outside_the_pool_or_a_malformed_copy_are_refused(tables, copies, match):
    with pytest.raises(ValueError, match=match):
        draw_fork_tables(6, tables, block_size=2, copies=copies)
