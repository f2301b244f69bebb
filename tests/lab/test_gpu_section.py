"""Lab 06's GPU cell (`paged_kv.lab.gpu_section`) runs end to end on the CPU: Triton's interpreter, tiny
Llama-3.1-8B-shaped workloads, real kernels (lab 06's correct step-4 and step-5 kernels from its catalogue, the
package's kernel, lab 04's copy path) and a fake timer in place of `triton.testing.do_bench`. The table names
every method, a wrong kernel is reported as not matching the reference and is never timed, and the plot is
labelled."""

import pytest

from paged_kv.kernels.triton_mode import configure, triton_available

if not triton_available():
    pytest.skip("triton is not installed", allow_module_level=True)

configure()  # the interpreter on a CPU, before any kernel is decorated

from autograder.labs.lab06_triton_paged_attention.tests import bugs  # noqa: E402
from paged_kv.lab import gpu_section as gs  # noqa: E402

TINY = dict(num_seqs=2, context=64, device="cpu")


class FakeTimer:
    """Calls the timed function once (as do_bench would, at least) and says 2 ms; records what it timed."""

    def __init__(self):
        self.calls = 0

    def __call__(self, fn):
        fn()
        self.calls += 1
        return 2.0


@pytest.fixture(scope="module")
def section():
    timer = FakeTimer()
    result = gs.gpu_section(
        bugs.decode_helper_correct, bugs.decode_grid, fast_kernel=bugs.fast_helper_correct, timer=timer, **TINY
    )
    return result, timer


def test_every_method_is_checked_then_timed_at_both_block_sizes(section):
    result, timer = section
    methods = ["your kernel", "your fast kernel", gs.OURS, gs.COPY]
    assert [(r.block_size, r.method) for r in result.rows] == [(b, m) for b in (16, 256) for m in methods]
    assert all(r.ms == 2.0 and not r.note for r in result.rows), result.rows
    assert timer.calls == len(result.rows)
    w = gs.make_workload(2, 64, device="cpu")
    assert result.rows[0].gbps == pytest.approx(w.bytes_moved() / 2e-3 / 1e9)


def test_the_table_names_each_method_and_the_ratios(section):
    html = section[0].table.data
    for name in ("your kernel", "your fast kernel", "triton (paged_kv)", "gather + SDPA (lab 04 copy)", "GB/s"):
        assert name in html, name
    assert "CPU" in html and "datasheet peak ? GB/s" in html
    assert "your fast kernel takes 1.00x the package kernel's time (within the 1.5x target)" in html
    assert "lab 04's copy path takes 1.0x the time of the package kernel" in html


def test_the_plot_has_labelled_axes_and_a_title(section):
    (ax,) = section[0].figure.axes
    assert "GB/s" in ax.get_ylabel() and ax.get_xlabel() and "effective bandwidth" in ax.get_title()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["block size 16", "block size 256"]
    assert {t.get_text() for t in ax.get_legend().get_texts()} == {
        "your kernel",
        "your fast kernel",
        gs.OURS,
        gs.COPY,
    }


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # the wrong kernel's NaNs
def test_a_wrong_kernel_is_reported_not_timed():
    timer = FakeTimer()
    result = gs.gpu_section(bugs.decode_query_head_as_kv_head, bugs.decode_grid, timer=timer, **TINY)
    mine = [r for r in result.rows if r.method == "your kernel"]
    assert len(mine) == 2 and all(r.ms is None and r.gbps is None for r in mine)
    assert all("does not match the reference: wrong result" in r.note for r in mine), mine
    assert timer.calls == 4  # the package's kernel and the copy, at both block sizes
    assert "not timed: does not match the reference" in result.table.data
    (ax,) = result.figure.axes
    assert "your kernel" not in {t.get_text() for t in ax.get_legend().get_texts()}
    assert "your fast kernel" not in result.table.data  # not given: no row
